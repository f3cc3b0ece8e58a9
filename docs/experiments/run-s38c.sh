# Session 38, final tree: TurboQuant-Prod keys' sketched query at head_dim 256 with S read once per block (run
# s38-2's mode 3, compiled for D == 256 only). Builds this tree (B); CudaDecode.TqProd* at full lengths; a checked
# bench pass; A/B against session 37's bench (A: build-dev/tcb.xz, built from 0eedd37) in alternating passes; the
# issue-5 grid (as run-s37c.sh) with B plus compare_sdpa.py per head_dim; memcheck of the Prod decode test (small).
# Usage: export OUT && bash docs/experiments/run-s38c.sh   (carry .deps and build-dev/tcb.xz; output $OUT/s38c.tgz)
set -uo pipefail
R=/tmp/s38c; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s38c.log") 2>&1
T0=$(date +%s)
. bench/cuda/device_deps.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
A=/tmp/tcbA
python3 -c "import lzma, shutil; shutil.copyfileobj(lzma.open('build-dev/tcb.xz'), open('$A', 'wb'))" && chmod +x $A
NV=$(dirname $(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc))
export LD_LIBRARY_PATH=$NV/../lib64:$NV/../lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 400 cmake --build build -j16 --target turbokv_cuda_bench test_cuda_attention > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
grep -E "error" -A3 $R/build.log | head -20
B=./build/turbokv_cuda_bench
TB=$(find build -name test_cuda_attention -type f -executable | head -1)
timeout 120 $TB --gtest_filter='CudaDecode.TqProd*' > $R/test-prod.log 2>&1; echo "prod test rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'PASSED|FAILED|worst' $R/test-prod.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is" $R/test-prod.log | head -10
timeout 60 $B --configs 128:32:8,64:9:3,256:4:1 --batches 1,16 --contexts 4096,32768 --bits 1,2,3,4 --methods tq-prod --csv $R/checked.csv > $R/checked.log 2>&1
echo "checked rc=$? $(grep -E 'checked' $R/checked.log | tail -1)"
tar czf $OUT/s38c.tgz -C /tmp s38c
for p in 1 2; do
  for X in A B; do
    BIN=$A; [ $X = B ] && BIN=$B
    timeout 60 $BIN --configs 256:4:1,128:32:8,64:9:3 --batches 1,16 --contexts 4096,32768,131072 --bits 3,4 --methods tq-prod --no-check --csv $R/prod-$X$p.csv > $R/prod-$X$p.log 2>&1
    echo "pass $p $X rc=$? $(( $(date +%s)-T0 )) s"
  done
done
tar czf $OUT/s38c.tgz -C /tmp s38c
for c in 128:32:8 64:9:3 256:4:1; do
  d=${c%%:*}
  timeout 90 $B --configs $c --batches 1,8,16,64 --contexts 4096,32768,65536,131072 --bits 2,3,4 --methods tq-mse,tq-prod,encode --no-check --csv $R/grid-$d.csv > $R/grid-$d.log 2>&1
  echo "grid $c rc=$? $(( $(date +%s)-T0 )) s"
  timeout 100 python3 bench/cuda/compare_sdpa.py --ours-csv $R/grid-$d.csv --csv $R/compare-$d.csv > $R/compare-$d.txt 2>&1; echo "compare rc=$? $(( $(date +%s)-T0 )) s"
  tar czf $OUT/s38c.tgz -C /tmp s38c
done
TURBOKV_CUDA_TEST_SMALL=1 timeout 120 compute-sanitizer --tool memcheck $TB --gtest_filter='CudaDecode.TqProd*' > $R/memcheck.log 2>&1
echo "memcheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $R/memcheck.log | tr '\n' ' ')"
TURBOKV_CUDA_TEST_SMALL=1 timeout 120 compute-sanitizer --tool racecheck $TB --gtest_filter='CudaDecode.TqProd*' > $R/racecheck.log 2>&1
echo "racecheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED' $R/racecheck.log | tr '\n' ' ')"
tar czf $OUT/s38c.tgz -C /tmp s38c
echo "done $(( $(date +%s)-T0 )) s"
