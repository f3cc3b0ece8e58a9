#!/usr/bin/env bash
# Session 42, device call without a device build: build-carry/tkv_dev.xz (docs/experiments/carry-build.sh
# test_cuda_vq test_cuda_vq_paged test_cuda_qjl against this commit's build-dev) carried. RVQ, product VQ and
# PolarQuant at the dense-rotation head_dims (every test of the two VQ files: encode / append bytes, dequantize
# floats, decodes vs fp64), the Prod encoders' shared tail (test_cuda_qjl), memcheck / racecheck of the new
# encode paths (small), then bench rows of the dense head_dims next to head_dim 128.
set -uo pipefail
OUT=${OUT:-/tmp/tkv_out}; mkdir -p "$OUT"
. bench/cuda/device_deps.sh
T0=$(date +%s)
xz -dc build-carry/tkv_dev.xz > /tmp/tkv_dev && chmod +x /tmp/tkv_dev
T=/tmp/tkv_dev
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 400 $T > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s"; grep -E "^\[  (PASSED|FAILED)|^\[       OK|FAILED|Failure|measured|control|Expected|differ" $OUT/tests.log | head -80
for tf in 'memcheck CudaVqPaged.DenseHeadDims*' 'racecheck CudaRvq.EncodeBytes*:CudaPolar.EncodeBytes*' \
          'memcheck CudaPvq.EncodeAndDequantize*:CudaTqProd.EncodeBytes*:CudaTqProd.AppendBytes*'; do
  tool=${tf%% *}; f=${tf#* }
  TURBOKV_CUDA_TEST_SMALL=1 timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$f" > $OUT/san.log 2>&1
  echo "$tool $f rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' $OUT/san.log | tr '\n' ' ')"
  cp $OUT/san.log "$OUT/san-$tool-${f%%\**}.log"
done
echo "sanitizers done $(( $(date +%s) - T0 )) s"
timeout 100 $T bench --configs 96:32:8,128:32:8,80:20:4 --batches 4 --contexts 16384 --bits 2,4 \
  --methods rvq,pvq,polar,tq-prod --csv $OUT/bench-s42a.csv > $OUT/bench.log 2>&1
echo "bench rc=$? total $(( $(date +%s) - T0 )) s"; grep -E "rvq|pvq|polar|prod|checked|FAILED" $OUT/bench.log | head -60
