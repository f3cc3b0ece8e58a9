# Session 29 device run s29-5 (repo root on the device): 12 warps at head_dim 256 for TurboQuant-Prod keys
# and fractional widths too. test_cuda_attention (all); d256 bench rows (tq-mse integer and fractional,
# tq-prod keys), each with its "(8 warps)" row next to it, checked against the CPU reference.
# Usage: export OUT && bash docs/experiments/run-s29e.sh   (everything lands in $OUT/s29e.tgz)
set -uo pipefail
R=/tmp/s29e; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s29e.log") 2>&1
T0=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 330 cmake --build build -j16 --target test_cuda_attention turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
(cd build && timeout 250 ./tests/cuda/test_cuda_attention) > $R/attn.log 2>&1; echo "test_cuda_attention rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|worst' $R/attn.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|block_warps|trace" -A1 $R/attn.log | head -30
tar czf $OUT/s29e.tgz -C /tmp s29e
B=./build/turbokv_cuda_bench
timeout 200 $B --configs 256:4:1 --batches 1,16,64 --contexts 32768,131072 --bits 2,2.5,3,3.5,4 --methods tq-mse,tq-prod --csv $R/d256.csv > $R/d256.log 2>&1; echo "bench d256 checked rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked' $R/d256.log | tail -1)"
python3 - $R/d256.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r and r[0] == 'decode_attention']
t = {(r[1], r[7], r[3], r[2]): (float(r[9]), float(r[13])) for r in rows}
for (m, b, c, bits), (us, gb) in sorted(t.items(), key=lambda kv: (kv[0][0], int(kv[0][1]), int(kv[0][2]), kv[0][3])):
    if m in ('tq-mse', 'tq-prod keys') and (m + ' (8 warps)', b, c, bits) in t:
        e = t[(m + ' (8 warps)', b, c, bits)][0]
        print(f'{m} b{b} ctx {c} bits {bits}: default {us:.1f} us ({gb:.0f} GB/s), 8 warps {e:.1f} us, 8w/default {e/us:.3f}')
PY
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s29e.tgz -C /tmp s29e
