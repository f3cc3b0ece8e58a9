#!/usr/bin/env bash
# Session 43, device call 4 (B=build-lean carry-build of test_cuda_vq_paged test_cuda_vq):
# 3 + 3-bit RVQ at head_dim 80 / 96 / 112 on the TurboQuant fp16 kernel (H16Layout::RVQ2, bit spans; dense
# rotations in the set-up and the combine). The RVQ instances' registers / stack, every CudaVq* / CudaRvq* test,
# the staged fallbacks (TURBOKV_RVQ_H16=0 ...), memcheck / racecheck of the dense decode test (small), then the rvq
# rows at 80 / 96 / 112 / 128 (b16 x 32k, 2, 3, 4 bits) and PyTorch SDPA on the same shapes. The summary is printed last.
. docs/experiments/device-prelude.sh
cuobjdump --dump-resource-usage $T 2>/dev/null | grep -A1 -E "decode_h16_kernelILi(64|80|96|112|128)ELi([34])ELi([34])ELi8ELb0ELb[01]ELb0ELi4E" \
  | grep -oE "Function [^ ]+|REG:[0-9]+|STACK:[0-9]+|LOCAL:[0-9]+" | paste - - - - > $OUT/resources.txt
echo "rvq h16 instances: $(wc -l < $OUT/resources.txt)" >> $S
awk '{print $2, $3, $4, $5}' $OUT/resources.txt | sed 's/_ZN7turbokv4cuda6detail17decode_h16_kernel//' >> $S
timeout 330 $T --gtest_filter="CudaVq*:CudaRvq*" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|dense head_dims|rvq decode worst" $OUT/tests.log | head -30 >> $S
TURBOKV_STAGED_RAW=0 TURBOKV_RVQ_H16=0 TURBOKV_PVQ_H16=0 timeout 150 $T --gtest_filter='CudaVqPaged.*Decode*:CudaVqPaged.Dense*' > $OUT/tests-direct.log 2>&1
echo "staged tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" $OUT/tests-direct.log | head -10 >> $S
for tf in 'memcheck CudaVqPaged.DenseHeadDims*' 'racecheck CudaVqPaged.DenseHeadDims*'; do
  tool=${tf%% *}; f=${tf#* }
  TURBOKV_CUDA_TEST_SMALL=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$f" > $OUT/san-$tool.log 2>&1
  echo "$tool $f rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' $OUT/san-$tool.log | tr '\n' ' ') $(( $(date +%s) - T0 )) s" >> $S
done
timeout 100 $T bench --configs 80:32:8,96:32:8,112:32:8,128:32:8 --batches 16 --contexts 32768 --bits 2,3,4 \
  --methods rvq --csv $OUT/bench-s43d.csv > $OUT/bench.log 2>&1
echo "bench rc=$? total $(( $(date +%s) - T0 )) s" >> $S
grep -E "checked|FAILED" $OUT/bench.log | tail -2 >> $S
timeout 80 python3 bench/cuda/compare_sdpa.py --ours-csv $OUT/bench-s43d.csv --csv $OUT/compare-s43d.csv > $OUT/compare.log 2>&1
echo "compare rc=$? total $(( $(date +%s) - T0 )) s" >> $S
grep -E "sdpa-|rvq" $OUT/compare.log | grep -v " cc " | head -40 >> $S
cat $S
