#!/usr/bin/env bash
# Session 43, device call 1 (B=build-lean carry-build of test_cuda_vq test_cuda_vq_paged test_cuda_kivi): RVQ and
# PolarQuant at the dense head_dims (80, 96, ...: not powers of two) on the staged fp16 tensor-core kernel (kernel 0;
# was the CUDA-core kernel), one query-rotation kernel for both rotations, the encoders' shared dispatch / in-place
# dense rotation. Every test of the three binaries, the staged fallbacks (raw rows off, RVQ / PVQ / KIVI h16 off),
# memcheck / racecheck of the dense decode test (small), then rvq / polar rows at 80 / 96 / 112 / 128 (b16 x 32k,
# kernel 0 and 1 side by side) and PyTorch SDPA on the same shapes. The summary is printed last.
. docs/experiments/device-prelude.sh
cuobjdump --dump-resource-usage $T 2>/dev/null | grep -A1 -E "staged_tc_kernel" \
  | grep -oE "Function [^ ]+|REG:[0-9]+|STACK:[0-9]+|LOCAL:[0-9]+" | paste - - - - > $OUT/resources.txt
echo "staged_tc instances: $(wc -l < $OUT/resources.txt); stack > 0: $(awk -F'STACK:' '{split($2,a,"\t"); if (a[1] > 0) n++} END {print n+0}' $OUT/resources.txt)" >> $S
timeout 300 $T > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|worst|control" $OUT/tests.log | head -50 >> $S
TURBOKV_STAGED_RAW=0 TURBOKV_RVQ_H16=0 TURBOKV_PVQ_H16=0 TURBOKV_KIVI_H16=0 timeout 200 $T --gtest_filter='*Decode*' > $OUT/tests-direct.log 2>&1
echo "direct/staged tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" $OUT/tests-direct.log | head -20 >> $S
for tf in 'memcheck CudaVqPaged.DenseHeadDims*:CudaRvq.Decode*:CudaPolar.Decode*' 'racecheck CudaVqPaged.DenseHeadDims*'; do
  tool=${tf%% *}; f=${tf#* }
  TURBOKV_CUDA_TEST_SMALL=1 timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$f" > $OUT/san-$tool.log 2>&1
  echo "$tool $f rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' $OUT/san-$tool.log | tr '\n' ' ') $(( $(date +%s) - T0 )) s" >> $S
done
timeout 150 $T bench --configs 80:32:8,96:32:8,112:32:8,128:32:8 --batches 16 --contexts 32768 --bits 2,3,4 \
  --methods rvq,polar --csv $OUT/bench-s43a.csv > $OUT/bench.log 2>&1
echo "bench rc=$? total $(( $(date +%s) - T0 )) s" >> $S
grep -E "checked|FAILED" $OUT/bench.log | head -10 >> $S
timeout 80 python3 bench/cuda/compare_sdpa.py --ours-csv $OUT/bench-s43a.csv --csv $OUT/compare-s43a.csv > $OUT/compare.log 2>&1
echo "compare rc=$? total $(( $(date +%s) - T0 )) s" >> $S
grep -E "sdpa-|rvq|polar" $OUT/compare.log | head -60 >> $S
cat $S
