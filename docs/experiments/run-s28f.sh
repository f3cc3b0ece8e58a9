# Session 28 device run s28-6 (repo root on the device, .deps carried): the bad-input flag of the other
# appends (fp8, RVQ, product VQ, PolarQuant, KIVI; bad_input.cu). test_cuda_append (incl.
# OtherAppendsFlagWhatTheReferenceRejects), the method test binaries whose appends gained the parameter,
# memcheck of the new test.
# Usage: export OUT && bash docs/experiments/run-s28f.sh   (everything lands in $OUT/s28f.tgz)
set -uo pipefail
R=/tmp/s28f; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s28f.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 300 cmake --build build -j16 --target test_cuda_append test_cuda_fp8 test_cuda_kivi test_cuda_vq_paged > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
for t in test_cuda_append test_cuda_fp8 test_cuda_kivi test_cuda_vq_paged; do
  (cd build && timeout 150 ./tests/cuda/$t) > $R/$t.log 2>&1; echo "$t rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|bad-input flag' $R/$t.log | tr '\n' ' ')"
done
grep -E "Failure|Expected|Which is|input=" $R/test_cuda_append.log | head -30
tar czf $OUT/s28f.tgz -C /tmp s28f
(cd build && timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/cuda/test_cuda_append --gtest_filter='CudaAppend.OtherAppends*') > $R/memcheck.log 2>&1; echo "memcheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|^\[  PASSED|^\[  FAILED' $R/memcheck.log | tr '\n' ' ')"
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s28f.tgz -C /tmp s28f
