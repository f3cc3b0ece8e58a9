# Session 31 device run s31-2 (after run-s31a.sh on the warm machine: reuses ./build): every GPU test
# (ctest -L cuda: session 30's unrun cases and the new KIVI long-split test), then memcheck of KIVI's and
# fp8's small decode cases.
# Usage: export OUT && bash docs/experiments/run-s31b.sh   (everything lands in $OUT/s31b.tgz)
set -uo pipefail
R=/tmp/s31b; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s31b.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps
[ -d $PREFIX/usr ] && export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
[ -x build/tests/cuda/test_cuda_kivi ] || { echo "no build: run run-s31a.sh first"; exit 1; }
(cd build && timeout 480 ctest -L cuda --output-on-failure --timeout 400) > $R/ctest.log 2>&1
echo "ctest rc=$? $(( $(date +%s)-T0 )) s"; grep -E "tests passed|Test +#|\*\*\*" $R/ctest.log | head -20
grep -E "FAILED|Failure|Expected|Which is|worst|relative error" $R/ctest.log | head -40
tar czf $OUT/s31b.tgz -C /tmp s31b
TURBOKV_CUDA_TEST_SMALL=1 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/cuda/test_cuda_kivi --gtest_filter='*Decode*' > $R/memcheck.log 2>&1
echo "memcheck kivi decode (small) rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY' $R/memcheck.log | tr '\n' ' ')"
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s31b.tgz -C /tmp s31b
