# Session 29 device run s29-1 (repo root on the device, .deps carried): warps per block at head_dim 256
# (TURBOKV_H16_NW256 = 8, today's; 12 and 16 where the block's shared memory fits: KB = VB = 1, 3, 4).
# test_cuda_attention TqMse* under 12 and 16; one bench pass per warp count (d256 4/1, b1/16/64 x 32k/64k/128k,
# 1-4 bits); ncu issue / instruction counts of the 4-bit kernel at b16 x 64k for each.
# Usage: export OUT && bash docs/experiments/run-s29a.sh   (everything lands in $OUT/s29a.tgz)
set -uo pipefail
R=/tmp/s29a; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s29a.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 330 cmake --build build -j16 --target test_cuda_attention turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
B=./build/turbokv_cuda_bench
for NW in 8 12 16; do
  TURBOKV_H16_NW256=$NW timeout 60 $B --configs 256:4:1 --batches 1,16,64 --contexts 32768,65536,131072 --bits 1,2,3,4 --methods tq-mse --no-check --csv $R/nw${NW}_1.csv > $R/nw${NW}_1.log 2>&1
  echo "bench nw $NW rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^decode_attention,tq-mse,' $R/nw${NW}_1.csv | cut -d, -f3,4,8,10 | tr '\n' ' ')"
done
tar czf $OUT/s29a.tgz -C /tmp s29a
for NW in 12 16; do
  (cd build && TURBOKV_H16_NW256=$NW timeout 150 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMse*') > $R/attn$NW.log 2>&1; echo "test_cuda_attention TqMse* nw $NW rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|worst' $R/attn$NW.log | tr '\n' ' ')"
  grep -E "Failure|Expected|Which is|head_dim 256" $R/attn$NW.log | head -10
  tar czf $OUT/s29a.tgz -C /tmp s29a
done
M="--metrics sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active"
for NW in 8 12 16; do
  echo "== ncu nw $NW" >> $R/ncu.txt
  TURBOKV_H16_NW256=$NW timeout 60 ncu --clock-control none --kernel-name-base demangled -k "regex:decode_h16_kernel<.int.256, .int.4, .int.4" -c 1 $M \
    $B --configs 256:4:1 --batches 16 --contexts 65536 --bits 4 --methods tq-mse --no-check --repeats 3 >> $R/ncu.txt 2>&1
  echo "ncu nw $NW rc=$? $(( $(date +%s)-T0 )) s"
done
grep -E "^==|decode_h16_kernel<|inst_executed.sum|issue_active|dram__|duration|grid_size|registers|warps_active" $R/ncu.txt | grep -v PROF
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s29a.tgz -C /tmp s29a
