#!/usr/bin/env bash
# Session 44, device call 2 (B=build-lean carry-build of test_cuda_vq test_cuda_vq_paged test_cuda_kivi): PolarQuant
# stages one 16-element radius group per lane at every head_dim of the fp16 kernel (PolarFmt::lanes_per_token: 4 / 8
# / 16 lanes per token; staged_tc_lanes), and its cos / sin tables interleaved (one 8-byte look-up per angle). Sides:
# A0 = session 43's binary (build-carry/tkv_base.xz), A = commit 20ec224's (one group per lane, tkv_s44b.xz), B = this
# tree (the interleaved tables too). Every CudaVq* / CudaRvq* / CudaPolar* / CudaKivi* test, the staged fallbacks,
# memcheck / racecheck of the PolarQuant decodes (small), PolarQuant rows at 64..256 (b16 x 32k, 2 / 3 / 4 bits) of
# the three binaries in turn, twice, and PyTorch SDPA on the same shapes. The summary is printed last.
. docs/experiments/device-prelude.sh
A0=/tmp/tkv_base; xz -dc build-carry/tkv_base.xz > $A0 && chmod +x $A0
A=/tmp/tkv_s44b; xz -dc build-carry/tkv_s44b.xz > $A && chmod +x $A
cuobjdump --dump-resource-usage $T 2>/dev/null | grep -A1 -E "staged_tc_kernel.*PolarFmt" \
  | grep -oE "REG:[0-9]+ STACK:[0-9]+" | sort | uniq -c | sort -rn | head -8 | tr '\n' ';' | sed 's/^/polar staged_tc REG STACK counts: /' >> $S; echo >> $S
timeout 300 $T --gtest_filter="CudaVq*:CudaRvq*:CudaPolar*:CudaKivi*" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|polar" $OUT/tests.log | head -20 >> $S
TURBOKV_STAGED_RAW=0 TURBOKV_KIVI_H16=0 timeout 150 $T --gtest_filter='CudaVqPaged.*Decode*:CudaVqPaged.Dense*:CudaPolar.Decode*:CudaKivi.*Decode*' > $OUT/tests-direct.log 2>&1
echo "staged (raw rows off, KIVI h16 off) tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" $OUT/tests-direct.log | head -10 >> $S
for tf in 'memcheck CudaPolar.Decode*:CudaVqPaged.DenseHeadDims*' 'racecheck CudaPolar.Decode*:CudaVqPaged.DenseHeadDims*'; do
  tool=${tf%% *}; f=${tf#* }
  TURBOKV_CUDA_TEST_SMALL=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$f" > $OUT/san-$tool.log 2>&1
  echo "$tool $f rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' $OUT/san-$tool.log | tr '\n' ' ') $(( $(date +%s) - T0 )) s" >> $S
done
CFG="--configs 64:9:3,80:32:8,96:32:8,112:32:8,128:32:8,192:32:8,256:4:1 --batches 16 --contexts 32768 --bits 2,3,4 --methods polar"
for pass in 1 2; do
  for side in A0 A B; do
    bin=$([ $side = A0 ] && echo $A0 || ([ $side = A ] && echo $A || echo $T))
    chk=$([ $pass = 1 ] && [ $side = B ] && echo "" || echo "--no-check")
    timeout 120 $bin bench $CFG $chk --csv $OUT/bench-$side$pass.csv > $OUT/bench-$side$pass.log 2>&1
    echo "bench $side pass $pass rc=$? $(( $(date +%s) - T0 )) s: $(grep -E 'checked' $OUT/bench-$side$pass.log | tail -1)" >> $S
  done
done
python3 - "$OUT" >> $S <<'PY'
import csv, sys, collections
o = sys.argv[1]; t = collections.defaultdict(dict)
for side in ("A0", "A", "B"):
    for p in "12":
        for r in csv.DictReader(open(f"{o}/bench-{side}{p}.csv")):
            if "polar" not in r["method"] and "fp16-flash" not in r["method"]: continue
            k = (r["method"].replace(" ", "_"), r["bits"], r["head_dim"])
            t[k].setdefault(side, []).append(float(r["time_us"]))
print("method bits head_dim | A0 (s43) us | A (20ec224) us | B (new) us | A0/B | A/B (min of 2)")
for k, v in sorted(t.items()):
    if len(v) == 3:
        a0, a, b = min(v["A0"]), min(v["A"]), min(v["B"])
        print(*k, "|", v["A0"], "|", v["A"], "|", v["B"], "|", round(a0 / b, 3), "|", round(a / b, 3))
PY
timeout 100 python3 bench/cuda/compare_sdpa.py --ours-csv $OUT/bench-B1.csv --csv $OUT/compare-s44b.csv > $OUT/compare.log 2>&1
echo "compare rc=$? total $(( $(date +%s) - T0 )) s" >> $S
grep -E "sdpa-|polar" $OUT/compare.log | grep -v " cc " | head -50 >> $S
rm -f $OUT/*.log $OUT/resources.txt  # keep the reply's files few: the summary and the csvs
cat $S
