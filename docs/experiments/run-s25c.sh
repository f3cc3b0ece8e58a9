# Session 25 device run s25-3 (repo root on the device, .deps carried): this tree (run s25-2's B + the
# 3-bit code bytes permuted at head_dim 256 for a shorter pack): test_cuda_append, three passes of the
# encode rows (--no-check; compare with run s25-2's passes), one checked pass, and ncu of the d256
# 3-bit and 4-bit encode kernels (b16 x 64k) to see what bounds them.
# Usage: export OUT && bash docs/experiments/run-s25c.sh   (everything lands in $OUT/s25c.tgz)
set -uo pipefail
R=/tmp/s25c; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s25c.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 250 cmake --build build -j16 --target test_cuda_append turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
(cd build && timeout 100 ./tests/cuda/test_cuda_append) > $R/append.log 2>&1; echo "test_cuda_append rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' $R/append.log)"
B=./build/turbokv_cuda_bench
ARGS="--configs 128:32:8,64:9:3,256:4:1 --batches 16 --contexts 65536,131072 --bits 1,2,3,4 --methods encode"
for p in 1 2 3; do
  timeout 60 $B $ARGS --no-check --csv $R/enc_$p.csv > $R/enc_$p.log 2>&1
  echo "pass $p rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^encode,' $R/enc_$p.csv | cut -d, -f3,4,5,10,14 | tr '\n' ' ')"
done
timeout 90 $B $ARGS --csv $R/checked.csv > $R/checked.log 2>&1; echo "checked rc=$?"; grep -i "checked against" $R/checked.log | tail -3
for b in 3 4; do
  timeout 150 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section Occupancy --section InstructionStats -k regex:append_kernel --launch-skip 3 --launch-count 1 \
    $B --configs 256:4:1 --batches 16 --contexts 65536 --bits $b --methods encode --no-check > $R/ncu_d256_$b.txt 2>&1
  echo "ncu $b rc=$? $(( $(date +%s)-T0 )) s"
done
grep -E "Duration|Issue Slots Busy|Issued Ipc|Warp Cycles Per Issued|No Eligible|Achieved Occupancy|Stall|L1/TEX Hit|Mem Busy|Max Bandwidth|DRAM Throughput|Shared" $R/ncu_d256_3.txt | head -40
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s25c.tgz -C /tmp s25c
