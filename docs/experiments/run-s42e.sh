#!/usr/bin/env bash
# Session 42, device call 5: B=build-lean carry-build of test_cuda_append test_cuda_attention test_cuda_qjl
# test_cuda_vq test_cuda_vq_paged at the commit that adds this script (detail::upload_rotation: one home for the
# tables' rotation upload, TqMseTables / QjlTables / RvqTables / PvqTables / PolarTables). Every test of the five
# files; the summary is printed last.
set -uo pipefail
OUT=${OUT:-/tmp/tkv_out}; mkdir -p "$OUT"
. bench/cuda/device_deps.sh
T0=$(date +%s)
xz -dc build-carry/tkv_dev.xz > /tmp/tkv_dev && chmod +x /tmp/tkv_dev
S=$OUT/summary.txt
nvidia-smi --query-gpu=name --format=csv,noheader > $S
timeout 480 /tmp/tkv_dev > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|worst|measured" $OUT/tests.log | head -40 >> $S
cat $S
