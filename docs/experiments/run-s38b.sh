# Session 38, A/B of where TurboQuant-Prod keys' sketched query S Pi_k q is computed (TURBOKV_PROD_SKETCH, read
# once per process by run_mma): 0 = per split block, one dot product per thread (session 37's code); 1 = once per
# call, prod_sketch_query_kernel (8 rows per block, one column per thread); 2 = once per call,
# prod_sketch_query_kernel2 (8 rows x 32 columns per block, 8 j-slices); 3 = per split block, S read once per block
# (column quads x j-slices). Builds this tree; per mode the Prod decode test (small lengths) and a checked bench
# pass; then timed passes of the four modes, alternating, twice.
# Usage: export OUT && bash docs/experiments/run-s38b.sh   (carry .deps; output $OUT/s38b.tgz)
# The switch and modes 1-3 were not committed: the tree keeps mode 3 at head_dim 256 only (commit 4dfc12f) and mode 0
# elsewhere; the script and results (docs/results/s38-device/modes/) are the record.
set -uo pipefail
R=/tmp/s38b; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s38b.log") 2>&1
T0=$(date +%s)
. bench/cuda/device_deps.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 400 cmake --build build -j16 --target turbokv_cuda_bench test_cuda_attention > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
grep -E "error" -A3 $R/build.log | head -20
B=./build/turbokv_cuda_bench
TB=$(find build -name test_cuda_attention -type f -executable | head -1)
for m in 0 1 2 3; do
  TURBOKV_PROD_SKETCH=$m TURBOKV_CUDA_TEST_SMALL=1 timeout 60 $TB --gtest_filter='CudaDecode.TqProd*' > $R/test-m$m.log 2>&1
  echo "mode $m test rc=$? $(grep -E 'PASSED|FAILED|worst' $R/test-m$m.log | tr '\n' ' ')"
  TURBOKV_PROD_SKETCH=$m timeout 60 $B --configs 128:32:8,64:9:3,256:4:1 --batches 1,16 --contexts 4096,32768 --bits 2,4 --methods tq-prod --csv $R/checked-m$m.csv > $R/checked-m$m.log 2>&1
  echo "mode $m checked rc=$? $(grep -E 'checked' $R/checked-m$m.log | tail -1)"
done
tar czf $OUT/s38b.tgz -C /tmp s38b
for p in 1 2; do
  for m in 0 1 2 3; do
    TURBOKV_PROD_SKETCH=$m timeout 60 $B --configs 128:32:8,64:9:3,256:4:1 --batches 1,16 --contexts 4096,32768,131072 --bits 4 --methods tq-prod --no-check --csv $R/prod-m$m-$p.csv > $R/prod-m$m-$p.log 2>&1
    echo "pass $p mode $m rc=$? $(( $(date +%s)-T0 )) s"
  done
  tar czf $OUT/s38b.tgz -C /tmp s38b
done
echo "done $(( $(date +%s)-T0 )) s"
