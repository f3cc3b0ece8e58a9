# Session 34 device run 2: A/B of the pairs' block skews (H16Layout::kSkewK / kSkewV) on an H200.
# A = the working tree (skews; head_dim-128 pairs at 12 or 8 warps by DecodeArgs::block_warps), B = the same
# tree with docs/experiments/pair-skew-s34.patch reversed (session 34's first pair kernel, run s34-1; the run
# itself copied that file from .ab/decode_h16.noskew.cuh, the same bytes). Both built side by side;
# bench passes A1 (checked), B1, A2, B2 at head_dim 128 (32/8) and 64 (9/3); kernel rows: tq-mse (default:
# pairs where the rule takes them), 1 seq/block, and at head_dim 128 "pairs" / "pairs, 8 warps" (pairs forced,
# at 12 / 8 warps). Then the decode tests of A.
# Usage: export OUT && bash docs/experiments/run-s34b.sh   (carry .deps; output in $OUT/s34b.tgz)
set -uo pipefail
R=/tmp/s34b; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s34b.log") 2>&1
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
rm -rf /tmp/B && mkdir -p /tmp/B && tar cf - --exclude=./build --exclude=./.deps --exclude=./.ab . | tar xf - -C /tmp/B
(cd /tmp/B && patch -s -R -p1 < docs/experiments/pair-skew-s34.patch)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfgA.log 2>&1
cmake -S /tmp/B -B /tmp/B/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfgB.log 2>&1
timeout 400 cmake --build build -j10 --target turbokv_cuda_bench test_cuda_attention > $R/buildA.log 2>&1 &
timeout 400 cmake --build /tmp/B/build -j8 --target turbokv_cuda_bench > $R/buildB.log 2>&1 &
wait %1 %2
echo "builds $(( $(date +%s)-T0 )) s: $(ls build/turbokv_cuda_bench /tmp/B/build/turbokv_cuda_bench 2>&1 | tr '\n' ' ')"
grep -E "error" -A3 $R/buildA.log $R/buildB.log | head -20
SH="--configs 128:32:8,64:9:3 --batches 8,16,64 --contexts 32768,65536,131072 --bits 2,3,4 --methods tq-mse"
timeout 100 ./build/turbokv_cuda_bench $SH --csv $R/A1.csv > $R/A1.log 2>&1
echo "A1 rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked|CHECK FAILED' $R/A1.log | tr '\n' ' ')"
timeout 80 /tmp/B/build/turbokv_cuda_bench $SH --no-check --csv $R/B1.csv > $R/B1.log 2>&1; echo "B1 rc=$?"
timeout 80 ./build/turbokv_cuda_bench $SH --no-check --csv $R/A2.csv > $R/A2.log 2>&1; echo "A2 rc=$?"
timeout 80 /tmp/B/build/turbokv_cuda_bench $SH --no-check --csv $R/B2.csv > $R/B2.log 2>&1; echo "B2 rc=$? $(( $(date +%s)-T0 )) s"
python3 - $R <<'PY'
import csv, sys, collections
R = sys.argv[1]
t = collections.defaultdict(dict)
for v in ('A1', 'B1', 'A2', 'B2'):
    try: rows = list(csv.reader(open(f'{R}/{v}.csv')))
    except OSError: continue
    for r in rows:
        if len(r) < 14 or r[0] != 'decode_attention': continue
        k = (int(r[4]), float(r[2]), int(r[7]), int(r[3]))
        m = {'tq-mse (pairs)': 'pair', 'tq-mse (1 seq/block)': '1seq', 'tq-mse (pairs; 8 warps)': 'w8',
             'tq-mse': 'def'}.get(r[1])
        if m == 'pair' or (m == 'def' and k[0] == 64): m = 'pair'  # head_dim 64: the default is the pair kernel
        elif m == 'def': continue
        if m: t[k][v + m] = float(r[9])
print('d bits batch ctx | A pair (2 passes) | B pair | A/B | A 1seq | B 1seq | A pair vs 1seq | A 8 warps')
for k in sorted(t):
    x = t[k]; g = lambda n: x.get(n, float('nan'))
    a, b = (g('A1pair') + g('A2pair')) / 2, (g('B1pair') + g('B2pair')) / 2
    s1 = (g('A11seq') + g('A21seq')) / 2
    print('d%d %.0f b%-3d %-7d | %7.1f %7.1f | %7.1f %7.1f | %.3f | %7.1f | %7.1f | %.3f | %7.1f %7.1f' % (
        k + (g('A1pair'), g('A2pair'), g('B1pair'), g('B2pair'), b / a, s1, (g('B11seq') + g('B21seq')) / 2, s1 / a,
             g('A1w8'), g('A2w8'))))
PY
tar czf $OUT/s34b.tgz -C /tmp s34b
TB=$(find build -name test_cuda_attention -type f -executable | head -1)
timeout 200 $TB --gtest_filter='CudaDecode.TqMseMatchesReference' > $R/test.log 2>&1
echo "test rc=$? $(( $(date +%s)-T0 )) s"; grep -E "FAILED|PASSED|Failure" $R/test.log | head -10
tar czf $OUT/s34b.tgz -C /tmp s34b
