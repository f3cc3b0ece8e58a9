# Session 25 device run s25-2 (repo root on the device, .deps carried): encode A/B.
# B = this tree (run s25-1's B + the cell map by fma.sat and the codes by a predicated add),
# A = B with docs/experiments/encode-s25.patch reversed (session 24's append + half.h).
# B's GPU tests that use the append / float_to_half while A builds (+ memcheck / racecheck of the append
# test), three alternating A/B passes of the encode rows (--no-check), then one checked pass of B.
# Usage: export OUT && bash docs/experiments/run-s25b.sh   (everything lands in $OUT/s25b.tgz)
set -uo pipefail
R=/tmp/s25b; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s25b.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
FLAGS="-G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON"
rm -rf /tmp/A && mkdir -p /tmp/A && tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/A && tar xf -)
(cd /tmp/A && patch -R -p1 < docs/experiments/encode-s25.patch) > $R/patchA.log 2>&1; echo "patch A rc=$?"
grep -c "cvt.rn.f16.f32" include/turbokv/half.h /tmp/A/include/turbokv/half.h
cmake -S . -B build $FLAGS > $R/cfg.log 2>&1
TESTS="test_cuda_append test_cuda_pack test_cuda_real"
timeout 250 cmake --build build -j16 --target $TESTS turbokv_cuda_bench > $R/build.log 2>&1; echo "build B rc=$? $(( $(date +%s)-T0 )) s"
cmake -S /tmp/A -B /tmp/A/build $FLAGS > $R/cfgA.log 2>&1
(timeout 280 nice cmake --build /tmp/A/build -j16 --target turbokv_cuda_bench > $R/buildA.log 2>&1; echo "build A rc=$? $(( $(date +%s)-T0 )) s") &
APID=$!
for t in $TESTS; do (cd build && timeout 200 ./tests/cuda/$t) > $R/$t.log 2>&1; echo "$t rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED' $R/$t.log | tr '\n' ' ')"; done
(cd build && TURBOKV_CUDA_TEST_SMALL=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 ./tests/cuda/test_cuda_append) > $R/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -1 $R/memcheck.log
(cd build && TURBOKV_CUDA_TEST_SMALL=1 timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 ./tests/cuda/test_cuda_append) > $R/racecheck.log 2>&1; echo "racecheck rc=$?"; tail -1 $R/racecheck.log
wait $APID
B=./build/turbokv_cuda_bench; A=/tmp/A/build/turbokv_cuda_bench
ARGS="--configs 128:32:8,64:9:3,256:4:1 --batches 16 --contexts 65536,131072 --bits 1,2,3,4 --methods encode"
for p in 1 2 3; do
  for V in A B; do
    X=$B; [ $V = A ] && X=$A
    timeout 60 $X $ARGS --no-check --csv $R/ab_${V}_$p.csv > $R/ab_${V}_$p.log 2>&1
    echo "pass $p $V rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^encode,' $R/ab_${V}_$p.csv | cut -d, -f3,4,5,10,14 | tr '\n' ' ')"
  done
done
timeout 90 $B $ARGS --csv $R/checked.csv > $R/checked.log 2>&1; echo "checked rc=$? $(( $(date +%s)-T0 )) s"; grep -i "check" $R/checked.log | tail -3
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s25b.tgz -C /tmp s25b
