#!/usr/bin/env bash
# Session 40: failed device starts left ~7 device minutes, too few for a device build. One binary built here
# (tree of commit 462260d: test_cuda_qjl.cpp + test_cuda_attention.cpp + test_cuda_append.cpp + bench_cuda.cpp
# linked into `test_s40`, `test_s40 bench ...` = turbokv_cuda_bench), carried xz-compressed as build-carry/.
set -uo pipefail
OUT=${OUT:-/tmp/tkv_out}; mkdir -p "$OUT"
. bench/cuda/device_deps.sh
xz -dc build-carry/test_s40.xz > /tmp/test_s40 && chmod +x /tmp/test_s40
nvidia-smi --query-gpu=name --format=csv,noheader
T=/tmp/test_s40
$T --gtest_filter='CudaQjl.*:CudaTqProd.Append*:CudaDequantize.*:CudaDecode.Qjl*:CudaDecode.TqProdKeys*:CudaDecode.*Reject*' > $OUT/tests.log 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[       OK|FAILED|Failure|worst|b=" $OUT/tests.log | head -40
TURBOKV_CUDA_TEST_SMALL=1 timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='CudaDecode.QjlKeys*:CudaDequantize.Matches*:CudaQjl.AppendBytes*' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' $OUT/memcheck.log | tr '\n' ' ')"
timeout 70 $T bench --configs 128:32:8 --batches 1,16 --contexts 32768,65536 --bits 3,4 --methods qjl,dequantize \
  --csv $OUT/bench-s40c.csv > $OUT/bench.log 2>&1
echo "bench rc=$?"; grep -E "^(op|decode|dequant)|checked|FAILED" $OUT/bench.log | head -30
