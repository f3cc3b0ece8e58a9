# Session 23 device run s23-3 (from the repo root on the device, .deps carried): builds this tree, runs
# test_cuda_attention, times d128 b16 x 64k TurboQuant-MSE 2-4 bits twice (--no-check), then a checked run
# and bench/cuda/compare_sdpa.py on it. Usage: export OUT && bash docs/experiments/run-s23.sh
set -uo pipefail
exec > >(tee -a "$OUT/s23.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $OUT/cfg.log 2>&1
timeout 330 cmake --build build -j16 --target test_cuda_attention turbokv_cuda_bench > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
(cd build && timeout 100 ./tests/cuda/test_cuda_attention) > $OUT/test_att.log 2>&1; echo "test_cuda_attention rc=$? $(( $(date +%s)-T0 )) s"; grep -E "PASSED|FAILED" $OUT/test_att.log | head
for p in 1 2; do timeout 40 ./build/turbokv_cuda_bench --configs 128:32:8 --batches 16 --contexts 65536 --bits 2,3,4 --methods tq-mse --no-check --csv $OUT/c_$p.csv >/dev/null 2>&1; echo "pass $p rc=$?: $(grep -E '^decode_attention,tq-mse' $OUT/c_$p.csv | cut -d, -f2,3,5,10 | tr '\n' ' ')"; done
timeout 90 ./build/turbokv_cuda_bench --configs 128:32:8 --batches 16 --contexts 65536 --bits 3,4 --methods tq-mse --csv $OUT/ours.csv > $OUT/ours.log 2>&1; echo "checked rc=$?"
timeout 100 python3 bench/cuda/compare_sdpa.py --ours-csv $OUT/ours.csv --csv $OUT/compare.csv > $OUT/compare.log 2>&1; echo "compare rc=$?"; tail -12 $OUT/compare.log
echo "done $(( $(date +%s)-T0 )) s"
