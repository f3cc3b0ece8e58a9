# Session 29 device run s29-6 (repo root on the device): test_cuda_real (the Gemma 3 layers, head_dim 256,
# now also through 12 warps per block); compute-sanitizer memcheck / racecheck of the Prod and fractional
# tests (small lengths; their new 12-warp cases at head_dim 256).
# Usage: export OUT && bash docs/experiments/run-s29f.sh   (everything lands in $OUT/s29f.tgz)
set -uo pipefail
R=/tmp/s29f; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s29f.log") 2>&1
T0=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 200 cmake --build build -j16 --target test_cuda_attention test_cuda_real > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
export TURBOKV_CUDA_TEST_SMALL=1
F='CudaDecode.TqProdKeysMatchReference:CudaDecode.TqMseFractionalMatchesReference'
(cd build && timeout 70 compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/cuda/test_cuda_attention --gtest_filter=$F) > $R/memcheck.log 2>&1; echo "memcheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|^\[  PASSED|^\[  FAILED' $R/memcheck.log | tr '\n' ' ')"
(cd build && timeout 70 compute-sanitizer --tool racecheck --error-exitcode 3 ./tests/cuda/test_cuda_attention --gtest_filter=$F) > $R/racecheck.log 2>&1; echo "racecheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'HAZARD|RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED' $R/racecheck.log | tail -3 | tr '\n' ' ')"
tar czf $OUT/s29f.tgz -C /tmp s29f
unset TURBOKV_CUDA_TEST_SMALL
(cd build && timeout 230 ./tests/cuda/test_cuda_real --gtest_filter='CudaReal.TqMse*:CudaReal.TqProd*') > $R/real.log 2>&1; echo "test_cuda_real rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|worst' $R/real.log | tr '\n' ' ')"
grep -E "12 warps" $R/real.log | head -20
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s29f.tgz -C /tmp s29f
