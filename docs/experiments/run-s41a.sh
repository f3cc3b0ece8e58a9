#!/usr/bin/env bash
# Session 41, device call 1: build (kept in build-s41 for a second call on a warm machine); session 40's compiled-only
# tests (QJL append / decode, dequantize) and this session's (TurboQuant-Prod at dense head_dims: encode, append,
# scores, contiguous decode; sketch keys on the CUDA-core paged kernel) at full lengths; bench rows for qjl keys
# and dequantize at three head_dims.
set -uo pipefail
OUT=${OUT:-/tmp/tkv_out}; mkdir -p "$OUT"
. bench/cuda/device_deps.sh
B=build-s41; T0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $OUT/build.log 2>&1 &&
  cmake --build $B -j16 --target turbokv_cuda_bench test_cuda_qjl test_cuda_attention test_cuda_append >> $OUT/build.log 2>&1
echo "build rc=$? $(( $(date +%s) - T0 )) s"; grep -E " error" -A3 $OUT/build.log | head -20
nvidia-smi --query-gpu=name --format=csv,noheader
$B/tests/cuda/test_cuda_qjl > $OUT/qjl.log 2>&1; echo "test_cuda_qjl rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|Expected|differ" $OUT/qjl.log | head -20
$B/tests/cuda/test_cuda_append --gtest_filter='CudaDequantize.*' > $OUT/deq.log 2>&1; echo "dequantize rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|Failure" $OUT/deq.log | head
$B/tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.Qjl*:CudaDecode.TqProd*:CudaDecode.Sketch*:CudaDecode.*Reject*' > $OUT/att.log 2>&1
echo "attention rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|worst|relative|Expected" $OUT/att.log | head -30
echo "tests done $(( $(date +%s) - T0 )) s"
timeout 120 $B/turbokv_cuda_bench --configs 128:32:8,64:9:3,256:4:1 --batches 16 --contexts 65536 --bits 2,3,4 \
  --methods tq-mse,qjl,dequantize --csv $OUT/bench-s41a.csv > $OUT/bench.log 2>&1
echo "bench rc=$?"
timeout 40 $B/turbokv_cuda_bench --configs 128:32:8 --batches 1 --contexts 32768 --bits 2,4 \
  --methods tq-mse,qjl,dequantize --csv $OUT/bench-s41a-b1.csv >> $OUT/bench.log 2>&1
echo "bench rc=$?"
timeout 100 $B/turbokv_cuda_bench --configs 96:32:8,80:20:4 --batches 4 --contexts 16384 --bits 2,3,4 \
  --methods tq-mse,tq-prod,qjl --csv $OUT/bench-s41a-dense.csv >> $OUT/bench.log 2>&1
echo "bench rc=$? total $(( $(date +%s) - T0 )) s"; grep -E "qjl|prod|dequant|checked|FAILED" $OUT/bench.log | head -60
