# Session 38: TurboQuant-Prod keys' sketched query once per call (prod_sketch_query_kernel) instead of per split
# block. Builds this tree (B), runs test_cuda_attention CudaDecode.* and CudaReal.TqProd*, compute-sanitizer
# memcheck of the Prod decode test (small lengths), then times tq-prod against session 37's bench (A, carried as
# build-dev/tcb.xz, built from 0eedd37) in alternating passes, and one checked pass of B.
# Usage: export OUT && bash docs/experiments/run-s38a.sh   (carry .deps and build-dev/tcb.xz; output $OUT/s38a.tgz)
# Its code (prod_sketch_query_kernel in run_mma, a sketch slot in decode_workspace_bytes) was dropped after this run
# and never committed; the script and results (docs/results/s38-device/modes/s38a.log) are the record.
set -uo pipefail
R=/tmp/s38a; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s38a.log") 2>&1
T0=$(date +%s)
. bench/cuda/device_deps.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
git log --oneline -1
A=/tmp/tcbA
python3 -c "import lzma, shutil; shutil.copyfileobj(lzma.open('build-dev/tcb.xz'), open('$A', 'wb'))" && chmod +x $A
NV=$(dirname $(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc))
export LD_LIBRARY_PATH=$NV/../lib64:$NV/../lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 400 cmake --build build -j16 --target turbokv_cuda_bench test_cuda_attention test_cuda_real > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
grep -E "error" -A3 $R/build.log | head -20
B=./build/turbokv_cuda_bench
TB=$(find build -name test_cuda_attention -type f -executable | head -1)
TR=$(find build -name test_cuda_real -type f -executable | head -1)
timeout 150 $TB --gtest_filter='CudaDecode.*' > $R/test-decode.log 2>&1; echo "decode tests rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'PASSED|FAILED|worst' $R/test-decode.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|is not the" $R/test-decode.log | head -10
timeout 60 $TR --gtest_filter='CudaReal.TqProd*' > $R/test-real.log 2>&1; echo "real rc=$? $(grep -E 'PASSED|FAILED' $R/test-real.log | tr '\n' ' ')"
tar czf $OUT/s38a.tgz -C /tmp s38a
for p in 1 2; do
  for X in A B; do
    BIN=$A; [ $X = B ] && BIN=$B
    timeout 60 $BIN --configs 128:32:8,64:9:3,256:4:1 --batches 1,16 --contexts 4096,32768,131072 --bits 3,4 --methods tq-prod --no-check --csv $R/prod-$X$p.csv > $R/prod-$X$p.log 2>&1
    echo "pass $p $X rc=$? $(( $(date +%s)-T0 )) s"
  done
done
tar czf $OUT/s38a.tgz -C /tmp s38a
timeout 90 $B --configs 128:32:8,64:9:3,256:4:1 --batches 1,16 --contexts 4096,32768 --bits 1,2,3,4 --methods tq-prod --csv $R/prod-checked.csv > $R/prod-checked.log 2>&1
echo "checked rc=$? $(grep -E 'checked' $R/prod-checked.log | tail -1)"
TURBOKV_CUDA_TEST_SMALL=1 timeout 200 compute-sanitizer --tool memcheck $TB --gtest_filter='CudaDecode.TqProd*' > $R/memcheck.log 2>&1
echo "memcheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $R/memcheck.log | tr '\n' ' ')"
tar czf $OUT/s38a.tgz -C /tmp s38a
echo "done $(( $(date +%s)-T0 )) s"
