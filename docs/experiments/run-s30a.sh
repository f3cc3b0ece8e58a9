# Session 30 device run s30-1 (repo root on the device): 2-bit keys with 2-bit values at head_dim 256 with 12
# warps (the warps' merge over the quad tables, H16Layout::kMergeInTab). test_cuda_attention (all: also session
# 29's unrun every-width d256 sweep and window rule); the bench's d256 2-bit rows checked, with the "8 warps"
# rows timed next to them (two passes); compare_sdpa on issue 5's d256 shapes.
# Usage: export OUT && bash docs/experiments/run-s30a.sh   (everything lands in $OUT/s30a.tgz)
set -uo pipefail
R=/tmp/s30a; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s30a.log") 2>&1
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 330 cmake --build build -j16 --target test_cuda_attention turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
(cd build && timeout 260 ./tests/cuda/test_cuda_attention) > $R/attn.log 2>&1; echo "test_cuda_attention rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|worst' $R/attn.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|block_warps|trace" -A1 $R/attn.log | head -30
tar czf $OUT/s30a.tgz -C /tmp s30a
B=./build/turbokv_cuda_bench
for pass in 1 2; do
  timeout 120 $B --configs 256:4:1 --batches 1,8,16,64 --contexts 4096,32768,65536,131072 --bits 2 --methods tq-mse --csv $R/d256-p$pass.csv > $R/d256-p$pass.log 2>&1; echo "bench d256 2-bit pass $pass rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked' $R/d256-p$pass.log | tail -1)"
done
python3 - $R/d256-p1.csv $R/d256-p2.csv <<'PY'
import csv, sys
for f in sys.argv[1:]:
    rows = [r for r in csv.reader(open(f)) if r and r[0] == 'decode_attention']
    t = {(r[1], r[7], r[3], r[2]): (float(r[9]), r[13]) for r in rows}
    for (m, b, c, bits), (us, gb) in sorted(t.items(), key=lambda kv: (int(kv[0][1]), int(kv[0][2]), kv[0][3])):
        if m == 'tq-mse' and ('tq-mse (8 warps)', b, c, bits) in t:
            e = t[('tq-mse (8 warps)', b, c, bits)][0]
            print(f'{f[-6:-4]} b{b} ctx {c} bits {bits}: default {us:.1f} us ({gb} GB/s), 8 warps {e:.1f} us, 8w/default {e/us:.3f}')
PY
tar czf $OUT/s30a.tgz -C /tmp s30a
timeout 200 python3 bench/cuda/compare_sdpa.py --ours-csv $R/d256-p1.csv > $R/compare.txt 2>&1; echo "compare rc=$? $(( $(date +%s)-T0 )) s"
grep -E "GPU|256 " $R/compare.txt | grep -vE "dequant|fp16 \(ours\)|3xtf32" | head -60
tar czf $OUT/s30a.tgz -C /tmp s30a
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s30a.tgz -C /tmp s30a
