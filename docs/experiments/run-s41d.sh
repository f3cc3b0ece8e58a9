#!/usr/bin/env bash
# Session 41, device call 2 without a device build: build-carry/tkv_dev.xz (docs/experiments/carry-build.sh
# test_cuda_qjl test_cuda_attention test_cuda_append at the commit that adds this script). Every test of the three
# files (the refactors of ProdQuant / matvec_t and the dequantize's vector stores), memcheck of the dequantize,
# then the dequantize rows with aligned (vector stores) and unaligned (one store per element) output.
set -uo pipefail
OUT=${OUT:-/tmp/tkv_out}; mkdir -p "$OUT"
. bench/cuda/device_deps.sh
T0=$(date +%s)
xz -dc build-carry/tkv_dev.xz > /tmp/tkv_dev && chmod +x /tmp/tkv_dev
T=/tmp/tkv_dev
nvidia-smi --query-gpu=name --format=csv,noheader
$T > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s"; grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|worst|Expected|differ" $OUT/tests.log | head -40
TURBOKV_CUDA_TEST_SMALL=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter='CudaDequantize.*' > $OUT/san-deq.log 2>&1
echo "memcheck dequantize rc=$?: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' $OUT/san-deq.log | tr '\n' ' ')"
for pass in ${PASSES:-1 2}; do
  timeout 80 $T bench --configs 128:32:8,64:9:3,256:4:1 --batches 16 --contexts 65536 --bits 2,4 \
    --methods dequantize --csv $OUT/bench-deq-$pass.csv >> $OUT/bench.log 2>&1
  echo "bench pass $pass rc=$?"
done
echo "total $(( $(date +%s) - T0 )) s"; grep -E "dequant|checked|FAILED" $OUT/bench.log | head -40
