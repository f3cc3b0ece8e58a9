#!/usr/bin/env bash
# Session 43, device call 5 (the binary of run s43-4, commit 12c227c; no code change): where the staged fp16
# tensor-core decode (staged_tc_kernel, src/cuda/staged.cuh) spends its time. PolarQuant at d128 32/8 b16 x 32k
# 3 bits (0.39-0.42x cuDNN SDPA in run s43-1): ncu of one launch (speed of light, occupancy, scheduler and warp
# state statistics, instruction statistics, source counters' top stall locations), and the same for KIVI's staged
# kernel (TURBOKV_KIVI_H16=0) as a second format. For the next session's work on the staged kernel.
. docs/experiments/device-prelude.sh
for m in polar kivi; do
  env $( [ $m = kivi ] && echo TURBOKV_KIVI_H16=0 ) timeout 150 ncu --section SpeedOfLight --section Occupancy \
    --section SchedulerStats --section WarpStateStats --section InstructionStats --section LaunchStats \
    --section MemoryWorkloadAnalysis --section SourceCounters -k regex:staged_tc_kernel --launch-skip 3 --launch-count 1 \
    $T bench --configs 128:32:8 --batches 16 --contexts 32768 --bits 3 --methods $m --no-check --repeats 5 > $OUT/ncu-$m.log 2>&1
  echo "ncu $m rc=$? $(( $(date +%s) - T0 )) s" >> $S
  grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Issue Slots Busy|Eligible Warps|Issued Warp|No Eligible|Warp Cycles Per Issued|Executed Instructions  |Shared Memory Configuration Size|Dynamic Shared" $OUT/ncu-$m.log | head -24 >> $S
  grep -iE "stall|bottleneck|est\. speedup" $OUT/ncu-$m.log | head -12 >> $S
done
cat $S
