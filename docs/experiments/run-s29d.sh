# Session 29 device run s29-4 (repo root on the device): block_warps with the size rule and 2-bit pair
# tables at 12 warps. test_cuda_attention (all); the bench's d256 rows checked (with the "8 warps" rows
# next to them); compute-sanitizer memcheck / racecheck of TqMseMatchesReference (small lengths).
# Usage: export OUT && bash docs/experiments/run-s29d.sh   (everything lands in $OUT/s29d.tgz)
set -uo pipefail
R=/tmp/s29d; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s29d.log") 2>&1
T0=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 330 cmake --build build -j16 --target test_cuda_attention turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
(cd build && timeout 250 ./tests/cuda/test_cuda_attention) > $R/attn.log 2>&1; echo "test_cuda_attention rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|worst' $R/attn.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|block_warps|trace" -A1 $R/attn.log | head -30
tar czf $OUT/s29d.tgz -C /tmp s29d
B=./build/turbokv_cuda_bench
timeout 150 $B --configs 256:4:1 --batches 4,16,64 --contexts 8192,16384,32768,131072 --bits 1,2,3,4 --methods tq-mse --csv $R/d256.csv > $R/d256.log 2>&1; echo "bench d256 checked rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked' $R/d256.log | tail -1)"
python3 - $R/d256.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r and r[0] == 'decode_attention']
t = {(r[1], r[7], r[3], r[2]): float(r[9]) for r in rows}
for (m, b, c, bits), us in sorted(t.items(), key=lambda kv: (int(kv[0][1]), int(kv[0][2]), kv[0][3])):
    if m == 'tq-mse' and ('tq-mse (8 warps)', b, c, bits) in t:
        e = t[('tq-mse (8 warps)', b, c, bits)]
        print(f'b{b} ctx {c} bits {bits}: default {us:.1f} us, 8 warps {e:.1f} us, 8w/default {e/us:.3f}')
PY
tar czf $OUT/s29d.tgz -C /tmp s29d
export TURBOKV_CUDA_TEST_SMALL=1
(cd build && timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMseMatchesReference') > $R/memcheck.log 2>&1; echo "memcheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|^\[  PASSED|^\[  FAILED' $R/memcheck.log | tr '\n' ' ')"
tar czf $OUT/s29d.tgz -C /tmp s29d
(cd build && timeout 200 compute-sanitizer --tool racecheck --error-exitcode 3 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMseMatchesReference') > $R/racecheck.log 2>&1; echo "racecheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'HAZARD|RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED' $R/racecheck.log | tail -3 | tr '\n' ' ')"
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s29d.tgz -C /tmp s29d
