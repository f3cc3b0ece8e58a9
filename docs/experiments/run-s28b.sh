# Session 28 device run s28-2 (repo root on the device, .deps carried): where the sequence-pair kernel
# (head_dim 64) stands. 1) size matrix: pairs ("tq-mse") against one sequence per block ("tq-mse (1
# seq/block)") over batch x context x GQA at 3 and 4 bits, to set the rule of when pairs run; 2) split
# sweep of the 9/3 b16 x 64k shape; 3) ncu of the pair kernel, the one-sequence d64 kernel and the d128
# kernel (instructions, issue, DRAM, bank conflicts).
# Usage: export OUT && bash docs/experiments/run-s28b.sh   (everything lands in $OUT/s28b.tgz)
set -uo pipefail
R=/tmp/s28b; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s28b.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 320 cmake --build build -j16 --target turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
B=./build/turbokv_cuda_bench
timeout 150 $B --configs 64:9:3,64:8:8,64:16:4,64:4:2 --batches 2,4,8,16,32 --contexts 8192,16384,32768,131072 --bits 3,4 --methods tq-mse --no-check --repeats 30 --csv $R/matrix.csv > $R/matrix.log 2>&1; echo "matrix rc=$? $(( $(date +%s)-T0 )) s"
tar czf $OUT/s28b.tgz -C /tmp s28b
for s in 2 3 4 5 6 7 8 10 12 16; do
  timeout 30 $B --configs 64:9:3 --batches 16 --contexts 65536 --bits 3,4 --methods tq-mse --no-check --splits $s --csv $R/split_$s.csv > $R/split_$s.log 2>&1
  echo "splits $s: $(grep -E '^decode_attention,tq-mse' $R/split_$s.csv | cut -d, -f2,3,10 | tr '\n' ' ')"
done
tar czf $OUT/s28b.tgz -C /tmp s28b
M="--metrics sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,sm__cycles_active.avg,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,smsp__inst_executed_op_shared_ld.sum,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio"
for K in "64:9:3 4 int.128, .int.4, .int.4, .int.16, .bool.0, .bool.[01], .bool.0, .int.5" "64:9:3 4 int.64, .int.4, .int.4, .int.16, .bool.0, .bool.[01], .bool.0, .int.0" "64:9:3 3 int.128, .int.3, .int.3, .int.16, .bool.0, .bool.[01], .bool.0, .int.5" "128:32:8 4 int.128, .int.4, .int.4, .int.16, .bool.0, .bool.[01], .bool.0, .int.0" "64:8:8 4 int.128, .int.4, .int.4, .int.16, .bool.0, .bool.[01], .bool.0, .int.5"; do
  set -- $K; C=$1; BITS=$2; shift 2; RX="$*"
  echo "== ncu $C bits $BITS kernel <$RX>" >> $R/ncu.txt
  timeout 120 ncu --clock-control none --kernel-name-base demangled -k "regex:decode_h16_kernel<.$RX" -c 1 $M \
    $B --configs $C --batches 16 --contexts 65536 --bits $BITS --methods tq-mse --no-check --repeats 3 >> $R/ncu.txt 2>&1
  echo "ncu $C $BITS rc=$? $(( $(date +%s)-T0 )) s"
done
grep -E "^==|decode_h16_kernel|inst_executed.sum|issue_active|dram__|duration|bank_conflicts|shared_ld|grid_size|stalled" $R/ncu.txt | head -150
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s28b.tgz -C /tmp s28b
