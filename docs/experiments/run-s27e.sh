# Session 27 device run s27-5 (repo root on the device, .deps carried): the final tree's append tests
# (test_cuda_append, test_cuda_real) and an ncu profile of the d64 9/3 4-bit decode at b16 x 64k (per
# (token, KV head) it costs about what d128 does at twice the bytes: what bounds it?), with the d128
# 32/8 4-bit kernel of the same run for contrast.
# Usage: export OUT && bash docs/experiments/run-s27e.sh   (everything lands in $OUT/s27e.tgz)
set -uo pipefail
R=/tmp/s27e; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s27e.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 250 cmake --build build -j16 --target test_cuda_append test_cuda_real turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
(cd build && timeout 100 ./tests/cuda/test_cuda_append) > $R/append.log 2>&1; echo "test_cuda_append rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]' $R/append.log | tr '\n' ' ')"
(cd build && timeout 200 ./tests/cuda/test_cuda_real) > $R/real.log 2>&1; echo "test_cuda_real rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|SKIP' $R/real.log | tr '\n' ' ')"
tar czf $OUT/s27e.tgz -C /tmp s27e
B=./build/turbokv_cuda_bench
for cfg in 64:9:3 128:32:8; do
  d=${cfg%%:*}
  timeout 100 ncu --clock-control none -k regex:decode_h16_kernel --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats --section LaunchStats --section Occupancy --section SourceCounters \
    --metrics dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__ltcfabric2ltc_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__cycles_active.avg,smsp__issue_active.avg.pct_of_peak_sustained_active \
    -o $R/ncu_d$d $B --configs $cfg --batches 16 --contexts 65536 --bits 4 --methods tq-mse --no-check > $R/ncu_d$d.log 2>&1
  echo "ncu d$d rc=$? $(( $(date +%s)-T0 )) s"
  ncu -i $R/ncu_d$d.ncu-rep --page details > $R/ncu_d${d}_details.txt 2>&1
  ncu -i $R/ncu_d$d.ncu-rep --page source --csv --print-source sass > $R/ncu_d${d}_sass.csv 2>&1
  grep -E "decode_h16_kernel|Duration|dram__|ltcfabric|inst_executed.sum|Issue Slots Busy|issue_active|Grid Size|Registers|Eligible Warps|No Eligible|cycles_active.avg" $R/ncu_d${d}_details.txt | head -24
  tar czf $OUT/s27e.tgz -C /tmp s27e
done
timeout 60 $B --configs 64:9:3,128:32:8 --batches 16 --contexts 65536 --bits 4 --methods tq-mse --no-check --csv $R/bench.csv > $R/bench.log 2>&1
echo "bench rc=$?: $(grep -E '^decode_attention' $R/bench.csv | cut -d, -f2,3,5,10,14 | tr '\n' ' ')"
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s27e.tgz -C /tmp s27e
