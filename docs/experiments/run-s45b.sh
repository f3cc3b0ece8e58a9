#!/usr/bin/env bash
# Session 45, device call 2 (build-carry/tkv_dev.xz of run s45-1: main's library at c2ec7c5, the 16-byte raw-row
# pieces): PolarQuant's decode at every head_dim of the fp16 kernel (b16 x 32k, 2 / 3 / 4 bits, every result
# checked against the CPU reference) and PyTorch SDPA on the same shapes in the same run (compare_sdpa.py).
# The summary is printed last.
. docs/experiments/device-prelude.sh
CFG="--configs 64:9:3,80:32:8,96:32:8,112:32:8,128:32:8,144:32:8,160:32:8,176:32:8,192:32:8,208:32:8,224:32:8,240:32:8,256:4:1"
timeout 300 $T bench $CFG --batches 16 --contexts 32768 --bits 2,3,4 --methods polar --csv $OUT/bench-polar.csv > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - T0 )) s: $(grep -E 'checked' $OUT/bench.log | tail -1)" >> $S
timeout 200 python3 bench/cuda/compare_sdpa.py --ours-csv $OUT/bench-polar.csv --csv $OUT/compare-polar.csv > $OUT/compare.txt 2>&1
echo "compare rc=$? total $(( $(date +%s) - T0 )) s" >> $S
grep -E "sdpa-|polar" $OUT/compare.txt | head -120 >> $S
rm -f $OUT/*.log
cat $S
