#!/usr/bin/env bash
# Session 41, device call 2 (warm machine: reuses build-s41 from run-s41a.sh, builds it if missing): memcheck and
# racecheck (small cases) over the new sketch-key decode, the dense Prod encode / append, qjl_append and dequantize.
set -uo pipefail
OUT=${OUT:-/tmp/tkv_out}; mkdir -p "$OUT"
. bench/cuda/device_deps.sh
B=build-s41; T0=$(date +%s)
[ -x $B/tests/cuda/test_cuda_attention ] || { cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $OUT/build.log 2>&1 &&
  cmake --build $B -j16 --target test_cuda_qjl test_cuda_attention test_cuda_append >> $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - T0 )) s"; }
for t in "test_cuda_attention --gtest_filter=CudaDecode.Sketch*:CudaDecode.QjlKeys*" "test_cuda_append --gtest_filter=CudaDequantize.*" \
         "test_cuda_qjl --gtest_filter=CudaQjl.Append*:CudaTqProd.Append*:CudaTqProd.Decode*"; do
  for tool in memcheck racecheck; do
    TURBOKV_CUDA_TEST_SMALL=1 timeout 85 compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/cuda/$t > $OUT/san.log 2>&1
    echo "$tool $t rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' $OUT/san.log | tr '\n' ' ')"
    cp $OUT/san.log "$OUT/san-$tool-$(echo $t | cut -d' ' -f1).log"
  done
done
echo "total $(( $(date +%s) - T0 )) s"
