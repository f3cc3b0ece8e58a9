# Session 28 device run s28-7 (repo root on the device, .deps carried): review follow-ups. test_cuda_attention
# TqMse* with unwritten pool bytes 0x7E (fp16 NaN norms) and page-table entries past each sequence's
# last page far outside the pools; test_cuda_append with 32 new tokens (two KIVI key groups); memcheck
# of TqMseMatchesReference (small lengths).
# Usage: export OUT && bash docs/experiments/run-s28g.sh   (everything lands in $OUT/s28g.tgz)
set -uo pipefail
R=/tmp/s28g; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s28g.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 200 cmake --build build -j16 --target test_cuda_attention test_cuda_append > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
(cd build && timeout 100 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMse*:CudaDecode.Rejects*') > $R/attn.log 2>&1; echo "test_cuda_attention rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|worst' $R/attn.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|error" $R/attn.log | head -20
(cd build && timeout 60 ./tests/cuda/test_cuda_append --gtest_filter='CudaAppend.OtherAppends*') > $R/append.log 2>&1; echo "test_cuda_append rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|bad-input flag' $R/append.log | tr '\n' ' ')"
tar czf $OUT/s28g.tgz -C /tmp s28g
(cd build && TURBOKV_CUDA_TEST_SMALL=1 timeout 80 compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMseMatchesReference') > $R/memcheck.log 2>&1; echo "memcheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|^\[  PASSED|^\[  FAILED' $R/memcheck.log | tr '\n' ' ')"
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s28g.tgz -C /tmp s28g
