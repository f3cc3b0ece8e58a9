# Session 27 device run s27-6 (repo root on the device, .deps carried): split-count sweep of the d64 9/3
# decode at batch 16 and 64 (48 / 192 (sequence, KV head) rows on 132 SMs): run s27-5's ncu had the SMs
# active 77% of the d64 b16 x 64k call (5 splits: 240 blocks, two waves, the second 108 blocks).
# Usage: export OUT && bash docs/experiments/run-s27f.sh   (everything lands in $OUT/s27f.tgz)
set -uo pipefail
R=/tmp/s27f; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s27f.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 250 cmake --build build -j16 --target turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
B=./build/turbokv_cuda_bench
for p in 1 2; do
  for s in 0 4 5 6 8 11 16 22; do
    timeout 40 $B --configs 64:9:3 --batches 16,64 --contexts 32768,65536,131072 --bits 3,4 --methods tq-mse --no-check --splits $s --csv $R/s${s}_$p.csv > $R/s${s}_$p.log 2>&1
    echo "splits $s pass $p rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^decode_attention,tq-mse' $R/s${s}_$p.csv | cut -d, -f3,4,8,10 | tr '\n' ' ')"
  done
  tar czf $OUT/s27f.tgz -C /tmp s27f
done
echo "done $(( $(date +%s)-T0 )) s"
