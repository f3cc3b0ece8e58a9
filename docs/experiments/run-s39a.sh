# Session 39, device call 1: build this tree (library, bench, every CUDA test); the new tq_prod_append tests and
# the rest of test_cuda_qjl at full lengths; CudaDecode.TqProd* at full lengths (session 38's last edits, compiled
# only then); memcheck and racecheck of the append tests; then the sanitizer loop over every CUDA test with
# TURBOKV_CUDA_TEST_SMALL=1 while time allows (bench/cuda/run_device.sh sanitize does the same loop).
# Usage: export OUT && bash docs/experiments/run-s39a.sh   (carry .deps; output $OUT/s39a.tgz)
set -uo pipefail
R=/tmp/s39a; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s39a.log") 2>&1
T0=$(date +%s)
. bench/cuda/device_deps.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
TESTS="test_cuda_pack test_cuda_append test_cuda_attention test_cuda_qjl test_cuda_vq test_cuda_real test_cuda_fp8 test_cuda_kivi test_cuda_vq_paged"
timeout 330 cmake --build build -j16 --target turbokv_cuda_bench $TESTS > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
grep -E "error" -A3 $R/build.log | head -20
TD=build/tests/cuda
timeout 150 $TD/test_cuda_qjl > $R/test-qjl.log 2>&1; echo "test_cuda_qjl rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  (PASSED|FAILED)|tests ran' $R/test-qjl.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|FAILED|differ|mismatch" $R/test-qjl.log | head -12
tar czf $OUT/s39a.tgz -C /tmp s39a
timeout 150 $TD/test_cuda_attention --gtest_filter='CudaDecode.TqProd*' > $R/test-prod.log 2>&1; echo "TqProd decode rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  (PASSED|FAILED)|worst' $R/test-prod.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is" $R/test-prod.log | head -8
for tool in memcheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 $TD/test_cuda_qjl --gtest_filter='CudaTqProd.Append*' > $R/$tool-append.log 2>&1
  echo "$tool CudaTqProd.Append* rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' $R/$tool-append.log | tr '\n' ' ')"
done
tar czf $OUT/s39a.tgz -C /tmp s39a
# The loop over every CUDA test, small cases, while the call has time (each test capped).
for t in $TESTS; do
  for tool in memcheck racecheck; do
    left=$(( 560 - ($(date +%s)-T0) ))
    [ $left -lt 40 ] && { echo "skip $tool $t (time)"; continue; }
    cap=$(( left < 150 ? left - 10 : 150 ))
    TURBOKV_CUDA_TEST_SMALL=1 timeout $cap compute-sanitizer --tool $tool --error-exitcode 9 $TD/$t > $R/$tool-$t.log 2>&1
    echo "$tool $t rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' $R/$tool-$t.log | tr '\n' ' ')"
  done
  tar czf $OUT/s39a.tgz -C /tmp s39a
done
echo "done $(( $(date +%s)-T0 )) s"
