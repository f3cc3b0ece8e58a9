# Session 24 device run s24-1 (repo root on the device, .deps carried): builds this tree with the
# per-block timestamps of decode_h16_kernel compiled in (-DTURBOKV_H16_TRACE; off unless the bench sets
# the buffer, so the timed calls and the tests run the production path), then
#  1. traces d128 TurboQuant-MSE 3/4-bit at b16 x 32k / 64k and b1 x 32k (one traced call per case
#     after its timing: $OUT/trace.csv, see src/cuda/common.cuh h16_trace_buf for the words);
#  2. ncu: the b16 x 32k 4-bit kernel's own duration and its per-SM active cycles (min / avg / max);
#  3. compute-sanitizer memcheck and racecheck of test_cuda_attention's TqMse cases (small lengths),
#     then the whole test binary.
# Usage: export OUT && bash docs/experiments/run-s24.sh
set -uo pipefail
exec > >(tee -a "$OUT/s24.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
nvcc --version | tail -2
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON -DCMAKE_CUDA_FLAGS=-DTURBOKV_H16_TRACE > $OUT/cfg.log 2>&1
timeout 300 cmake --build build -j16 --target test_cuda_attention turbokv_cuda_bench > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
B=./build/turbokv_cuda_bench
TURBOKV_H16_TRACE_FILE=$OUT/trace.csv timeout 60 $B --configs 128:32:8 --batches 16 --contexts 32768,65536 --bits 4,3 --methods tq-mse --no-check --csv $OUT/t16.csv > $OUT/t16.log 2>&1; echo "trace b16 rc=$? $(( $(date +%s)-T0 )) s"
grep -E '^decode_attention,tq-mse' $OUT/t16.csv | cut -d, -f2-6,10
TURBOKV_H16_TRACE_FILE=$OUT/trace1.csv timeout 30 $B --configs 128:32:8 --batches 1 --contexts 32768 --bits 4,3 --methods tq-mse --no-check --csv $OUT/t1.csv > $OUT/t1.log 2>&1; echo "trace b1 rc=$? $(( $(date +%s)-T0 )) s"
grep -E '^decode_attention,tq-mse' $OUT/t1.csv | cut -d, -f2-6,10
timeout 90 ncu --clock-control none -k regex:decode_h16 --launch-skip 8 --launch-count 1 \
  --metrics gpu__time_duration.sum,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.avg.per_second,launch__grid_size \
  $B --configs 128:32:8 --batches 16 --contexts 32768 --bits 4 --methods tq-mse --no-check --repeats 10 > $OUT/ncu.log 2>&1; echo "ncu rc=$? $(( $(date +%s)-T0 )) s"
grep -E "gpu__time|sm__cycles|launch__grid" $OUT/ncu.log
cd build
TURBOKV_CUDA_TEST_SMALL=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMse*' > $OUT/memcheck.log 2>&1; echo "memcheck rc=$? $(( $(date +%s)-T0 )) s"; tail -3 $OUT/memcheck.log
TURBOKV_CUDA_TEST_SMALL=1 timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMse*' > $OUT/racecheck.log 2>&1; echo "racecheck rc=$? $(( $(date +%s)-T0 )) s"; tail -3 $OUT/racecheck.log
timeout 100 ./tests/cuda/test_cuda_attention > $OUT/test_att.log 2>&1; echo "test_cuda_attention rc=$? $(( $(date +%s)-T0 )) s"; grep -E "PASSED|FAILED" $OUT/test_att.log | head
echo "done $(( $(date +%s)-T0 )) s"
