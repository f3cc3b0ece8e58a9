# Session 27 device run s27-7 (repo root on the device, .deps carried): the final append.cu (the first
# fractional part no longer loads a norm it ignored) and test (NaN / Inf placed in part 0 / part 1 of a
# fractional width, head_dim 256 at 3.5 bits added): test_cuda_append, compute-sanitizer memcheck and
# initcheck of it.
# Usage: export OUT && bash docs/experiments/run-s27g.sh   (everything lands in $OUT/s27g.tgz)
set -uo pipefail
R=/tmp/s27g; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s27g.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 200 cmake --build build -j16 --target test_cuda_append > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
(cd build && timeout 60 ./tests/cuda/test_cuda_append) > $R/append.log 2>&1; echo "test_cuda_append rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]' $R/append.log | tr '\n' ' ')"
tar czf $OUT/s27g.tgz -C /tmp s27g
(cd build && timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/cuda/test_cuda_append --gtest_filter='*Flags*:*Fractional*') > $R/memcheck.log 2>&1; echo "memcheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|^\[  PASSED|^\[  FAILED' $R/memcheck.log | tr '\n' ' ')"
(cd build && timeout 60 compute-sanitizer --tool initcheck --error-exitcode 3 ./tests/cuda/test_cuda_append --gtest_filter='*Flags*:*Fractional*') > $R/initcheck.log 2>&1; echo "initcheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|^\[  PASSED|^\[  FAILED' $R/initcheck.log | tr '\n' ' ')"
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s27g.tgz -C /tmp s27g
