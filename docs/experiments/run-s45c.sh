#!/usr/bin/env bash
# Session 45, device call 3 (prepared, NOT RUN: three refused starts used the last device minutes): every CUDA test of main's code (c2ec7c5's library; tkv_dev of all nine tests/cuda TUs,
# `B=build-lean bash docs/experiments/carry-build.sh test_cuda_append test_cuda_attention test_cuda_fp8 test_cuda_kivi
# test_cuda_pack test_cuda_qjl test_cuda_real test_cuda_vq test_cuda_vq_paged`), then the staged decodes again with
# raw rows off (TURBOKV_STAGED_RAW=0). The summary is printed last.
. docs/experiments/device-prelude.sh
timeout 420 $T > $OUT/tests.txt 2>&1
echo "all tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|tests ran|SKIPPED" $OUT/tests.txt | head -20 >> $S
TURBOKV_STAGED_RAW=0 timeout 100 $T --gtest_filter='CudaVqPaged.*Decode*:CudaPolar.Decode*:CudaKivi.*Decode*' > $OUT/tests-noraw.log 2>&1
echo "raw rows off rc=$? $(( $(date +%s) - T0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/tests-noraw.log | tr '\n' ' ')" >> $S
rm -f $OUT/*.log
cat $S
