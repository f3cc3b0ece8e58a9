#!/usr/bin/env bash
# Session 42, device call 6 (B=build-lean carry-build of test_cuda_attention at the commit that adds this script):
# after a review, the dense sketch test covers every (MSE part, value width) instance at 80 / 96 / 112 (it had run
# half of them), and the 2-byte scalar loads are taken at page_size 1 only. That test, memcheck of it (small), and
# the other sketch tests; the summary is printed last.
set -uo pipefail
OUT=${OUT:-/tmp/tkv_out}; mkdir -p "$OUT"
. bench/cuda/device_deps.sh
T0=$(date +%s)
xz -dc build-carry/tkv_dev.xz > /tmp/tkv_dev && chmod +x /tmp/tkv_dev
S=$OUT/summary.txt
nvidia-smi --query-gpu=name --format=csv,noheader > $S
timeout 200 /tmp/tkv_dev --gtest_filter='CudaDecode.Sketch*:CudaDecode.TqProd*:CudaDecode.Qjl*' > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|^\[       OK|Failure|worst|identical" $OUT/tests.log | head -30 >> $S
TURBOKV_CUDA_TEST_SMALL=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/tkv_dev \
  --gtest_filter='CudaDecode.SketchKeysDense*' > $OUT/san-memcheck.log 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' $OUT/san-memcheck.log | tr '\n' ' ') $(( $(date +%s) - T0 )) s" >> $S
cat $S
