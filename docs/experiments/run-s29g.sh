# Session 29 device run s29-7 (repo root on the device): the folded-column kernel (kModeFold, 16 warps at
# head_dim 256, GQA <= 4; DecodeArgs::block_warps 16). test_cuda_attention TqMseMatchesReference (d256 cases
# at block_warps 8 / 12 / 16 against the reference; routing asserted); bench rows "(8 warps)", default (12),
# "(16 warps)", checked against the CPU reference.
# Usage: export OUT && bash docs/experiments/run-s29g.sh   (everything lands in $OUT/s29g.tgz)
set -uo pipefail
R=/tmp/s29g; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s29g.log") 2>&1
T0=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 160 cmake --build build -j16 --target test_cuda_attention turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
(cd build && timeout 90 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMseMatchesReference:CudaDecode.RejectsBadArguments') > $R/attn.log 2>&1; echo "test_cuda_attention rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|worst' $R/attn.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|block_warps|trace" -A1 $R/attn.log | head -30
tar czf $OUT/s29g.tgz -C /tmp s29g
B=./build/turbokv_cuda_bench
timeout 60 $B --configs 256:4:1,256:8:4 --batches 16,64 --contexts 65536,131072 --bits 1,3,4 --methods tq-mse --csv $R/d256.csv > $R/d256.log 2>&1; echo "bench d256 checked rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked' $R/d256.log | tail -1)"
python3 - $R/d256.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r and r[0] == 'decode_attention']
t = {(r[1], r[6], r[7], r[3], r[2]): (float(r[9]), float(r[13])) for r in rows}
for (m, h, b, c, bits), (us, gb) in sorted(t.items(), key=lambda kv: (kv[0][1], int(kv[0][2]), int(kv[0][3]), kv[0][4])):
    if m == 'tq-mse':
        e8 = t.get(('tq-mse (8 warps)', h, b, c, bits), (0,))[0]
        e16, g16 = t.get(('tq-mse (16 warps)', h, b, c, bits), (0, 0))
        print(f'heads {h} b{b} ctx {c} bits {bits}: 8 warps {e8:.1f}, default {us:.1f} ({gb:.0f} GB/s), 16 warps {e16:.1f} ({g16:.0f} GB/s); default/16 {us/e16:.3f}')
PY
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s29g.tgz -C /tmp s29g
