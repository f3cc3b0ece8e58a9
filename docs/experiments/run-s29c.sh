# Session 29 device run s29-3 (repo root on the device): DecodeArgs::block_warps (12 warps per block at
# head_dim 256 where batch x KV heads >= 16). test_cuda_attention (all); the bench's d256 rows checked
# against the CPU reference with the "tq-mse (8 warps)" rows timed next to them; compare_sdpa on issue 5's
# d256 shapes.
# Usage: export OUT && bash docs/experiments/run-s29c.sh   (everything lands in $OUT/s29c.tgz)
set -uo pipefail
R=/tmp/s29c; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s29c.log") 2>&1
T0=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 330 cmake --build build -j16 --target test_cuda_attention turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
(cd build && timeout 200 ./tests/cuda/test_cuda_attention) > $R/attn.log 2>&1; echo "test_cuda_attention rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|worst' $R/attn.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|block_warps" $R/attn.log | head -20
tar czf $OUT/s29c.tgz -C /tmp s29c
B=./build/turbokv_cuda_bench
timeout 200 $B --configs 256:4:1 --batches 1,8,16,64 --contexts 4096,32768,65536,131072 --bits 1,2,3,4 --methods tq-mse --csv $R/d256.csv > $R/d256.log 2>&1; echo "bench d256 checked rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked' $R/d256.log | tail -1)"
tar czf $OUT/s29c.tgz -C /tmp s29c
timeout 200 python3 bench/cuda/compare_sdpa.py --ours-csv $R/d256.csv > $R/compare.txt 2>&1; echo "compare rc=$? $(( $(date +%s)-T0 )) s"
grep -E "GPU|256 " $R/compare.txt | grep -vE "dequant|fp16 \(ours\)|3xtf32" | head -80
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s29c.tgz -C /tmp s29c
