#!/usr/bin/env bash
# One device call: configure + build the CUDA targets, run the GPU tests,
# compute-sanitizer (memcheck + racecheck on small cases), the benchmark and the
# SDPA comparison. Logs under $OUT (or /tmp/tkv_out). Prints a short table last.
#   bash bench/cuda/run_device.sh [all|test|sanitize|bench|quick]    (default all)
# sanitize: memcheck and racecheck over every CUDA test binary with TURBOKV_CUDA_TEST_SMALL=1, each run capped at
# SAN_CAP seconds (default 300; racecheck of test_cuda_qjl, test_cuda_vq and test_cuda_real ran past 62-150 s on
# an H200 in session 39).
set -uo pipefail
MODE=${1:-all}
OUT=${OUT:-/tmp/tkv_out}
mkdir -p "$OUT"
B=/tmp/tkv_build
exec > >(tee -a "$OUT/run.log") 2>&1
echo "== $(date -u) mode=$MODE"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true

. bench/cuda/device_deps.sh  # the carried Debian dev packages (.deps), if the image lacks them
GEN=""; command -v ninja >/dev/null && GEN="-G Ninja"
T0=$(date +%s)
cmake -S . -B $B $GEN -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
cmake --build $B -j16 --target turbokv_cuda_bench test_cuda_pack test_cuda_append test_cuda_attention test_cuda_qjl test_cuda_vq test_cuda_real test_cuda_fp8 test_cuda_kivi test_cuda_vq_paged >> "$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - T0 )) s"

if [ "$MODE" = all ] || [ "$MODE" = test ]; then
  (cd $B && ctest -L cuda --output-on-failure) > "$OUT/ctest.log" 2>&1
  echo "ctest rc=$?"; grep -E "tests passed|Passed|Failed|\*\*\*" "$OUT/ctest.log" | head -20
  grep -E "FAILED|Failure|error|Expected|Which is|rel|seed" "$OUT/ctest.log" | head -30
  compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/cuda/test_cuda_pack > "$OUT/sanitizer.log" 2>&1; echo "memcheck test_cuda_pack rc=$?"
  TURBOKV_CUDA_TEST_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMse*' >> "$OUT/sanitizer.log" 2>&1; echo "memcheck test_cuda_attention (small) rc=$?"
  TURBOKV_CUDA_TEST_SMALL=1 compute-sanitizer --tool racecheck --error-exitcode 9 $B/tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMse*' >> "$OUT/sanitizer.log" 2>&1; echo "racecheck test_cuda_attention (small) rc=$?"
  TURBOKV_CUDA_TEST_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/cuda/test_cuda_vq_paged >> "$OUT/sanitizer.log" 2>&1; echo "memcheck test_cuda_vq_paged (small) rc=$?"
  TURBOKV_CUDA_TEST_SMALL=1 compute-sanitizer --tool racecheck --error-exitcode 9 $B/tests/cuda/test_cuda_vq_paged --gtest_filter='*Decode*' >> "$OUT/sanitizer.log" 2>&1; echo "racecheck test_cuda_vq_paged (small) rc=$?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/sanitizer.log" | head
fi
if [ "$MODE" = sanitize ]; then
  for t in test_cuda_pack test_cuda_append test_cuda_attention test_cuda_qjl test_cuda_vq test_cuda_real test_cuda_fp8 \
           test_cuda_kivi test_cuda_vq_paged; do
    for tool in memcheck racecheck; do
      TURBOKV_CUDA_TEST_SMALL=1 timeout ${SAN_CAP:-300} compute-sanitizer --tool $tool --error-exitcode 9 \
        $B/tests/cuda/$t > "$OUT/$tool-$t.log" 2>&1
      echo "$tool $t rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' "$OUT/$tool-$t.log" | tr '\n' ' ')"
    done
  done
fi
if [ "$MODE" = quick ]; then
  $B/turbokv_cuda_bench --configs 128:32:8 --batches 1,16 --contexts 32768,65536 --bits 3,4 --csv "$OUT/bench_quick.csv"
fi
if [ "$MODE" = all ] || [ "$MODE" = bench ]; then
  T1=$(date +%s)
  PYTHONUNBUFFERED=1 timeout 400 python3 bench/cuda/compare_sdpa.py --bin $B/turbokv_cuda_bench --csv "$OUT/compare.csv" \
    ${COMPARE_ARGS:-} > "$OUT/compare.log" 2>&1
  echo "compare rc=$? ($(( $(date +%s) - T1 )) s)"
  cp /tmp/turbokv_cuda_bench.csv "$OUT/bench.csv" 2>/dev/null
  grep -v "^+" "$OUT/compare.log" | grep -E "^(op|decode|encode)" | head -120
  grep -A200 "^GPU:" "$OUT/compare.log"
fi
if [ "$MODE" = all ] || [ "$MODE" = ncu ]; then
  # One launch of each decode kernel at batch 16 x 65,536 tokens, 32/8 heads, 4-bit (reps cut short by -c).
  for K in 'decode_h16_kernel' 'decode_mma_kernel'; do
    timeout 150 ncu --clock-control none --kernel-name-base demangled -k "regex:$K" -c 1 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
      $B/turbokv_cuda_bench --configs 128:32:8 --batches 16 --contexts 65536 --bits 4 >> "$OUT/ncu.log" 2>&1
  done
  echo "ncu rc=$?"
  grep -E "  void|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers|Block Limit|Stall|Warp Cycles Per Issued|Issue Slot|L1/TEX Hit|L2 Hit" "$OUT/ncu.log" | head -60
fi
echo "== done $(date -u)"
