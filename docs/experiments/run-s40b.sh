#!/usr/bin/env bash
# Session 40: the lean version of run-s40a.sh (failed device starts left ~10 device minutes): build the three
# test binaries and the bench; the QJL append / decode and dequantize tests; memcheck of the new decode and
# dequantize tests (small); bench rows qjl keys / tq-prod / tq-mse / dequantize at d128 b16 x 64k and b1 x 32k.
set -uo pipefail
OUT=${OUT:-/tmp/tkv_out}; mkdir -p "$OUT"
. bench/cuda/device_deps.sh
B=/tmp/tkv_build; T0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $OUT/build.log 2>&1 &&
  cmake --build $B -j16 --target turbokv_cuda_bench test_cuda_qjl test_cuda_attention test_cuda_append >> $OUT/build.log 2>&1
echo "build rc=$? $(( $(date +%s) - T0 )) s"; grep -E " error" -A3 $OUT/build.log | head -20
nvidia-smi --query-gpu=name --format=csv,noheader
$B/tests/cuda/test_cuda_qjl > $OUT/qjl.log 2>&1; echo "test_cuda_qjl rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|Failure" $OUT/qjl.log | head
$B/tests/cuda/test_cuda_append --gtest_filter='CudaDequantize.*' > $OUT/deq.log 2>&1; echo "dequantize rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|b=" $OUT/deq.log | head
$B/tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.Qjl*:CudaDecode.TqProdKeys*:CudaDecode.*Reject*' > $OUT/att.log 2>&1
echo "attention rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|worst|relative" $OUT/att.log | head -20
for t in "test_cuda_attention --gtest_filter=CudaDecode.QjlKeys*" "test_cuda_append --gtest_filter=CudaDequantize.*"; do
  TURBOKV_CUDA_TEST_SMALL=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/cuda/$t > $OUT/san.log 2>&1
  echo "memcheck $t rc=$?: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' $OUT/san.log | tr '\n' ' ')"
done
timeout 90 $B/turbokv_cuda_bench --configs 128:32:8 --batches 1,16 --contexts 32768,65536 --bits 3,4 \
  --methods tq-prod,qjl,dequantize --csv $OUT/bench-s40b.csv > $OUT/bench.log 2>&1
echo "bench rc=$?"; grep -E "fp16|qjl|prod keys  |dequant|checked|FAILED" $OUT/bench.log | head -40
