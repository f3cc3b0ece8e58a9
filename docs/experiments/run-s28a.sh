# Session 28 device run s28-1 (repo root on the device, .deps carried): sequence pairs at head_dim 64
# (B = this tree: H16Layout::PAIR, DecodeArgs::pair_sequences) against A = this tree with
# docs/experiments/pair-s28.patch reversed (the kernels before). test_cuda_attention TqMse* on B; then
# two alternating passes of the d64 9/3 and d128 32/8 decode rows (B's "tq-mse (1 seq/block)" rows are
# the old d64 kernel in B's binary; d128 checks that the non-pair instances did not move).
# Usage: export OUT && bash docs/experiments/run-s28a.sh   (everything lands in $OUT/s28a.tgz)
set -uo pipefail
R=/tmp/s28a; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s28a.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
FLAGS="-G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON"
rm -rf /tmp/A && mkdir -p /tmp/A && tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/A && tar xf -)
(cd /tmp/A && patch -R -p1 < docs/experiments/pair-s28.patch) > $R/patchA.log 2>&1; echo "patch -R A rc=$?"
cmake -S . -B build $FLAGS > $R/cfg.log 2>&1
cmake -S /tmp/A -B /tmp/A/build $FLAGS > $R/cfgA.log 2>&1
(timeout 300 cmake --build /tmp/A/build -j8 --target turbokv_cuda_bench > $R/buildA.log 2>&1; echo "build A rc=$? $(( $(date +%s)-T0 )) s") &
APID=$!
timeout 320 cmake --build build -j16 --target test_cuda_attention turbokv_cuda_bench > $R/build.log 2>&1; echo "build B rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
(cd build && timeout 150 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMse*') > $R/attn.log 2>&1; echo "test_cuda_attention TqMse* (B) rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|worst' $R/attn.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|kernel 0 with|sequence|d=64" $R/attn.log | head -40
wait $APID
tar czf $OUT/s28a.tgz -C /tmp s28a
A=/tmp/A/build/turbokv_cuda_bench; B=./build/turbokv_cuda_bench
for p in 1 2; do
  for V in A B; do
    X=$A; [ $V = B ] && X=$B
    timeout 100 $X --configs 64:9:3 --batches 16,64 --contexts 65536,131072 --bits 2,3,4 --methods tq-mse --no-check --csv $R/d64_${V}_$p.csv > $R/d64_${V}_$p.log 2>&1
    echo "d64 pass $p $V rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^decode_attention,tq-mse' $R/d64_${V}_$p.csv | cut -d, -f2,3,4,8,10,14 | tr '\n' ' ')"
    timeout 60 $X --configs 128:32:8 --batches 16 --contexts 65536 --bits 2,3,4 --methods tq-mse --no-check --csv $R/d128_${V}_$p.csv > $R/d128_${V}_$p.log 2>&1
    echo "d128 pass $p $V rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^decode_attention,tq-mse' $R/d128_${V}_$p.csv | cut -d, -f2,3,4,8,10,14 | tr '\n' ' ')"
  done
  tar czf $OUT/s28a.tgz -C /tmp s28a
done
timeout 120 $B --configs 64:9:3,64:8:8,64:16:4 --batches 1,2,15,16 --contexts 4096,65536 --bits 2,3,4 --methods tq-mse --repeats 10 --csv $R/checkedB.csv > $R/checkedB.log 2>&1; echo "checked B rc=$? $(( $(date +%s)-T0 )) s"; grep -iE "checked|FAIL|exceed" $R/checkedB.log | tail -4
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s28a.tgz -C /tmp s28a
