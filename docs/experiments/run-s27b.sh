# Session 27 device run s27-2: ncu of the 3-bit encode from fp16 input at head_dim 128 and 256 (run s27-1's
# kernel filter did not match the demangled names), and from fp32 at head_dim 128 for contrast.
# Usage: export OUT && bash docs/experiments/run-s27b.sh   (everything lands in $OUT/s27b.tgz)
set -uo pipefail
R=/tmp/s27b; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s27b.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 250 cmake --build build -j16 --target turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
B=./build/turbokv_cuda_bench
for v in 128:__half 256:__half 128:float; do
  d=${v%%:*}; t=${v##*:}
  cfg=$([ $d = 256 ] && echo 256:4:1 || echo 128:32:8)
  timeout 120 ncu --clock-control none --kernel-name-base demangled -k "regex:append_kernel<.int.$d, .int.3, .bool.1, $t" --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats --section SourceCounters \
    --metrics breakdown:l1tex__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,smsp__inst_executed.sum \
    -o $R/ncu_d${d}_$t $B --configs $cfg --batches 16 --contexts 65536 --bits 3 --methods encode --no-check > $R/ncu_d${d}_$t.log 2>&1
  echo "ncu d$d $t rc=$? $(( $(date +%s)-T0 )) s"
  ncu -i $R/ncu_d${d}_$t.ncu-rep --page details > $R/ncu_d${d}_${t}_details.txt 2>&1
  ncu -i $R/ncu_d${d}_$t.ncu-rep --page source --csv --print-source sass > $R/ncu_d${d}_${t}_sass.csv 2>&1
  grep -E "l1tex__throughput.avg|Duration|Issue Slots Busy|Issued Ipc|L1/TEX Cache Throughput|inst_executed.sum|No Eligible|Stall" $R/ncu_d${d}_${t}_details.txt | head -20
  tar czf $OUT/s27b.tgz -C /tmp s27b
done
echo "done $(( $(date +%s)-T0 )) s"
