#!/usr/bin/env bash
# Session 40, device call 2: build; the new QJL append / decode and dequantize tests (full lengths), the
# sanitizers on them (small), then bench rows for qjl keys, tq-prod, tq-mse and dequantize at three head_dims.
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
$B/tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.Qjl*:CudaDecode.TqProd*:CudaDecode.*Reject*' > $OUT/att.log 2>&1
echo "attention rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|worst|relative" $OUT/att.log | head -20
for t in "test_cuda_attention --gtest_filter=CudaDecode.QjlKeys*" "test_cuda_append --gtest_filter=CudaDequantize.*" "test_cuda_qjl --gtest_filter=CudaQjl.Append*"; do
  for tool in memcheck racecheck; do
    TURBOKV_CUDA_TEST_SMALL=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/cuda/$t > $OUT/san.log 2>&1
    echo "$tool $t rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' $OUT/san.log | tr '\n' ' ')"
  done
done
timeout 150 $B/turbokv_cuda_bench --configs 128:32:8,64:9:3,256:4:1 --batches 16 --contexts 65536 --bits 2,3,4 \
  --methods tq-mse,tq-prod,qjl,dequantize --csv $OUT/bench-s40a.csv > $OUT/bench.log 2>&1
echo "bench rc=$?"
timeout 60 $B/turbokv_cuda_bench --configs 128:32:8 --batches 1 --contexts 32768 --bits 2,3,4 \
  --methods tq-mse,tq-prod,qjl,dequantize --csv $OUT/bench-s40a-b1.csv >> $OUT/bench.log 2>&1
echo "bench rc=$?"; grep -E "qjl|dequant|checked|FAILED" $OUT/bench.log | head -60
