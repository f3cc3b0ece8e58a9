# Session 30 device run s30-6 (repo root on the device): issue 5's d256 shapes at 3 and 4 bits (dense 128-byte
# 4-bit rows, 12 warps by the rule; "8 warps" rows next to them), checked, and PyTorch SDPA in the same run.
# Usage: export OUT && bash docs/experiments/run-s30e.sh   (everything lands in $OUT/s30e.tgz)
set -uo pipefail
R=/tmp/s30e; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s30e.log") 2>&1
T0=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 200 cmake --build build -j16 --target turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
timeout 120 ./build/turbokv_cuda_bench --configs 256:4:1 --batches 1,8,16,64 --contexts 4096,32768,65536,131072 --bits 3,4 --methods tq-mse --csv $R/d256.csv > $R/d256.log 2>&1; echo "bench rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked' $R/d256.log | tail -1)"
tar czf $OUT/s30e.tgz -C /tmp s30e
timeout 150 python3 bench/cuda/compare_sdpa.py --ours-csv $R/d256.csv > $R/compare.txt 2>&1; echo "compare rc=$? $(( $(date +%s)-T0 )) s"
grep -E "GPU|sdpa|K4V4 |K3V3 " $R/compare.txt | grep -E "GPU| (16|64) " | head -60
tar czf $OUT/s30e.tgz -C /tmp s30e
