#!/usr/bin/env bash
# Session 45, device call 1 (prepared in session 44 as run-s44d.sh): docs/experiments/raw16-s44.patch applied
# (git apply), then (B=build-lean carry-build of test_cuda_vq test_cuda_vq_paged test_cuda_kivi test_cuda_real):
# raw rows of a number of bytes that is not a multiple of 4 (PolarQuant's; KIVI's and RVQ's at some head_dims) copied
# in 16-byte pieces where the pool's blocks allow (plan_raw), not 4-byte words. A = run s44-3's binary
# (build-carry/tkv_s44c.xz, commit 66364f0's library), B = this tree. Every CudaVq* / CudaRvq* / CudaPolar* /
# CudaKivi* test and the real-KV PolarQuant / VQ ones, memcheck of the staged paged decodes (small), then PolarQuant
# and KIVI (staged: TURBOKV_KIVI_H16=0) rows A B A B, and an ncu of B's PolarQuant d128 3-bit step (session 44's
# sections, run s44-3) for the excess global sectors. The summary is printed last.
. docs/experiments/device-prelude.sh
A=/tmp/tkv_s44c; xz -dc build-carry/tkv_s44c.xz > $A && chmod +x $A
timeout 150 $T --gtest_filter="CudaVq*:CudaRvq*:CudaPolar*:CudaKivi*:CudaReal.Polar*" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|real KV, polar" $OUT/tests.log | head -20 >> $S
TURBOKV_KIVI_H16=0 timeout 60 $T --gtest_filter='CudaKivi.*Decode*' > $OUT/tests-kivi-staged.log 2>&1
echo "KIVI staged tests rc=$? $(( $(date +%s) - T0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/tests-kivi-staged.log | tr '\n' ' ')" >> $S
TURBOKV_CUDA_TEST_SMALL=1 TURBOKV_KIVI_H16=0 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='CudaVqPaged.DecodeMatchesReference:CudaVqPaged.DenseHeadDims*:CudaPolar.Decode*:CudaKivi.*Decode*' > $OUT/san-memcheck.log 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' $OUT/san-memcheck.log | tr '\n' ' ') $(( $(date +%s) - T0 )) s" >> $S
for pass in 1 2; do
  for side in A B; do
    bin=$([ $side = A ] && echo $A || echo $T)
    chk=$([ $pass = 1 ] && [ $side = B ] && echo "" || echo "--no-check")
    timeout 60 $bin bench --configs 80:32:8,128:32:8,256:4:1 --batches 16 --contexts 32768 --bits 2,3,4 --methods polar $chk \
      --csv $OUT/bench-$side$pass.csv > $OUT/bench-$side$pass.log 2>&1
    echo "bench polar $side pass $pass rc=$? $(( $(date +%s) - T0 )) s: $(grep -E 'checked' $OUT/bench-$side$pass.log | tail -1)" >> $S
    TURBOKV_KIVI_H16=0 timeout 60 $bin bench --configs 80:32:8,128:32:8 --batches 16 --contexts 32768 --bits 3 --methods kivi --no-check \
      --csv $OUT/kivi-$side$pass.csv > /dev/null 2>&1
  done
done
python3 - "$OUT" >> $S <<'PY'
import csv, sys, collections
o = sys.argv[1]; t = collections.defaultdict(dict)
for pre in ("bench", "kivi"):
    for side in "AB":
        for p in "12":
            try: rows = list(csv.DictReader(open(f"{o}/{pre}-{side}{p}.csv")))
            except OSError: continue
            for r in rows:
                if "fp16-flash" in r["method"] and pre == "kivi": continue
                k = (pre, r["method"].replace(" ", "_"), r["bits"], r["head_dim"])
                t[k].setdefault(side, []).append(float(r["time_us"]))
print("rows method bits head_dim | A (66364f0) us | B (new) us | A/B (min of 2)")
for k, v in sorted(t.items()):
    if "A" in v and "B" in v:
        print(*k, "|", v["A"], "|", v["B"], "|", round(min(v["A"]) / min(v["B"]), 3))
PY
timeout 120 ncu --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats \
  --section InstructionStats --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters \
  -k regex:staged_tc_kernel --launch-skip 3 --launch-count 1 \
  $T bench --configs 128:32:8 --batches 16 --contexts 32768 --bits 3 --methods polar --no-check --repeats 5 > $OUT/ncu-polar.txt 2>&1
echo "ncu polar rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Issue Slots Busy|Issued Warp|Warp Cycles Per Issued|Executed Instructions  |Dynamic Shared" $OUT/ncu-polar.txt | head -20 >> $S
grep -iE "est\. speedup|excessive|uncoalesced|bank" $OUT/ncu-polar.txt | head -10 >> $S
(cd $OUT && tar czf bench-csv.tgz *.csv && rm -f *.csv)
rm -f $OUT/*.log
cat $S
