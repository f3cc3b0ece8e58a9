# Session 28 device run s28-4 (repo root on the device, .deps carried): the final tree (pairs by the
# size rule, DecodeArgs::pair_sequences -1 / 0 / 1). test_cuda_attention (all), test_cuda_real, memcheck
# and racecheck of TqMseMatchesReference (small lengths); then the d64 9/3 shapes of issue 5 checked
# against the CPU reference and compared with PyTorch SDPA in the same run.
# Usage: export OUT && bash docs/experiments/run-s28d.sh   (everything lands in $OUT/s28d.tgz)
set -uo pipefail
R=/tmp/s28d; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s28d.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 320 cmake --build build -j16 --target test_cuda_attention test_cuda_real turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
(cd build && timeout 200 ./tests/cuda/test_cuda_attention) > $R/attn.log 2>&1; echo "test_cuda_attention rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|worst' $R/attn.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|pair_sequences" $R/attn.log | head -20
(cd build && timeout 120 ./tests/cuda/test_cuda_real) > $R/real.log 2>&1; echo "test_cuda_real rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]' $R/real.log | tr '\n' ' ')"
tar czf $OUT/s28d.tgz -C /tmp s28d
B=./build/turbokv_cuda_bench
timeout 150 $B --configs 64:9:3 --batches 1,8,16,64 --contexts 4096,32768,65536,131072 --bits 2,3,4 --methods tq-mse --csv $R/ours.csv > $R/ours.log 2>&1; echo "bench rc=$? $(( $(date +%s)-T0 )) s"; grep -iE "checked" $R/ours.log | tail -2
PYTHONUNBUFFERED=1 timeout 200 python3 bench/cuda/compare_sdpa.py --ours-csv $R/ours.csv > $R/compare.txt 2>&1; echo "compare rc=$? $(( $(date +%s)-T0 )) s"
grep -E "^ *64 " $R/compare.txt | grep -E "cudnn|flash|K4V4|K3V3|K2V2" | head -80
tar czf $OUT/s28d.tgz -C /tmp s28d
export TURBOKV_CUDA_TEST_SMALL=1
(cd build && timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMseMatchesReference') > $R/memcheck.log 2>&1; echo "memcheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|^\[  PASSED|^\[  FAILED' $R/memcheck.log | tr '\n' ' ')"
(cd build && timeout 150 compute-sanitizer --tool racecheck --error-exitcode 3 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMseMatchesReference') > $R/racecheck.log 2>&1; echo "racecheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'HAZARD|RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED' $R/racecheck.log | tail -3 | tr '\n' ' ')"
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s28d.tgz -C /tmp s28d
