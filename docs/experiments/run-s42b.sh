#!/usr/bin/env bash
# Session 42, device call 2 without a device build: build-carry/tkv_dev.xz (B=build-lean
# docs/experiments/carry-build.sh test_cuda_attention, a -DTURBOKV_CUDA_PTX=OFF library of this commit) carried.
# Sketch keys (TurboQuant-Prod, QJL) on the fp16 tensor-core kernel at head_dim 80, 96, 112: every test of
# test_cuda_attention, memcheck / racecheck of the new instances (small), their registers / spills, then bench rows
# (the tensor-core rows next to kernel 1 and TurboQuant-MSE) and PyTorch SDPA on the same shapes.
set -uo pipefail
OUT=${OUT:-/tmp/tkv_out}; mkdir -p "$OUT"
. bench/cuda/device_deps.sh
T0=$(date +%s)
xz -dc build-carry/tkv_dev.xz > /tmp/tkv_dev && chmod +x /tmp/tkv_dev
T=/tmp/tkv_dev
nvidia-smi --query-gpu=name --format=csv,noheader
cuobjdump --dump-resource-usage $T 2>/dev/null | grep -A1 -E "decode_h16_kernelILi(80|96|112)ELi[0-3]ELi[1-4]ELi16ELb1" \
  | grep -oE "Function [^ ]+|REG:[0-9]+|STACK:[0-9]+|LOCAL:[0-9]+" | paste - - - - > $OUT/resources.txt
echo "prod/qjl dense instances: $(wc -l < $OUT/resources.txt); max REG $(grep -o 'REG:[0-9]*' $OUT/resources.txt | cut -d: -f2 | sort -n | tail -1); nonzero LOCAL: $(grep -c 'LOCAL:[1-9]' $OUT/resources.txt)"
timeout 330 $T > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s"; grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|worst|Expected|differ|identical" $OUT/tests.log | head -50
for tf in 'memcheck CudaDecode.SketchKeysDense*' 'racecheck CudaDecode.SketchKeysDense*'; do
  tool=${tf%% *}; f=${tf#* }
  TURBOKV_CUDA_TEST_SMALL=1 timeout 80 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$f" > $OUT/san.log 2>&1
  echo "$tool $f rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' $OUT/san.log | tr '\n' ' ')"
  cp $OUT/san.log "$OUT/san-$tool.log"
done
echo "sanitizers done $(( $(date +%s) - T0 )) s"
timeout 150 $T bench --configs 96:32:8,80:32:8,112:32:8,128:32:8 --batches 16 --contexts 32768 --bits 2,3,4 \
  --methods tq-mse,tq-prod,qjl --csv $OUT/bench-s42b.csv > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - T0 )) s"; grep -E "prod keys|qjl keys|tq-mse  |checked|FAILED" $OUT/bench.log | head -60
timeout 80 python3 bench/cuda/compare_sdpa.py --ours-csv $OUT/bench-s42b.csv --csv $OUT/compare-s42b.csv > $OUT/compare.log 2>&1
echo "compare rc=$? total $(( $(date +%s) - T0 )) s"; grep -E "prod|qjl|sdpa|SDPA" $OUT/compare.log | head -60
