# Session 28 device run s28-3 (repo root on the device, .deps carried): the pair kernel after trimming
# its step (running-max floor instead of per-element p masks, per-column token ranges from lane
# constants, one elected lane for the four bulk copies). test_cuda_attention TqMse*, memcheck and
# racecheck of it (small lengths); the pair / one-sequence matrix again; ncu instruction counts.
# Usage: export OUT && bash docs/experiments/run-s28c.sh   (everything lands in $OUT/s28c.tgz)
set -uo pipefail
R=/tmp/s28c; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s28c.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 320 cmake --build build -j16 --target test_cuda_attention turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
(cd build && timeout 150 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMse*') > $R/attn.log 2>&1; echo "test_cuda_attention TqMse* rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|worst' $R/attn.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|kernel 0 with" $R/attn.log | head -20
B=./build/turbokv_cuda_bench
timeout 150 $B --configs 64:9:3,64:8:8,64:16:4 --batches 2,4,8,16,32 --contexts 8192,16384,32768,65536,131072 --bits 3,4 --methods tq-mse --no-check --repeats 30 --csv $R/matrix.csv > $R/matrix.log 2>&1; echo "matrix rc=$? $(( $(date +%s)-T0 )) s"
tar czf $OUT/s28c.tgz -C /tmp s28c
M="--metrics sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,launch__grid_size"
for K in "64:9:3 4 int.128, .int.4, .int.4, .int.16, .bool.0, .bool.[01], .bool.0, .int.5" "64:8:8 4 int.128, .int.4, .int.4, .int.16, .bool.0, .bool.[01], .bool.0, .int.5" "64:9:3 2 int.128, .int.2, .int.2, .int.16, .bool.0, .bool.[01], .bool.0, .int.5"; do
  set -- $K; C=$1; BITS=$2; shift 2; RX="$*"
  echo "== ncu $C bits $BITS kernel <$RX>" >> $R/ncu.txt
  timeout 90 ncu --clock-control none --kernel-name-base demangled -k "regex:decode_h16_kernel<.$RX" -c 1 $M \
    $B --configs $C --batches 16 --contexts 65536 --bits $BITS --methods tq-mse --no-check --repeats 3 >> $R/ncu.txt 2>&1
  echo "ncu $C $BITS rc=$? $(( $(date +%s)-T0 )) s"
done
grep -E "^==|decode_h16_kernel<|inst_executed.sum|issue_active|dram__|duration|grid_size" $R/ncu.txt | grep -v PROF
tar czf $OUT/s28c.tgz -C /tmp s28c
export TURBOKV_CUDA_TEST_SMALL=1
(cd build && timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMseMatchesReference') > $R/memcheck.log 2>&1; echo "memcheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|^\[  PASSED|^\[  FAILED' $R/memcheck.log | tr '\n' ' ')"
tar czf $OUT/s28c.tgz -C /tmp s28c
(cd build && timeout 200 compute-sanitizer --tool racecheck --error-exitcode 3 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMseMatchesReference') > $R/racecheck.log 2>&1; echo "racecheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'HAZARD|RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED' $R/racecheck.log | tail -3 | tr '\n' ' ')"
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s28c.tgz -C /tmp s28c
