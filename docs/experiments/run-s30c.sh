# Session 30 device run s30-4 (repo root on the device): dense 128-byte rows at head_dim 256 (the rule now) and
# 12 warps for fp8 / KIVI / 2 + 2-bit RVQ at head_dim 256. GPU tests test_cuda_attention, test_cuda_fp8,
# test_cuda_kivi, test_cuda_vq_paged; the bench's d256 rows checked against the CPU reference: tq-mse 4-bit
# (b1 .. b64 x 4k .. 128k) and fp8 / KIVI / RVQ with their "8 warps" rows timed next to them.
# Usage: export OUT && bash docs/experiments/run-s30c.sh   (everything lands in $OUT/s30c.tgz)
set -uo pipefail
R=/tmp/s30c; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s30c.log") 2>&1
T0=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 240 cmake --build build -j16 --target test_cuda_attention test_cuda_fp8 test_cuda_kivi test_cuda_vq_paged turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
t() {  # test binary, time limit
  (cd build && timeout $2 ./tests/cuda/$1) > $R/$1.log 2>&1; echo "$1 rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|worst|SKIPPED' $R/$1.log | tr '\n' ' ' | cut -c1-600)"
  grep -E "Failure|Expected|Which is" -A2 $R/$1.log | head -12
  tar czf $OUT/s30c.tgz -C /tmp s30c
}
t test_cuda_attention 200
B=./build/turbokv_cuda_bench
timeout 60 $B --configs 256:4:1 --batches 1,8,16,64 --contexts 4096,32768,65536,131072 --bits 4 --methods tq-mse --csv $R/d256-tq4.csv > $R/d256-tq4.log 2>&1; echo "bench d256 tq-mse 4-bit rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked' $R/d256-tq4.log | tail -1)"
tar czf $OUT/s30c.tgz -C /tmp s30c
t test_cuda_fp8 60
t test_cuda_kivi 90
t test_cuda_vq_paged 90
timeout 90 $B --configs 256:4:1 --batches 16,64 --contexts 32768,131072 --bits 2,3,4 --methods fp8,kivi,rvq --csv $R/d256-other.csv > $R/d256-other.log 2>&1; echo "bench d256 fp8/kivi/rvq rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked' $R/d256-other.log | tail -1)"
python3 - $R/d256-tq4.csv $R/d256-other.csv <<'PY'
import csv, sys
for f in sys.argv[1:]:
    try: rows = [r for r in csv.reader(open(f)) if r and r[0] == 'decode_attention']
    except OSError: continue
    t = {(r[1], r[7], r[3], r[2]): (float(r[9]), r[13]) for r in rows}
    for (m, b, c, bits), (us, gb) in sorted(t.items(), key=lambda kv: (kv[0][0], int(kv[0][1]), int(kv[0][2]), kv[0][3])):
        e = t.get((m + ' (8 warps)', b, c, bits))
        if e and 'cuda cores' not in m:
            print(f'{m} b{b} ctx {c} bits {bits}: default {us:.1f} us ({gb} GB/s), 8 warps {e[0]:.1f} us, 8w/default {e[0]/us:.3f}')
PY
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s30c.tgz -C /tmp s30c
