# (Record: the two switches were removed after run s30-3; B's dense 128-byte rows became the layout rule, copy-first for Prod was dropped.)
# Session 30 device run s30-2 (repo root on the device): A = this tree, B = the same with the experiment
# switches TURBOKV_H16_D256_DENSE128=1 (dense 128-byte TurboQuant rows at head_dim 256: bulk copies, 3 stages
# at 12 warps for 4-bit keys and values) and TURBOKV_H16_PROD_COPY_FIRST=1 (Prod keys issue the next copy
# before the step's compute). Built side by side; B's rows checked against the CPU reference in pass 1,
# then A / B alternating at head_dim 256 (4/1 heads) and 128 (32/8, Prod keys only changed there);
# memcheck / racecheck of A's small TqMse cases (12-warp 2/2 merge over the quad tables).
# Usage: export OUT && bash docs/experiments/run-s30b.sh   (everything lands in $OUT/s30b.tgz)
set -uo pipefail
R=/tmp/s30b; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s30b.log") 2>&1
T0=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfgA.log 2>&1
cmake -S . -B buildB -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON \
  "-DCMAKE_CUDA_FLAGS=-DTURBOKV_H16_D256_DENSE128=1 -DTURBOKV_H16_PROD_COPY_FIRST=1" > $R/cfgB.log 2>&1
(timeout 360 cmake --build build -j8 --target test_cuda_attention turbokv_cuda_bench > $R/buildA.log 2>&1; echo "build A rc=$?") &
(timeout 360 cmake --build buildB -j8 --target turbokv_cuda_bench > $R/buildB.log 2>&1; echo "build B rc=$?") &
wait %1 %2; echo "builds $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build?.log | head -30
tar czf $OUT/s30b.tgz -C /tmp s30b
for pass in 1 2; do
  for V in A B; do
    BIN=./build/turbokv_cuda_bench; [ $V = B ] && BIN=./buildB/turbokv_cuda_bench
    CHK=--no-check; [ $pass = 1 ] && [ $V = B ] && CHK=
    timeout 100 $BIN --configs 256:4:1 --batches 16,64 --contexts 32768,131072 --bits 2,3,4 --methods tq-mse,tq-prod $CHK --csv $R/d256-$V$pass.csv > $R/d256-$V$pass.log 2>&1
    echo "d256 $V pass $pass rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked' $R/d256-$V$pass.log | tail -1)"
    timeout 60 $BIN --configs 128:32:8 --batches 16 --contexts 65536 --bits 2,3,4 --methods tq-prod $CHK --csv $R/d128-$V$pass.csv > $R/d128-$V$pass.log 2>&1
    echo "d128 prod $V pass $pass rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked' $R/d128-$V$pass.log | tail -1)"
  done
done
python3 - $R <<'PY'
import csv, sys, glob, os
R = sys.argv[1]
def load(f):
    return {(r[1], r[4], r[7], r[3], r[2]): float(r[9]) for r in csv.reader(open(f)) if r and r[0] == 'decode_attention'}
for d in ('d256', 'd128'):
    for p in ('1', '2'):
        fa, fb = f'{R}/{d}-A{p}.csv', f'{R}/{d}-B{p}.csv'
        if not (os.path.exists(fa) and os.path.exists(fb)): continue
        a, b = load(fa), load(fb)
        for k in sorted(a):
            if k in b and 'fp16' not in k[0] and '3xtf32' not in k[0]:
                print(f'pass {p} {k[0]:24s} d{k[1]} b{k[2]} ctx {k[3]} bits {k[4]}: A {a[k]:.1f} B {b[k]:.1f} us, A/B {a[k]/b[k]:.3f}')
PY
tar czf $OUT/s30b.tgz -C /tmp s30b
export TURBOKV_CUDA_TEST_SMALL=1
(cd build && timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMseMatchesReference') > $R/memcheck.log 2>&1; echo "memcheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|^\[  PASSED|^\[  FAILED' $R/memcheck.log | tr '\n' ' ')"
(cd build && timeout 120 compute-sanitizer --tool racecheck --error-exitcode 3 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMseMatchesReference') > $R/racecheck.log 2>&1; echo "racecheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'HAZARD|RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED' $R/racecheck.log | tail -3 | tr '\n' ' ')"
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s30b.tgz -C /tmp s30b
