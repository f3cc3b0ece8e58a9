# Session 27 device run s27-1 (repo root on the device, .deps carried): the encode from fp32, fp16 and
# bf16 input (the bench's new 16-bit encode rows), a checked pass and a second unchecked pass, then ncu
# of the d128 and d256 3-bit encode from fp16 input (L1 breakdown + source counters): is the 16-bit
# path bound by the L1 data pipe, as the fp32 one was before session 26's staging, or by issue?
# Usage: export OUT && bash docs/experiments/run-s27.sh   (everything lands in $OUT/s27.tgz)
set -uo pipefail
R=/tmp/s27; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s27.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 250 cmake --build build -j16 --target test_cuda_append turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
tar czf $OUT/s27.tgz -C /tmp s27
B=./build/turbokv_cuda_bench
ARGS="--configs 128:32:8,64:9:3,256:4:1 --batches 16 --contexts 65536 --bits 1,2,3,4 --methods encode"
timeout 120 $B $ARGS --csv $R/checked.csv > $R/checked.log 2>&1; echo "checked rc=$? $(( $(date +%s)-T0 )) s"; grep -i "checked against\|out of bounds\|FAIL" $R/checked.log | tail -3
timeout 100 $B $ARGS --no-check --csv $R/pass2.csv > $R/pass2.log 2>&1; echo "pass2 rc=$? $(( $(date +%s)-T0 )) s"
for f in checked pass2; do echo "$f:"; grep -E '^encode,' $R/$f.csv | cut -d, -f2,3,5,10,14 | tr '\n' ' '; echo; done
(cd build && timeout 100 ./tests/cuda/test_cuda_append) > $R/test_append.log 2>&1; echo "test_cuda_append rc=$? $(tail -1 $R/test_append.log)"
tar czf $OUT/s27.tgz -C /tmp s27
for d in 256 128; do
  cfg=$([ $d = 256 ] && echo 256:4:1 || echo 128:32:8)
  timeout 120 ncu --clock-control none --kernel-name-base demangled -k "regex:append_kernel<$d, 3, .*__half" --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables --section SourceCounters \
    --metrics breakdown:l1tex__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,smsp__inst_executed.sum \
    -o $R/ncu_d${d}_h3 $B --configs $cfg --batches 16 --contexts 65536 --bits 3 --methods encode --no-check > $R/ncu_d${d}_h3.log 2>&1
  echo "ncu d$d rc=$? $(( $(date +%s)-T0 )) s"
  ncu -i $R/ncu_d${d}_h3.ncu-rep --page details > $R/ncu_d${d}_h3_details.txt 2>&1
  ncu -i $R/ncu_d${d}_h3.ncu-rep --page source --csv --print-source sass > $R/ncu_d${d}_h3_sass.csv 2>&1
  grep -E "append_kernel|l1tex__|Duration|Issue Slots|Compute \(SM\)|L1/TEX Cache Throughput|Memory Throughput|inst_executed" $R/ncu_d${d}_h3_details.txt | head -40
  tar czf $OUT/s27.tgz -C /tmp s27
done
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s27.tgz -C /tmp s27
