# Session 26 device run s26-1 (repo root on the device, .deps carried): the checks session 25 left for
# the final encode (compute-sanitizer memcheck + racecheck of test_cuda_append, a checked pass of the
# encode rows) and ncu of the d256 3-bit encode (and d128 3-bit for contrast) with the L1 throughput
# broken down by sub-unit and per-instruction source counters: which instructions fill L1 at T = 16.
# Usage: export OUT && bash docs/experiments/run-s26.sh   (everything lands in $OUT/s26.tgz)
set -uo pipefail
R=/tmp/s26; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s26.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 250 cmake --build build -j16 --target test_cuda_append turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
tar czf $OUT/s26.tgz -C /tmp s26
B=./build/turbokv_cuda_bench
ARGS="--configs 128:32:8,64:9:3,256:4:1 --batches 16 --contexts 65536,131072 --bits 1,2,3,4 --methods encode"
timeout 90 $B $ARGS --csv $R/checked.csv > $R/checked.log 2>&1; echo "checked rc=$? $(( $(date +%s)-T0 )) s"; grep -i "checked against\|out of bounds\|FAIL" $R/checked.log | tail -3
echo "rows: $(grep -E '^encode,' $R/checked.csv | cut -d, -f3,4,5,10,14 | tr '\n' ' ')"
export TURBOKV_CUDA_TEST_SMALL=1
(cd build && timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/cuda/test_cuda_append) > $R/memcheck.log 2>&1; echo "memcheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|^\[  PASSED|^\[  FAILED' $R/memcheck.log | tr '\n' ' ')"
(cd build && timeout 150 compute-sanitizer --tool racecheck --error-exitcode 3 ./tests/cuda/test_cuda_append) > $R/racecheck.log 2>&1; echo "racecheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'HAZARD|RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED' $R/racecheck.log | tail -3 | tr '\n' ' ')"
unset TURBOKV_CUDA_TEST_SMALL
tar czf $OUT/s26.tgz -C /tmp s26
for cfg in 256:4:1 128:32:8; do
  d=${cfg%%:*}
  timeout 120 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables --section SourceCounters \
    --metrics breakdown:l1tex__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,smsp__inst_executed_op_shfl.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__inst_executed.sum \
    -k regex:append_kernel --launch-skip 3 --launch-count 1 -o $R/ncu_d${d}_3 \
    $B --configs $cfg --batches 16 --contexts 65536 --bits 3 --methods encode --no-check > $R/ncu_d${d}_3.log 2>&1
  echo "ncu d$d rc=$? $(( $(date +%s)-T0 )) s"
  ncu -i $R/ncu_d${d}_3.ncu-rep --page details > $R/ncu_d${d}_3_details.txt 2>&1
  ncu -i $R/ncu_d${d}_3.ncu-rep --page source --csv --print-source sass > $R/ncu_d${d}_3_sass.csv 2>&1
  echo "  exports rc=$? lines $(wc -l < $R/ncu_d${d}_3_sass.csv)"
  grep -E "l1tex__|Duration|L1/TEX Cache|Shared|shfl|inst_executed" $R/ncu_d${d}_3_details.txt | head -60
  tar czf $OUT/s26.tgz -C /tmp s26
done
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s26.tgz -C /tmp s26
