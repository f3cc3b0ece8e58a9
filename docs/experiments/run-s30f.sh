# Session 30 device run s30-7 (repo root on the device): fp8 and KIVI keep 8 warps by default at head_dim 256
# (12 on request); the bench's fp32 bound grows with the context (tol_f32). test_cuda_fp8, test_cuda_kivi
# (with the new default-routing tests), the d256 fp8 / KIVI / RVQ rows checked.
# Usage: export OUT && bash docs/experiments/run-s30f.sh   (everything lands in $OUT/s30f.tgz)
set -uo pipefail
R=/tmp/s30f; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s30f.log") 2>&1
T0=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 150 cmake --build build -j16 --target test_cuda_fp8 test_cuda_kivi turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
for t in test_cuda_fp8 test_cuda_kivi; do
  (cd build && timeout 60 ./tests/cuda/$t) > $R/$t.log 2>&1; echo "$t rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]' $R/$t.log | tr '\n' ' ')"
  grep -E "Failure|Expected|Which is" -A2 $R/$t.log | head -12
  tar czf $OUT/s30f.tgz -C /tmp s30f
done
timeout 60 ./build/turbokv_cuda_bench --configs 256:4:1 --batches 16,64 --contexts 32768,131072 --bits 2,3 --methods fp8,kivi,rvq --csv $R/d256-other.csv > $R/d256-other.log 2>&1; echo "bench rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked|CHECK FAILED' $R/d256-other.log | tr '\n' ' ')"
grep -E "kivi|fp8|rvq" $R/d256-other.log | grep -v "cuda cores" | head -30
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s30f.tgz -C /tmp s30f
