#!/usr/bin/env bash
# Session 44, device call 3 (B=build-lean carry-build of test_cuda_real test_cuda_append test_cuda_vq
# test_cuda_vq_paged, library of commit 66364f0, the code run s44-2 ran): the real-KV and append tests (PolarQuant
# decodes real caches there; its tables' layout changed), then where the staged fp16 kernel
# spends its time now with PolarQuant's new format (one radius group per lane, compile-time widths, interleaved
# tables): ncu of one staged_tc_kernel launch at d128 32/8 b16 x 32k 3 bits (the sections of run s43-5, whose
# profile of the old format is in docs/CUDA_NOTES.md "Session 43"), then PolarQuant rows at the other head_dims of the
# fp16 kernel (144..240, b16 x 32k) with PyTorch SDPA on the same shapes. The summary is printed last.
. docs/experiments/device-prelude.sh
timeout 200 $T --gtest_filter="CudaReal.*:CudaAppend.*:CudaDequantize.*" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|^\[       OK|SKIP|olar" $OUT/tests.log | head -30 >> $S
timeout 150 ncu --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats \
  --section InstructionStats --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters \
  -k regex:staged_tc_kernel --launch-skip 3 --launch-count 1 \
  $T bench --configs 128:32:8 --batches 16 --contexts 32768 --bits 3 --methods polar --no-check --repeats 5 > $OUT/ncu-polar.log 2>&1
echo "ncu polar rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Issue Slots Busy|Eligible Warps|Issued Warp|No Eligible|Warp Cycles Per Issued|Executed Instructions  |Shared Memory Configuration Size|Dynamic Shared" $OUT/ncu-polar.log | head -24 >> $S
grep -iE "stall|bottleneck|est\. speedup|excessive|uncoalesced|bank" $OUT/ncu-polar.log | head -16 >> $S
timeout 150 $T bench --configs 144:32:8,160:32:8,176:32:8,208:32:8,224:32:8,240:32:8 --batches 16 --contexts 32768 --bits 2,3,4 \
  --methods polar --csv $OUT/bench-s44c.csv > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - T0 )) s: $(grep -E 'checked' $OUT/bench.log | tail -1)" >> $S
timeout 100 python3 bench/cuda/compare_sdpa.py --ours-csv $OUT/bench-s44c.csv --csv $OUT/compare-s44c.csv > $OUT/compare.log 2>&1
echo "compare rc=$? total $(( $(date +%s) - T0 )) s" >> $S
grep -E "sdpa-|polar" $OUT/compare.log | head -60 >> $S
cat $S
