#!/usr/bin/env bash
# Session 46, device call 4 (prepared, NOT RUN: the device refused the start and too little device time was left
# for another try): every CUDA test binary on main's final library (build-carry/tkv_dev.xz of run s46-3 =
# HEAD's code but comments: the PolarQuant encode arithmetic, warp_pack_b, the encode's launch bound).
. docs/experiments/device-prelude.sh
timeout 440 $T > $OUT/tests.txt 2>&1
echo "all tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|tests ran|SKIPPED" $OUT/tests.txt | head -20 >> $S
cat $S
