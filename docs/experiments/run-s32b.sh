# Session 32's second device call (prepared, not run): compute-sanitizer memcheck and racecheck of the
# fractional-width decode tests on the build that run-s32a.sh left (call it within 30 s of that run, on the
# warm machine; the patch's dense rows put SPLIT on the bulk copies and mbarriers for the first time).
# Usage: export OUT && bash docs/experiments/run-s32b.sh   (lands in $OUT/s32b.tgz)
set -uo pipefail
R=/tmp/s32b; rm -rf $R; mkdir -p $R
T0=$(date +%s)
[ -d /tmp/deps ] && export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
[ -x build/tests/cuda/test_cuda_attention ] || { echo "no build: run run-s32a.sh first (warm machine)"; exit 2; }
for tool in memcheck racecheck; do
  TURBOKV_CUDA_TEST_SMALL=1 timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/cuda/test_cuda_attention --gtest_filter='*Fractional*' > $R/$tool.log 2>&1
  echo "$tool rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED' $R/$tool.log | tr '\n' ' ')"
done
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s32b.tgz -C /tmp s32b
