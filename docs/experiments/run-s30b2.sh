# Session 30 device run s30-3: the timing and sanitizer part of run-s30b.sh on the warm machine of run s30-2 (whose
# builds build/ and buildB/ finished, then its `wait` also waited on the log's tee process substitution until the
# call's limit). Runs the binaries built there (this tree's later sources are not rebuilt).
# Usage: export OUT && bash docs/experiments/run-s30b2.sh   (everything lands in $OUT/s30b.tgz)
set -uo pipefail
R=/tmp/s30b; mkdir -p $R
exec > >(tee -a "$R/s30b2.log") 2>&1
T0=$(date +%s)
ls -la build/turbokv_cuda_bench buildB/turbokv_cuda_bench build/tests/cuda/test_cuda_attention || exit 3
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
