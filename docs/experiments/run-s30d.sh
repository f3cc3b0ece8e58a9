# Session 30 device run s30-5 (repo root on the device): this tree's real-data GPU test (Gemma 3 head_dim-256 layers
# through 8 and 12 warps, now with dense 128-byte 4-bit rows) and compute-sanitizer memcheck of the small
# TqMse, fp8 and KIVI decode cases (12 warps at d256 for fp8 / KIVI since session 30).
# Usage: export OUT && bash docs/experiments/run-s30d.sh   (everything lands in $OUT/s30d.tgz)
set -uo pipefail
R=/tmp/s30d; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s30d.log") 2>&1
T0=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 200 cmake --build build -j16 --target test_cuda_real test_cuda_attention test_cuda_fp8 test_cuda_kivi > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
(cd build && timeout 170 ./tests/cuda/test_cuda_real --gtest_filter='CudaReal.TqMse*:CudaReal.Fp8*:CudaReal.TqProd*') > $R/real.log 2>&1; echo "test_cuda_real rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED' $R/real.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is" -A2 $R/real.log | head -12
tar czf $OUT/s30d.tgz -C /tmp s30d
export TURBOKV_CUDA_TEST_SMALL=1
m() {  # binary, gtest filter, time limit
  (cd build && timeout $3 compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/cuda/$1 --gtest_filter="$2") > $R/mc-$1.log 2>&1
  echo "memcheck $1 $2 rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|^\[  PASSED|^\[  FAILED' $R/mc-$1.log | tr '\n' ' ')"
  tar czf $OUT/s30d.tgz -C /tmp s30d
}
m test_cuda_fp8 'CudaFp8.TensorCoreDecodeMatchesReference' 60
m test_cuda_kivi 'CudaKivi.DecodeMatchesReference' 80
m test_cuda_attention 'CudaDecode.TqMseMatchesReference' 100
echo "done $(( $(date +%s)-T0 )) s"
