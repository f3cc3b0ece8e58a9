# Session 39, device call 2: the issue-5 grid on this tree with every row checked against the CPU reference
# (session 38's grid ran --no-check), the bench's new rotation of Prod key pools / encode inputs and >= 50 calls
# everywhere, then compare_sdpa.py per head_dim (dequantize+SDPA now at every head_dim that fits).
# Usage: export OUT && bash docs/experiments/run-s39b.sh   (carry .deps; output $OUT/s39b.tgz)
set -uo pipefail
R=/tmp/s39b; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s39b.log") 2>&1
T0=$(date +%s)
. bench/cuda/device_deps.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 300 cmake --build build -j16 --target turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
B=./build/turbokv_cuda_bench
for c in 128:32:8 64:9:3 256:4:1; do
  d=${c%%:*}
  timeout 170 $B --configs $c --batches 1,8,16,64 --contexts 4096,32768,65536,131072 --bits 2,3,4 --methods tq-mse,tq-prod,encode --csv $R/grid-$d.csv > $R/grid-$d.log 2>&1
  echo "grid $c rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'checked against' $R/grid-$d.log | tr '\n' ' ')"
  grep -E "CHECK FAILED|skipped" $R/grid-$d.log | head -5
  tar czf $OUT/s39b.tgz -C /tmp s39b
done
for d in 128 64 256; do
  left=$(( 580 - ($(date +%s)-T0) ))
  [ $left -lt 60 ] && { echo "skip compare $d (time)"; continue; }
  timeout $(( left < 150 ? left - 5 : 150 )) python3 bench/cuda/compare_sdpa.py --ours-csv $R/grid-$d.csv --csv $R/compare-$d.csv > $R/compare-$d.txt 2>&1; echo "compare $d rc=$? $(( $(date +%s)-T0 )) s"
  tar czf $OUT/s39b.tgz -C /tmp s39b
done
grep -E "^ *128 +32/8 +16 +65536|^ *128 +32/8 +1 +32768" $R/compare-128.txt | head -30
echo "done $(( $(date +%s)-T0 )) s"
