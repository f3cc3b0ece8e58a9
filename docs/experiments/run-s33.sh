# Session 33 device run (repo root on the device, split-dense-s32.patch applied): the fractional widths
# against PyTorch SDPA at issue 5's headline shapes (batch 16 x 65,536 tokens; batch 1 x 32,768), integer
# 3 / 4-bit rows beside them, checked against the CPU reference, and compare_sdpa in the same run.
# Usage: export OUT && bash docs/experiments/run-s33.sh   (everything lands in $OUT/s33.tgz)
set -uo pipefail
R=/tmp/s33; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s33.log") 2>&1
T0=$(date +%s)
ROOT=$(pwd)
PREFIX=/tmp/deps
if [ -d .deps ] && ! [ -f /usr/include/gtest/gtest.h -a -d /usr/include/eigen3 -a -d /usr/include/nlohmann -a -d /usr/include/CLI ]; then
  mkdir -p $PREFIX
  for f in .deps/*.deb; do dpkg -x "$f" $PREFIX 2>/dev/null || (cd /tmp && ar x "$ROOT/$f" data.tar.xz && tar -xf data.tar.xz -C $PREFIX); done
  export CMAKE_PREFIX_PATH=$PREFIX/usr
  export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 300 cmake --build build -j16 --target turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
grep -E "error" -A3 $R/build.log | head -20
timeout 150 ./build/turbokv_cuda_bench --configs 128:32:8,256:4:1 --batches 1,16 --contexts 32768,65536 --bits 2.5,3,3.5,4 --methods tq-mse --csv $R/s33.csv > $R/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked|CHECK FAILED' $R/bench.log | tr '\n' ' ')"
tar czf $OUT/s33.tgz -C /tmp s33
timeout 200 python3 bench/cuda/compare_sdpa.py --ours-csv $R/s33.csv > $R/compare.txt 2>&1; echo "compare rc=$? $(( $(date +%s)-T0 )) s"
grep -E "GPU|sdpa|K2.5V2.5 |K3V3 |K3.5V3.5 |K4V4 " $R/compare.txt | head -60
tar czf $OUT/s33.tgz -C /tmp s33
