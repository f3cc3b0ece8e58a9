# Session 37: the full issue-5 shape grid on the current tree (the RESULTS.md headline table was session 8's):
# head_dim 128 32/8, 64 9/3, 256 4/1 x batch 1, 8, 16, 64 x context 4k, 32k, 64k, 128k; TurboQuant-MSE 2/3/4-bit
# (default kernel and the bench's variants), TurboQuant-Prod keys, the encode, our fp16 baseline; then PyTorch SDPA
# (cuDNN, Flash, dequantize + SDPA) on the same GPU by compare_sdpa.py. The grid runs unchecked (the fp64 check of
# b64 x 128k takes minutes); a checked pass of the batch-1 shapes (every result against the fp64 reference) comes last.
# Usage: export OUT && bash docs/experiments/run-s37b.sh   (carry .deps; output in $OUT/s37b.tgz)
set -uo pipefail
R=/tmp/s37b; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s37b.log") 2>&1
T0=$(date +%s)
. bench/cuda/device_deps.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
git log --oneline -1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 300 cmake --build build -j16 --target turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
B=./build/turbokv_cuda_bench
C=128:32:8,64:9:3,256:4:1
for c in 128:32:8 64:9:3 256:4:1; do  # one CSV per head_dim, each compared at once
  d=${c%%:*}
  timeout 90 $B --configs $c --batches 1,8,16,64 --contexts 4096,32768,65536,131072 --bits 2,3,4 --methods tq-mse,tq-prod,encode --no-check --csv $R/grid-$d.csv > $R/grid-$d.log 2>&1
  echo "grid $c rc=$? $(( $(date +%s)-T0 )) s, $(grep -c decode_attention $R/grid-$d.csv) decode rows"
  tar czf $OUT/s37b.tgz -C /tmp s37b
  timeout 100 python3 bench/cuda/compare_sdpa.py --ours-csv $R/grid-$d.csv --csv $R/compare-$d.csv > $R/compare-$d.txt 2>&1; echo "compare rc=$? $(( $(date +%s)-T0 )) s"
  grep -E "GPU" $R/compare-$d.txt
  tar czf $OUT/s37b.tgz -C /tmp s37b
done
timeout 60 $B --configs $C --batches 1 --contexts 4096,32768 --bits 2,3,4 --methods tq-mse,tq-prod --csv $R/checked.csv > $R/checked.log 2>&1
echo "checked pass rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked|CHECK FAILED' $R/checked.log | tr '\n' ' ')"
tar czf $OUT/s37b.tgz -C /tmp s37b
echo "done $(( $(date +%s)-T0 )) s"
