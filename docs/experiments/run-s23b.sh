# Session 23 device run s23-4, right after run-s23.sh on the same (warm) machine: builds a copy with
# split-pages-s22.patch (timing only), runs test_cuda_real / test_cuda_append on ./build meanwhile, then
# times both trees in alternating passes. Usage: export OUT && bash docs/experiments/run-s23b.sh
set -uo pipefail
T0=$(date +%s)
PREFIX=/tmp/deps; export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
rm -rf /tmp/src_b && mkdir -p /tmp/src_b && tar -cf - --exclude=./.deps --exclude=./build . | tar -x -C /tmp/src_b
(cd /tmp/src_b && git apply docs/experiments/split-pages-s22.patch) && echo "B applied"
cmake -S /tmp/src_b -B /tmp/pb -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $OUT/cfg_b.log 2>&1
(timeout 200 cmake --build /tmp/pb -j12 --target turbokv_cuda_bench > $OUT/build_b.log 2>&1; echo "B build rc=$? $(( $(date +%s)-T0 )) s") &
timeout 60 cmake --build build -j4 --target test_cuda_real test_cuda_append > $OUT/build_t.log 2>&1; echo "tests build rc=$?"
(cd build && timeout 170 ./tests/cuda/test_cuda_real) > $OUT/test_real.log 2>&1; echo "test_cuda_real rc=$? $(( $(date +%s)-T0 )) s"; grep -E "PASSED|FAILED" $OUT/test_real.log | head -5
(cd build && timeout 60 ./tests/cuda/test_cuda_append) > $OUT/test_app.log 2>&1; echo "test_cuda_append rc=$?"; grep -E "PASSED|FAILED" $OUT/test_app.log | head -5
wait
for p in 1 2; do for s in a b; do B=$([ $s = a ] && echo build || echo /tmp/pb); timeout 40 $B/turbokv_cuda_bench --configs 128:32:8 --batches 16 --contexts 32768,65536 --bits 3,4 --methods tq-mse --no-check --csv $OUT/ab_${s}_$p.csv >/dev/null 2>&1; echo "pass $p $s rc=$?: $(grep -E '^decode_attention,tq-mse' $OUT/ab_${s}_$p.csv | cut -d, -f3,6,10 | tr '\n' ' ')"; done; done
echo "done $(( $(date +%s)-T0 )) s"
