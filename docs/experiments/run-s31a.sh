# Session 31 device run s31-1 (repo root on the device): the staged CUDA-core kernel sums each 32-token step's
# values before adding them to the running sum (staged.cuh). A = this tree, B = the same with
# docs/experiments/staged-step-sum-s31.patch reversed (the kernel of session 30). Both build test_cuda_kivi
# and the bench; CudaKivi.LongPeakedSplitStaysWithinTolerance must fail on B and pass on A; then the bench's
# staged (CUDA-core) rows of fp8 / KIVI / RVQ / PolarQuant timed A / B alternately, A's checked (the d256 3-bit
# b64 x 128k KIVI row failed its bound in run s30-4). Then run-s31b.sh (ctest -L cuda on A) on the warm machine.
# Usage: export OUT && bash docs/experiments/run-s31a.sh   (everything lands in $OUT/s31a.tgz)
set -uo pipefail
R=/tmp/s31a; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s31a.log") 2>&1
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
(cd /tmp/treeB && patch -R -p1 < docs/experiments/staged-step-sum-s31.patch) || echo "PATCH FAILED"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfgA.log 2>&1
cmake -S /tmp/treeB -B buildB -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfgB.log 2>&1
(timeout 400 cmake --build build -j10 --target test_cuda_kivi turbokv_cuda_bench test_cuda_pack test_cuda_append test_cuda_attention test_cuda_qjl test_cuda_vq test_cuda_real test_cuda_fp8 test_cuda_vq_paged > $R/buildA.log 2>&1; echo "build A rc=$?") &
(timeout 400 cmake --build buildB -j6 --target test_cuda_kivi turbokv_cuda_bench > $R/buildB.log 2>&1; echo "build B rc=$?") &
wait %1 %2; echo "builds $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build?.log | head -30
tar czf $OUT/s31a.tgz -C /tmp s31a
for V in B A; do
  BD=build; [ $V = B ] && BD=buildB
  (cd $BD && timeout 90 ./tests/cuda/test_cuda_kivi --gtest_filter='*LongPeaked*') > $R/long-$V.log 2>&1
  echo "LongPeaked on $V rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'relative error|^\[  PASSED|^\[  FAILED' $R/long-$V.log | tr '\n' ' ')"
  grep -E "Expected|Which is|rel" $R/long-$V.log | head -6
done
tar czf $OUT/s31a.tgz -C /tmp s31a
for pass in 1 2; do
  for V in A B; do
    BIN=./build/turbokv_cuda_bench; [ $V = B ] && BIN=./buildB/turbokv_cuda_bench
    CHK=--no-check; [ $pass = 1 ] && CHK=
    timeout 100 $BIN --configs 256:4:1 --batches 16,64 --contexts 32768,131072 --bits 3 --methods fp8,kivi $CHK --csv $R/d256-$V$pass.csv > $R/d256-$V$pass.log 2>&1
    echo "d256 $V pass $pass rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked|CHECK FAILED' $R/d256-$V$pass.log | tr '\n' ' ')"
    timeout 100 $BIN --configs 128:32:8 --batches 16 --contexts 65536 --bits 2,4 --methods fp8,kivi,rvq,polar $CHK --csv $R/d128-$V$pass.csv > $R/d128-$V$pass.log 2>&1
    echo "d128 $V pass $pass rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked|CHECK FAILED' $R/d128-$V$pass.log | tr '\n' ' ')"
    tar czf $OUT/s31a.tgz -C /tmp s31a
  done
done
python3 - $R <<'PY'
import csv, sys, glob, os
R = sys.argv[1]
def load(f):
    return {(r[1], r[2], r[4], r[7], r[3]): (float(r[9]), r[15]) for r in csv.reader(open(f)) if r and r[0] == 'decode_attention'}
for shape in ('d256', 'd128'):
    for p in ('1', '2'):
        fa, fb = f'{R}/{shape}-A{p}.csv', f'{R}/{shape}-B{p}.csv'
        if not (os.path.exists(fa) and os.path.exists(fb)): continue
        a, b = load(fa), load(fb)
        for k in sorted(a):
            if 'cuda cores' in k[0] or 'rvq' in k[0] or 'polar' in k[0]:
                if k in b: print(f'pass {p} {k}: A {a[k][0]:.1f} us (rel_err {a[k][1]}), B {b[k][0]:.1f} us (rel_err {b[k][1]}), B/A {b[k][0]/a[k][0]:.3f}')
PY
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s31a.tgz -C /tmp s31a
