#!/usr/bin/env bash
# Session 46, device call 2: warp_pack_n by compile-time widths (src/cuda/qjl.cuh warp_pack_b; PolarQuant / RVQ /
# TurboQuant-Prod encodes pack their codes with it). B = build-carry/tkv_dev.xz (this tree), A = tkv_s46a.xz (run
# s46-1's binary: the bit-by-bit packer). Tests of every encode that packs (B), memcheck of the PolarQuant / RVQ
# encodes, then the bench's PolarQuant rows (encode and decode, checked) A B A B.
. docs/experiments/device-prelude.sh
A=/tmp/tkv_s46a; xz -dc build-carry/tkv_s46a.xz > $A && chmod +x $A
timeout 200 $T --gtest_filter='CudaPolar*:CudaRvq*:CudaVq*:CudaPvq*:CudaTqProd*:CudaQjl*:CudaReal.*' > $OUT/tests.txt 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" $OUT/tests.txt | head -20 >> $S
TURBOKV_CUDA_TEST_SMALL=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='CudaPolar.Encode*:CudaRvq.Encode*:CudaVqPaged.AppendBytes*' > $OUT/san-memcheck.log 2>&1
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
rm -f $OUT/*.log
cat $S
