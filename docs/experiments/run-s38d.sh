# Session 38: TurboQuant-Prod keys at head_dim 64 / 128, the per-thread sketch form skips the heads past the GQA group
# (their Pi q is zero; the results are bit-identical). Builds this tree (B); CudaDecode.TqProd*; a checked bench pass;
# A/B against session 37's bench (A: build-dev/tcb.xz from 0eedd37, whose head_dim 64 / 128 Prod code is the
# previous commit's) in alternating passes.
# Usage: export OUT && bash docs/experiments/run-s38d.sh   (carry .deps and build-dev/tcb.xz; output $OUT/s38d.tgz)
set -uo pipefail
R=/tmp/s38d; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s38d.log") 2>&1
T0=$(date +%s)
. bench/cuda/device_deps.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
A=/tmp/tcbA
python3 -c "import lzma, shutil; shutil.copyfileobj(lzma.open('build-dev/tcb.xz'), open('$A', 'wb'))" && chmod +x $A
NV=$(dirname $(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc))
export LD_LIBRARY_PATH=$NV/../lib64:$NV/../lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 300 cmake --build build -j16 --target turbokv_cuda_bench test_cuda_attention > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
grep -E "error" -A3 $R/build.log | head -20
B=./build/turbokv_cuda_bench
TB=$(find build -name test_cuda_attention -type f -executable | head -1)
timeout 60 $TB --gtest_filter='CudaDecode.TqProd*' > $R/test-prod.log 2>&1; echo "prod test rc=$? $(grep -E 'PASSED|FAILED|worst' $R/test-prod.log | tr '\n' ' ')"
timeout 40 $B --configs 128:32:8,64:9:3 --batches 1,16 --contexts 4096,32768 --bits 1,2,3,4 --methods tq-prod --csv $R/checked.csv > $R/checked.log 2>&1
echo "checked rc=$? $(grep -E 'checked' $R/checked.log | tail -1)"
tar czf $OUT/s38d.tgz -C /tmp s38d
for p in 1 2; do
  for X in A B; do
    BIN=$A; [ $X = B ] && BIN=$B
    timeout 30 $BIN --configs 128:32:8,64:9:3 --batches 1,16 --contexts 4096,32768,131072 --bits 3,4 --methods tq-prod --no-check --csv $R/prod-$X$p.csv > $R/prod-$X$p.log 2>&1
    echo "pass $p $X rc=$? $(( $(date +%s)-T0 )) s"
  done
  tar czf $OUT/s38d.tgz -C /tmp s38d
done
echo "done $(( $(date +%s)-T0 )) s"
