# Session 27 device run s27-4 (repo root on the device, .deps carried): the encode's signs fused with
# FWHT stage h = 1 (one multiply and two fmas per pair; B = this tree) against A = this tree with
# docs/experiments/fma-s27.patch reversed (run s27-3's B: the bad-vector flag). test_cuda_append on B,
# three alternating passes of the encode rows (--no-check), a checked pass of B, memcheck / racecheck.
# Usage: export OUT && bash docs/experiments/run-s27d.sh   (everything lands in $OUT/s27d.tgz)
set -uo pipefail
R=/tmp/s27d; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s27d.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
FLAGS="-G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON"
rm -rf /tmp/A && mkdir -p /tmp/A && tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/A && tar xf -)
(cd /tmp/A && patch -R -p1 < docs/experiments/fma-s27.patch) > $R/patchA.log 2>&1; echo "patch -R A rc=$?"
cmake -S . -B build $FLAGS > $R/cfg.log 2>&1
cmake -S /tmp/A -B /tmp/A/build $FLAGS > $R/cfgA.log 2>&1
(timeout 280 cmake --build /tmp/A/build -j8 --target turbokv_cuda_bench > $R/buildA.log 2>&1; echo "build A rc=$? $(( $(date +%s)-T0 )) s") &
APID=$!
timeout 300 cmake --build build -j16 --target test_cuda_append turbokv_cuda_bench > $R/build.log 2>&1; echo "build B rc=$? $(( $(date +%s)-T0 )) s"
(cd build && timeout 120 ./tests/cuda/test_cuda_append) > $R/append.log 2>&1; echo "test_cuda_append (B) rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]' $R/append.log | tr '\n' ' ')"
wait $APID
tar czf $OUT/s27d.tgz -C /tmp s27d
A=/tmp/A/build/turbokv_cuda_bench; B=./build/turbokv_cuda_bench
ARGS="--configs 128:32:8,64:9:3,256:4:1 --batches 16 --contexts 65536 --bits 1,2,3,4 --methods encode"
for p in 1 2 3; do
  for V in A B; do
    X=$A; [ $V = B ] && X=$B
    timeout 60 $X $ARGS --no-check --csv $R/ab_${V}_$p.csv > $R/ab_${V}_$p.log 2>&1
    echo "pass $p $V rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^encode,' $R/ab_${V}_$p.csv | cut -d, -f2,3,5,14 | tr '\n' ' ')"
  done
done
tar czf $OUT/s27d.tgz -C /tmp s27d
timeout 120 $B $ARGS --csv $R/checkedB.csv > $R/checkedB.log 2>&1; echo "checked B rc=$?"; grep -i "checked against\|FAIL" $R/checkedB.log | tail -4
tar czf $OUT/s27d.tgz -C /tmp s27d
export TURBOKV_CUDA_TEST_SMALL=1
(cd build && timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/cuda/test_cuda_append) > $R/memcheck.log 2>&1; echo "memcheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|^\[  PASSED|^\[  FAILED' $R/memcheck.log | tr '\n' ' ')"
(cd build && timeout 150 compute-sanitizer --tool racecheck --error-exitcode 3 ./tests/cuda/test_cuda_append) > $R/racecheck.log 2>&1; echo "racecheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'HAZARD|RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED' $R/racecheck.log | tail -3 | tr '\n' ' ')"
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s27d.tgz -C /tmp s27d
