#!/usr/bin/env bash
# Session 46, device call 3: PolarQuant's encode with __launch_bounds__(128, enc_min_blocks(D)) (src/cuda/polar.cu:
# 64 registers up to head_dim 128, where ptxas took 124 at d128, 72 at d256). B = build-carry/tkv_dev.xz (this tree),
# A = tkv_s46b.xz (run s46-2's B). The PolarQuant encode tests and memcheck (B), then the bench's PolarQuant rows
# (checked) A B A B.
. docs/experiments/device-prelude.sh
A=/tmp/tkv_s46b; xz -dc build-carry/tkv_s46b.xz > $A && chmod +x $A
timeout 120 $T --gtest_filter='CudaPolar.*:CudaVqPaged.AppendBytes*:CudaReal.PolarEncodeAndDecode' > $OUT/tests.txt 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" $OUT/tests.txt | head -20 >> $S
TURBOKV_CUDA_TEST_SMALL=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='CudaPolar.Encode*:CudaVqPaged.AppendBytes*' > $OUT/san-memcheck.log 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' $OUT/san-memcheck.log | tr '\n' ' ') $(( $(date +%s) - T0 )) s" >> $S
for pass in 1 2; do
  for side in A B; do
    bin=$([ $side = A ] && echo $A || echo $T)
    timeout 100 $bin bench --configs 64:9:3,128:32:8,256:4:1 --batches 16 --contexts 32768 --bits 2,3,4 --methods polar \
      --csv $OUT/bench-$side$pass.csv > $OUT/bench-$side$pass.log 2>&1
    echo "bench $side$pass rc=$? $(( $(date +%s) - T0 )) s: $(grep -E 'checked' $OUT/bench-$side$pass.log | tail -1)" >> $S
  done
done
for f in $OUT/bench-A1.csv $OUT/bench-B1.csv $OUT/bench-A2.csv $OUT/bench-B2.csv; do
  echo "$(basename $f): $(grep '^encode' $f | cut -d, -f3,5,10 | tr '\n' ' ')" >> $S
done
timeout 60 $T bench --configs 128:32:8 --batches 16 --contexts 32768 --bits 3 --methods encode --csv $OUT/bench-enc.csv \
  > $OUT/bench-enc.log 2>&1
echo "tq-mse encode rows (B; the copy-baseline helper) rc=$?: $(grep -E 'checked' $OUT/bench-enc.log | tail -1)" >> $S
grep '^encode' $OUT/bench-enc.csv | cut -d, -f2,3,10,12,14 >> $S
rm -f $OUT/*.log
cat $S
