#!/usr/bin/env bash
# Session 42, device call 4 (as run-s42b.sh, B=build-lean carry-build of test_cuda_attention): the final warp rule
# (12 warps only for sketch keys at head_dim 112 with 3-bit values). Every test of test_cuda_attention, memcheck /
# racecheck of the dense sketch test (small), the instances' registers / stack, then the d80 / d96 / d112 sketch
# rows (b16 x 32k) and PyTorch SDPA on the same shapes. The summary is printed last.
set -uo pipefail
OUT=${OUT:-/tmp/tkv_out}; mkdir -p "$OUT"
. bench/cuda/device_deps.sh
T0=$(date +%s)
xz -dc build-carry/tkv_dev.xz > /tmp/tkv_dev && chmod +x /tmp/tkv_dev
T=/tmp/tkv_dev
S=$OUT/summary.txt
nvidia-smi --query-gpu=name --format=csv,noheader > $S
cuobjdump --dump-resource-usage $T 2>/dev/null | grep -A1 -E "decode_h16_kernelILi(80|96|112)ELi[0-3]ELi[1-4]ELi1[26]ELb1" \
  | grep -oE "Function [^ ]+|REG:[0-9]+|STACK:[0-9]+|LOCAL:[0-9]+" | paste - - - - > $OUT/resources.txt
echo "prod/qjl dense instances: $(wc -l < $OUT/resources.txt); stack > 16 bytes: $(awk -F'STACK:' '{split($2,a,"\t"); if (a[1] > 16) n++} END {print n+0}' $OUT/resources.txt)" >> $S
timeout 330 $T > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|worst|identical" $OUT/tests.log | head -40 >> $S
for tf in 'memcheck CudaDecode.SketchKeysDense*' 'racecheck CudaDecode.SketchKeysDense*'; do
  tool=${tf%% *}; f=${tf#* }
  TURBOKV_CUDA_TEST_SMALL=1 timeout 80 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$f" > $OUT/san-$tool.log 2>&1
  echo "$tool $f rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' $OUT/san-$tool.log | tr '\n' ' ')" >> $S
done
timeout 120 $T bench --configs 80:32:8,96:32:8,112:32:8 --batches 16 --contexts 32768 --bits 2,3,4 \
  --methods tq-mse,tq-prod,qjl --csv $OUT/bench-s42d.csv > $OUT/bench.log 2>&1
echo "bench rc=$? total $(( $(date +%s) - T0 )) s" >> $S
grep -E "checked|FAILED" $OUT/bench.log | head -30 >> $S
timeout 80 python3 bench/cuda/compare_sdpa.py --ours-csv $OUT/bench-s42d.csv --csv $OUT/compare-s42d.csv > $OUT/compare.log 2>&1
echo "compare rc=$? total $(( $(date +%s) - T0 )) s" >> $S
grep -E "sdpa-|qjl|prod K|tq-mse K" $OUT/compare.log | grep -v " cc " | head -60 >> $S
cat $S
