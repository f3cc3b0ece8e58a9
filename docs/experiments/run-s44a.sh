#!/usr/bin/env bash
# Session 44, device call 1 (B=build-lean carry-build of test_cuda_vq test_cuda_vq_paged; build-carry/tkv_base.xz:
# session 43's final binary, the A side): PolarQuant's staged format with the widths as template constants where
# keys and values share them (PolarFmt<B>) and runs of 1 / 2 / 4 quads per lane (one span per level, shared factors
# loaded once, 16-byte fp16 stores); rvq_paged_decode's route through rvq_h16_route. The staged_tc_kernel
# instances' registers / stack, every CudaVq* / CudaRvq* / CudaPolar* test, the staged fallbacks, memcheck /
# racecheck of the PolarQuant decodes (small), then PolarQuant rows (b16 x 32k, 2 / 3 / 4 bits) of the old and the
# new binary alternately (A B A B) and PyTorch SDPA on the same shapes. The summary is printed last.
. docs/experiments/device-prelude.sh
A=/tmp/tkv_base; xz -dc build-carry/tkv_base.xz > $A && chmod +x $A
cuobjdump --dump-resource-usage $T 2>/dev/null | grep -A1 -E "staged_tc_kernel.*PolarFmt" \
  | grep -oE "Function [^ ]+|REG:[0-9]+|STACK:[0-9]+|LOCAL:[0-9]+" | paste - - - - > $OUT/resources.txt
echo "polar staged_tc instances: $(wc -l < $OUT/resources.txt); stack > 0: $(grep -cv 'STACK:0' $OUT/resources.txt)" >> $S
grep -E "Li(64|128|256)EE" $OUT/resources.txt | awk '{print $2, $3, $4, $5}' | sed -E 's/.*PolarFmtILi([0-9])E.*Li([0-9]+)EEEv.*/B\1 D\2/' >> $S
timeout 330 $T --gtest_filter="CudaVq*:CudaRvq*:CudaPolar*" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|worst" $OUT/tests.log | head -30 >> $S
TURBOKV_STAGED_RAW=0 TURBOKV_RVQ_H16=0 timeout 150 $T --gtest_filter='CudaVqPaged.*Decode*:CudaVqPaged.Dense*:CudaPolar.Decode*' > $OUT/tests-direct.log 2>&1
echo "staged (raw rows off, RVQ h16 off) tests rc=$? $(( $(date +%s) - T0 )) s" >> $S
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" $OUT/tests-direct.log | head -10 >> $S
for tf in 'memcheck CudaPolar.Decode*:CudaVqPaged.DenseHeadDims*' 'racecheck CudaPolar.Decode*'; do
  tool=${tf%% *}; f=${tf#* }
  TURBOKV_CUDA_TEST_SMALL=1 timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$f" > $OUT/san-$tool.log 2>&1
  echo "$tool $f rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' $OUT/san-$tool.log | tr '\n' ' ') $(( $(date +%s) - T0 )) s" >> $S
done
CFG="--configs 128:32:8,96:32:8,160:32:8,256:4:1 --batches 16 --contexts 32768 --bits 2,3,4 --methods polar"
for pass in 1 2; do
  for side in A B; do
    bin=$([ $side = A ] && echo $A || echo $T)
    chk=$([ $pass = 1 ] && echo "" || echo "--no-check")
    timeout 120 $bin bench $CFG $chk --csv $OUT/bench-$side$pass.csv > $OUT/bench-$side$pass.log 2>&1
    echo "bench $side pass $pass rc=$? $(( $(date +%s) - T0 )) s: $(grep -E 'checked' $OUT/bench-$side$pass.log | tail -1)" >> $S
  done
done
python3 - "$OUT" >> $S <<'PY'
import csv, sys, collections
o = sys.argv[1]; t = collections.defaultdict(dict)
for side in "AB":
    for p in "12":
        for r in csv.DictReader(open(f"{o}/bench-{side}{p}.csv")):
            if "polar" not in r["method"] and "fp16-flash" not in r["method"]: continue
            k = (r["method"].replace(" ", "_"), r["bits"], r["head_dim"])
            t[k].setdefault(side, []).append(float(r["time_us"]))
print("method bits head_dim | A (old) us | B (new) us | A/B")
for k, v in sorted(t.items()):
    if "A" in v and "B" in v:
        a, b = min(v["A"]), min(v["B"]); print(*k, "|", v["A"], "|", v["B"], "|", round(a / b, 3))
PY
timeout 80 python3 bench/cuda/compare_sdpa.py --ours-csv $OUT/bench-B1.csv --csv $OUT/compare-s44a.csv > $OUT/compare.log 2>&1
echo "compare rc=$? total $(( $(date +%s) - T0 )) s" >> $S
grep -E "sdpa-|polar" $OUT/compare.log | head -40 >> $S
cat $S
