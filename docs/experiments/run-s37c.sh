# Session 37 (prepared, not run): the whole issue-5 grid on the current tree (the RESULTS.md headline table is
# session 8's), d128 32/8, d64 9/3, d256 4/1 x batch 1, 8, 16, 64 x context 4k, 32k, 64k, 128k, TurboQuant-MSE and
# -Prod and the encode, then PyTorch SDPA on the same GPU (compare_sdpa.py). Uses a turbokv_cuda_bench built on the CPU
# machine from this tree (same CMake options as the device build; stripped and xz-compressed to fit the carry limit:
# build-dev/tcb.xz) when it runs there, else builds it. Then the issue-5 grid per head_dim (d128 first) and compare_sdpa.py on each.
# Usage: export OUT && bash docs/experiments/run-s37c.sh   (carry .deps and build-dev/tcb.xz)
set -uo pipefail
R=/tmp/s37c; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s37c.log") 2>&1
T0=$(date +%s)
. bench/cuda/device_deps.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
git log --oneline -1
B=/tmp/tcb
python3 -c "import lzma, shutil; shutil.copyfileobj(lzma.open('build-dev/tcb.xz'), open('$B', 'wb'))" && chmod +x $B
NV=$(dirname $(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc))
export LD_LIBRARY_PATH=$NV/../lib64:$NV/../lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
if ! timeout 60 $B --configs 128:32:8 --batches 1 --contexts 4096 --bits 4 --methods tq-mse --csv $R/smoke.csv > $R/smoke.log 2>&1; then
  echo "carried binary did not run: $(tail -2 $R/smoke.log | tr '\n' ' ')"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
  timeout 300 cmake --build build -j16 --target turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$?"
  B=./build/turbokv_cuda_bench
fi
echo "bench ready $(( $(date +%s)-T0 )) s: $B; smoke $(grep -iE 'checked' $R/smoke.log)"
for c in 128:32:8 64:9:3 256:4:1; do
  d=${c%%:*}
  timeout 90 $B --configs $c --batches 1,8,16,64 --contexts 4096,32768,65536,131072 --bits 2,3,4 --methods tq-mse,tq-prod,encode --no-check --csv $R/grid-$d.csv > $R/grid-$d.log 2>&1
  echo "grid $c rc=$? $(( $(date +%s)-T0 )) s, $(grep -c decode_attention $R/grid-$d.csv) decode rows"
  tar czf $OUT/s37c.tgz -C /tmp s37c
  timeout 100 python3 bench/cuda/compare_sdpa.py --ours-csv $R/grid-$d.csv --csv $R/compare-$d.csv > $R/compare-$d.txt 2>&1; echo "compare rc=$? $(( $(date +%s)-T0 )) s"
  grep -E "GPU" $R/compare-$d.txt
  tar czf $OUT/s37c.tgz -C /tmp s37c
done
echo "done $(( $(date +%s)-T0 )) s"
