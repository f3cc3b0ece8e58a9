# Session 24 device run s24-3 (repo root on the device, .deps carried). C = this tree (decode_h16's
# set-up: 16-byte pair-table stores, tables and rotated query before the first copies, split 0's first
# page ids loaded before the sequence length), A = C with docs/experiments/setup-old-s24.patch (the
# set-up of s24-2's B: session 23's plus the register epilogue). Both with -DTURBOKV_H16_TRACE. Runs C's
# GPU tests that use decode_h16 (attention, kivi, fp8, vq, vq_paged), memcheck / racecheck of the TqMse
# cases (small) while A builds, then two alternating A/B passes (--no-check) and one traced pass each.
# Usage: export OUT && bash docs/experiments/run-s24c.sh   (everything lands in $OUT/s24c.tgz)
# Record of the run: the tree then had the set-up changes of docs/experiments/setup-s24.patch, and
# setup-old-s24.patch (used below) was that patch reversed. They were dropped (slower); to repeat the
# run from today's tree, apply setup-s24.patch first and use `patch -R -p1 < setup-s24.patch` for A.
set -uo pipefail
R=/tmp/s24c; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s24c.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
FLAGS="-G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON -DCMAKE_CUDA_FLAGS=-DTURBOKV_H16_TRACE"
rm -rf /tmp/A && mkdir -p /tmp/A && tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/A && tar xf -)
(cd /tmp/A && patch -p1 < docs/experiments/setup-old-s24.patch) > $R/patchA.log 2>&1; grep -c "16-byte units" src/cuda/decode_h16.cuh /tmp/A/src/cuda/decode_h16.cuh
cmake -S . -B build $FLAGS > $R/cfg.log 2>&1
TESTS="test_cuda_attention test_cuda_kivi test_cuda_fp8 test_cuda_vq test_cuda_vq_paged"
timeout 250 cmake --build build -j16 --target $TESTS turbokv_cuda_bench > $R/build.log 2>&1; echo "build C rc=$? $(( $(date +%s)-T0 )) s"
cmake -S /tmp/A -B /tmp/A/build $FLAGS > $R/cfgA.log 2>&1
(timeout 250 nice cmake --build /tmp/A/build -j16 --target turbokv_cuda_bench > $R/buildA.log 2>&1; echo "build A rc=$? $(( $(date +%s)-T0 )) s") &
APID=$!
for t in $TESTS; do (cd build && timeout 120 ./tests/cuda/$t) > $R/$t.log 2>&1; echo "$t rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED' $R/$t.log | tr '\n' ' ')"; done
(cd build && TURBOKV_CUDA_TEST_SMALL=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMse*') > $R/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -1 $R/memcheck.log
(cd build && TURBOKV_CUDA_TEST_SMALL=1 timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMse*') > $R/racecheck.log 2>&1; echo "racecheck rc=$?"; tail -1 $R/racecheck.log
wait $APID
B=./build/turbokv_cuda_bench; A=/tmp/A/build/turbokv_cuda_bench
for p in 1 2 3; do
  for V in A C; do
    X=$B; [ $V = A ] && X=$A
    E=""; [ $p = 3 ] && E="TURBOKV_H16_TRACE_FILE=$R/trace_$V.csv"
    env $E timeout 60 $X --configs 128:32:8 --batches 16 --contexts 32768,65536 --bits 2,3,4 --methods tq-mse --no-check --csv $R/ab_${V}_$p.csv > $R/ab_${V}_$p.log 2>&1
    env $E timeout 60 $X --configs 128:32:8,64:9:3,256:4:1 --batches 1,16 --contexts 32768 --bits 4 --methods tq-mse --no-check --csv $R/ab2_${V}_$p.csv > $R/ab2_${V}_$p.log 2>&1
    echo "pass $p $V: $(cat $R/ab_${V}_$p.csv $R/ab2_${V}_$p.csv | grep -E '^decode_attention,tq-mse' | cut -d, -f3,4,5,8,10 | tr '\n' ' ')"
  done
done
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s24c.tgz -C /tmp s24c
