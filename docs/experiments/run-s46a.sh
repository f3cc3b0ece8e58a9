#!/usr/bin/env bash
# Session 46, device call 1: every CUDA test on the tree with PolarQuant's new encode arithmetic (formats.h
# polar_radius / polar_cell1 / polar_cell_hi instead of fp64 atan2 / hypot; build-carry/tkv_dev.xz =
# `B=build-lean bash docs/experiments/carry-build.sh <all nine tests/cuda TUs>`), memcheck of the PolarQuant
# encode / append tests, and the bench's PolarQuant rows (decode and the new encode row, every result checked).
. docs/experiments/device-prelude.sh
timeout 420 $T > $OUT/tests.txt 2>&1
echo "all tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|tests ran|SKIPPED" $OUT/tests.txt | head -20 >> $S
TURBOKV_CUDA_TEST_SMALL=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='CudaPolar.Encode*:CudaVqPaged.AppendBytes*:CudaReal.Polar*' > $OUT/san-memcheck.log 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' $OUT/san-memcheck.log | tr '\n' ' ') $(( $(date +%s) - T0 )) s" >> $S
timeout 120 $T bench --configs 64:9:3,128:32:8,256:4:1 --batches 16 --contexts 32768 --bits 2,3,4 --methods polar \
  --csv $OUT/bench-polar.csv > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - T0 )) s: $(grep -E 'checked' $OUT/bench.log | tail -1)" >> $S
grep -E "encode|CHECK" $OUT/bench.log | head -20 >> $S
rm -f $OUT/*.log
cat $S
