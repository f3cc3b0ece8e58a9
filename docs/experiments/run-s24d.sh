# Session 24 device run s24-4 (repo root on the device, .deps carried), production builds (no trace):
# D = this tree (register epilogue + 16-byte pair-table stores + split 0's first page ids before the
# length), A = D with docs/experiments/setup-old-s24.patch (register epilogue only: run s24-2's B).
# D's GPU tests that use decode_h16 while A builds, three alternating A/B passes (--no-check), then a
# checked run of D and bench/cuda/compare_sdpa.py on it (cuDNN / FlashAttention in the same run).
# Usage: export OUT && bash docs/experiments/run-s24d.sh   (everything lands in $OUT/s24d.tgz)
# Record of the run: the tree then had the set-up changes of docs/experiments/setup-s24.patch, and
# setup-old-s24.patch (used below) was that patch reversed. They were dropped (slower); to repeat the
# run from today's tree, apply setup-s24.patch first and use `patch -R -p1 < setup-s24.patch` for A.
set -uo pipefail
R=/tmp/s24d; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s24d.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
FLAGS="-G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON"
rm -rf /tmp/A && mkdir -p /tmp/A && tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/A && tar xf -)
(cd /tmp/A && patch -p1 < docs/experiments/setup-old-s24.patch) > $R/patchA.log 2>&1; grep -c "16-byte units" src/cuda/decode_h16.cuh /tmp/A/src/cuda/decode_h16.cuh
cmake -S . -B build $FLAGS > $R/cfg.log 2>&1
TESTS="test_cuda_attention test_cuda_kivi test_cuda_fp8 test_cuda_vq test_cuda_vq_paged"
timeout 250 cmake --build build -j16 --target $TESTS turbokv_cuda_bench > $R/build.log 2>&1; echo "build D rc=$? $(( $(date +%s)-T0 )) s"
cmake -S /tmp/A -B /tmp/A/build $FLAGS > $R/cfgA.log 2>&1
(timeout 250 nice cmake --build /tmp/A/build -j16 --target turbokv_cuda_bench > $R/buildA.log 2>&1; echo "build A rc=$? $(( $(date +%s)-T0 )) s") &
APID=$!
for t in $TESTS; do (cd build && timeout 120 ./tests/cuda/$t) > $R/$t.log 2>&1; echo "$t rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED' $R/$t.log | tr '\n' ' ')"; done
(cd build && TURBOKV_CUDA_TEST_SMALL=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMse*') > $R/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -1 $R/memcheck.log
(cd build && TURBOKV_CUDA_TEST_SMALL=1 timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMse*') > $R/racecheck.log 2>&1; echo "racecheck rc=$?"; tail -1 $R/racecheck.log
wait $APID
B=./build/turbokv_cuda_bench; A=/tmp/A/build/turbokv_cuda_bench
for p in 1 2 3; do
  for V in A D; do
    X=$B; [ $V = A ] && X=$A
    timeout 60 $X --configs 128:32:8 --batches 16 --contexts 32768,65536 --bits 2,3,4 --methods tq-mse --no-check --csv $R/ab_${V}_$p.csv > $R/ab_${V}_$p.log 2>&1
    timeout 60 $X --configs 128:32:8,64:9:3,256:4:1 --batches 1,16 --contexts 32768 --bits 4 --methods tq-mse --no-check --csv $R/ab2_${V}_$p.csv > $R/ab2_${V}_$p.log 2>&1
    echo "pass $p $V: $(cat $R/ab_${V}_$p.csv $R/ab2_${V}_$p.csv | grep -E '^decode_attention,tq-mse' | cut -d, -f3,4,5,8,10 | tr '\n' ' ')"
  done
done
timeout 90 $B --configs 128:32:8 --batches 16 --contexts 32768,65536 --bits 3,4 --methods tq-mse --csv $R/ours.csv > $R/ours.log 2>&1; echo "checked rc=$? $(( $(date +%s)-T0 )) s"
timeout 120 python3 bench/cuda/compare_sdpa.py --ours-csv $R/ours.csv --csv $R/compare.csv > $R/compare.log 2>&1; echo "compare rc=$?"; tail -14 $R/compare.log
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s24d.tgz -C /tmp s24d
