#!/usr/bin/env bash
# Session 41, device call without a device build: build-carry/tkv_dev.xz (docs/experiments/carry-build.sh
# test_cuda_qjl test_cuda_attention test_cuda_append, against this commit's build-dev) carried. Session 40's and 41's
# compiled-only tests at full lengths, memcheck / racecheck of the new paths (small), then bench rows.
set -uo pipefail
OUT=${OUT:-/tmp/tkv_out}; mkdir -p "$OUT"
. bench/cuda/device_deps.sh
T0=$(date +%s)
xz -dc build-carry/tkv_dev.xz > /tmp/tkv_dev && chmod +x /tmp/tkv_dev
T=/tmp/tkv_dev
nvidia-smi --query-gpu=name --format=csv,noheader
$T --gtest_filter='CudaQjl.*:CudaTqProd.*:CudaDequantize.*:CudaDecode.Qjl*:CudaDecode.TqProd*:CudaDecode.Sketch*:CudaDecode.*Reject*' > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s"; grep -E "^\[  (PASSED|FAILED)|^\[       OK|FAILED|Failure|worst|Expected|differ" $OUT/tests.log | head -60
for tf in 'memcheck CudaDecode.Sketch*:CudaDecode.QjlKeys*' 'racecheck CudaDecode.Sketch*' \
          'memcheck CudaDequantize.Matches*:CudaQjl.AppendBytes*:CudaTqProd.AppendBytes*:CudaTqProd.EncodeBytes*'; do
  tool=${tf%% *}; f=${tf#* }
  TURBOKV_CUDA_TEST_SMALL=1 timeout 50 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$f" > $OUT/san.log 2>&1
  echo "$tool $f rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' $OUT/san.log | tr '\n' ' ')"
  cp $OUT/san.log "$OUT/san-$tool-${f%%\**}.log"
done
echo "sanitizers done $(( $(date +%s) - T0 )) s"
timeout 90 $T bench --configs 128:32:8,64:9:3,256:4:1 --batches 16 --contexts 65536 --bits 2,3,4 \
  --methods tq-mse,qjl,dequantize --csv $OUT/bench-s41c.csv > $OUT/bench.log 2>&1
echo "bench rc=$?"
timeout 50 $T bench --configs 96:32:8,80:20:4 --batches 4 --contexts 16384 --bits 2,3,4 \
  --methods tq-mse,tq-prod,qjl --csv $OUT/bench-s41c-dense.csv >> $OUT/bench.log 2>&1
echo "bench rc=$? total $(( $(date +%s) - T0 )) s"; grep -E "qjl|prod|dequant|checked|FAILED" $OUT/bench.log | head -60
