# Session 25 device run s25-4 (repo root on the device, .deps carried): the encode's cell base from a
# popcount at every head_dim (P = this tree + docs/experiments/popc-s25.patch) against the table look-up
# at head_dim 128 / 256 (C = this tree). ncu of run s25-3 had the d256 3-bit encode L1/TEX-bound (93%)
# with issue slots 62% busy; P trades 16 shared loads per vector for ~46 ALU instructions.
# test_cuda_append on P, three alternating passes of the encode rows (--no-check), a checked pass of P.
# Record: in run s25-4 the script hung at its `wait` (fixed below) and was cut at 480 s; its test on P
# and two A/B passes were then run by hand on the same machine (docs/results/gpu-encode-s25.csv).
# Usage: export OUT && bash docs/experiments/run-s25d.sh   (everything lands in $OUT/s25d.tgz)
set -uo pipefail
R=/tmp/s25d; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s25d.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
FLAGS="-G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON"
rm -rf /tmp/P && mkdir -p /tmp/P && tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/P && tar xf -)
(cd /tmp/P && patch -p1 < docs/experiments/popc-s25.patch) > $R/patchP.log 2>&1; echo "patch P rc=$?"
cmake -S . -B build $FLAGS > $R/cfg.log 2>&1
cmake -S /tmp/P -B /tmp/P/build $FLAGS > $R/cfgP.log 2>&1
(timeout 250 cmake --build build -j8 --target turbokv_cuda_bench > $R/build.log 2>&1; echo "build C rc=$? $(( $(date +%s)-T0 )) s") &
CPID=$!
timeout 280 cmake --build /tmp/P/build -j16 --target test_cuda_append turbokv_cuda_bench > $R/buildP.log 2>&1; echo "build P rc=$? $(( $(date +%s)-T0 )) s"
wait $CPID  # run s25-4 had a bare `wait`, which also waits for the tee above: it hung here
(cd /tmp/P/build && timeout 100 ./tests/cuda/test_cuda_append) > $R/appendP.log 2>&1; echo "test_cuda_append (P) rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' $R/appendP.log)"
C=./build/turbokv_cuda_bench; P=/tmp/P/build/turbokv_cuda_bench
ARGS="--configs 128:32:8,64:9:3,256:4:1 --batches 16 --contexts 65536,131072 --bits 1,2,3,4 --methods encode"
for p in 1 2 3; do
  for V in C P; do
    X=$C; [ $V = P ] && X=$P
    timeout 60 $X $ARGS --no-check --csv $R/ab_${V}_$p.csv > $R/ab_${V}_$p.log 2>&1
    echo "pass $p $V rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^encode,' $R/ab_${V}_$p.csv | cut -d, -f3,4,5,10,14 | tr '\n' ' ')"
  done
done
timeout 90 $P $ARGS --csv $R/checkedP.csv > $R/checkedP.log 2>&1; echo "checked P rc=$?"; grep -i "checked against" $R/checkedP.log | tail -3
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s25d.tgz -C /tmp s25d
