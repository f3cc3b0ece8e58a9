#!/usr/bin/env bash
# Session 43, device call 6 (B=build-lean carry-build of all nine CUDA test files, the library of commit 12c227c;
# HEAD's library differs from it in comments only): every GPU test on the session's final code, one binary. The
# summary is printed last.
. docs/experiments/device-prelude.sh
timeout 500 $T > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[==========\]|^\[  (PASSED|FAILED)|^\[  FAILED|^\[  SKIPPED|Failure" $OUT/tests.log | head -30 >> $S
grep -cE "^\[       OK" $OUT/tests.log | sed 's/^/tests OK: /' >> $S
cat $S
