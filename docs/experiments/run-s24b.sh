# Session 24 device run s24-2 (repo root on the device, .deps carried). B = this tree (the fused
# epilogue rotates each row in one warp's registers), A = B with docs/experiments/epilogue-old-s24.patch
# (the epilogue of session 23: rotate_shared per row). Both built with -DTURBOKV_H16_TRACE (stamps only
# when the bench asks). Runs B's test_cuda_attention, memcheck / racecheck of its TqMse cases (small),
# traces, then two alternating A/B passes of d128 b16 x 32k / 64k 3/4-bit (--no-check).
# Usage: export OUT && bash docs/experiments/run-s24b.sh   (everything lands in $OUT/s24b.tgz)
set -uo pipefail
R=/tmp/s24b; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s24b.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
FLAGS="-G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON -DCMAKE_CUDA_FLAGS=-DTURBOKV_H16_TRACE"
rm -rf /tmp/A && mkdir -p /tmp/A && tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/A && tar xf -)
(cd /tmp/A && patch -p1 < docs/experiments/epilogue-old-s24.patch) > $R/patchA.log 2>&1; grep -c "one warp per row of the block" src/cuda/decode_h16.cuh /tmp/A/src/cuda/decode_h16.cuh
cmake -S . -B build $FLAGS > $R/cfg.log 2>&1
timeout 250 cmake --build build -j16 --target test_cuda_attention turbokv_cuda_bench > $R/build.log 2>&1; echo "build B rc=$? $(( $(date +%s)-T0 )) s"
cmake -S /tmp/A -B /tmp/A/build $FLAGS > $R/cfgA.log 2>&1
(timeout 250 nice cmake --build /tmp/A/build -j16 --target turbokv_cuda_bench > $R/buildA.log 2>&1; echo "build A rc=$? $(( $(date +%s)-T0 )) s") &
APID=$!
B=./build/turbokv_cuda_bench; A=/tmp/A/build/turbokv_cuda_bench
(cd build && timeout 100 ./tests/cuda/test_cuda_attention) > $R/test_att.log 2>&1; echo "test_cuda_attention rc=$? $(( $(date +%s)-T0 )) s"; grep -E "PASSED|FAILED|worst" $R/test_att.log | head
(cd build && TURBOKV_CUDA_TEST_SMALL=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMse*') > $R/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -1 $R/memcheck.log
(cd build && TURBOKV_CUDA_TEST_SMALL=1 timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMse*') > $R/racecheck.log 2>&1; echo "racecheck rc=$?"; tail -1 $R/racecheck.log
TURBOKV_H16_TRACE_FILE=$R/traceB.csv timeout 60 $B --configs 128:32:8,64:9:3,256:4:1 --batches 1,16 --contexts 32768 --bits 4,3 --methods tq-mse --no-check --csv $R/tB.csv > $R/tB.log 2>&1; echo "trace B rc=$? $(( $(date +%s)-T0 )) s"
wait $APID
for p in 1 2; do
  for V in A B; do
    X=$B; [ $V = A ] && X=$A
    E=""; [ $p = 1 ] && E="TURBOKV_H16_TRACE_FILE=$R/ab_trace_$V.csv"
    env $E timeout 60 $X --configs 128:32:8 --batches 16 --contexts 32768,65536 --bits 3,4 --methods tq-mse --no-check --csv $R/ab_${V}_$p.csv > $R/ab_${V}_$p.log 2>&1
    echo "pass $p $V rc=$?: $(grep -E '^decode_attention,tq-mse' $R/ab_${V}_$p.csv | cut -d, -f3,5,10 | tr '\n' ' ')"
  done
done
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s24b.tgz -C /tmp s24b
