# Session 32's device run (prepared in session 32, which lost its device after the first call: nothing of
# it ran). Fractional TurboQuant-MSE widths (SPLIT instances of decode_h16_kernel): P by movmatrix (no s_p
# round trip), cross-token value fields, one accumulator chain per part, dense rows with bulk copies at
# head_dim 128 and 256: docs/experiments/split-dense-s32.patch (static counts in its kSplitDense comment).
# A = main with the patch applied, B = main (the patch reversed in a copy). A builds the GPU tests and the
# bench, B the bench; TqMseFractionalMatchesReference (with session 32's new cases: every copy path, GQA 6 /
# 7 / 16, NaN-filled pools) and the real-KV TqMse test on A; then the fractional rows A / B alternately
# (pass 1 checked against the CPU reference), and A's integer 3 / 4-bit rows for reference.
# Usage (repo root here): git apply docs/experiments/split-dense-s32.patch, then on the device
#   export OUT && bash docs/experiments/run-s32a.sh   (everything lands in $OUT/s32a.tgz)
# If A passes and is faster, commit the applied patch with the numbers; if a test fails, the log names
# the case (d, bits, page, GQA, fill). Then run-s32b.sh (sanitizers) on the warm machine, within 30 s.
set -uo pipefail
R=/tmp/s32a; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s32a.log") 2>&1
T0=$(date +%s)
ROOT=$(pwd)
PREFIX=/tmp/deps
if [ -d .deps ] && ! [ -f /usr/include/gtest/gtest.h -a -d /usr/include/eigen3 -a -d /usr/include/nlohmann -a -d /usr/include/CLI ]; then
  mkdir -p $PREFIX
  for f in .deps/*.deb; do dpkg -x "$f" $PREFIX 2>/dev/null || (cd /tmp && ar x "$ROOT/$f" data.tar.xz && tar -xf data.tar.xz -C $PREFIX); done
  export CMAKE_PREFIX_PATH=$PREFIX/usr
  export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  echo "using carried deps in $PREFIX"
fi
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
rm -rf /tmp/treeB && mkdir -p /tmp/treeB && tar cf - --exclude=./build --exclude=./buildB --exclude=./.deps . | tar xf - -C /tmp/treeB
(cd /tmp/treeB && patch -R -p1 < docs/experiments/split-dense-s32.patch) || echo "PATCH FAILED"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfgA.log 2>&1
cmake -S /tmp/treeB -B buildB -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfgB.log 2>&1
(timeout 400 cmake --build build -j10 --target turbokv_cuda_bench test_cuda_attention test_cuda_real > $R/buildA.log 2>&1; echo "build A rc=$?") &
(timeout 400 cmake --build buildB -j6 --target turbokv_cuda_bench > $R/buildB.log 2>&1; echo "build B rc=$?") &
wait %1 %2; echo "builds $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build?.log | head -30
tar czf $OUT/s32a.tgz -C /tmp s32a
(cd build && timeout 150 ./tests/cuda/test_cuda_attention --gtest_filter='*Fractional*') > $R/test-frac.log 2>&1
echo "fractional tests rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'worst|^\[  PASSED|^\[  FAILED' $R/test-frac.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|relative|split d=" $R/test-frac.log | head -20
tar czf $OUT/s32a.tgz -C /tmp s32a
for pass in 1 2; do
  for V in A B; do
    BIN=./build/turbokv_cuda_bench; [ $V = B ] && BIN=./buildB/turbokv_cuda_bench
    CHK=--no-check; [ $pass = 1 ] && CHK=
    timeout 120 $BIN --configs 128:32:8,256:4:1 --batches 16 --contexts 32768,131072 --bits 1.5,2.5,3.5 --methods tq-mse $CHK --csv $R/frac-$V$pass.csv > $R/frac-$V$pass.log 2>&1
    echo "frac $V pass $pass rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked|CHECK FAILED' $R/frac-$V$pass.log | tr '\n' ' ')"
    tar czf $OUT/s32a.tgz -C /tmp s32a
  done
done
timeout 90 ./build/turbokv_cuda_bench --configs 128:32:8,256:4:1 --batches 16 --contexts 32768,131072 --bits 3,4 --methods tq-mse --no-check --csv $R/int-A.csv > $R/int-A.log 2>&1
echo "integer rows rc=$? $(( $(date +%s)-T0 )) s"
python3 - $R <<'PY'
import csv, sys, os
R = sys.argv[1]
def load(f):
    return {(r[1], r[2], r[4], r[7], r[3]): (float(r[9]), r[13], r[15]) for r in csv.reader(open(f)) if r and r[0] == 'decode_attention'}
for p in ('1', '2'):
    fa, fb = f'{R}/frac-A{p}.csv', f'{R}/frac-B{p}.csv'
    if not (os.path.exists(fa) and os.path.exists(fb)): continue
    a, b = load(fa), load(fb)
    for k in sorted(a):
        if k in b: print(f'pass {p} {k}: A {a[k][0]:.1f} us ({a[k][1]} GB/s, rel_err {a[k][2]}), B {b[k][0]:.1f} us, B/A {b[k][0]/a[k][0]:.3f}')
if os.path.exists(f'{R}/int-A.csv'):
    for k, v in sorted(load(f'{R}/int-A.csv').items()): print('integer', k, v)
PY
tar czf $OUT/s32a.tgz -C /tmp s32a
(cd build && timeout 100 ./tests/cuda/test_cuda_real --gtest_filter='*TqMse*') > $R/test-real.log 2>&1
echo "real TqMse rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'worst|^\[  PASSED|^\[  FAILED' $R/test-real.log | tr '\n' ' ')"
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s32a.tgz -C /tmp s32a
