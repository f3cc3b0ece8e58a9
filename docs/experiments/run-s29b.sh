# Session 29 device run s29-2 (repo root on the device): more warps per block (TURBOKV_H16_WIDE=1: 12 at
# head_dim 256, 20 at 128, 24 at 64; KB = VB where the block's shared memory fits) against today's
# (8 / 16 / 16), two alternating passes over d128 32/8, d64 9/3, d256 4/1 at b1/4/16/64 x 32k/64k/128k,
# 1-4 bits; then test_cuda_attention TqMse* with WIDE=1; ncu issue / instructions of d128 3-bit b16 x 64k.
# Usage: export OUT && bash docs/experiments/run-s29b.sh   (everything lands in $OUT/s29b.tgz)
set -uo pipefail
R=/tmp/s29b; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s29b.log") 2>&1
T0=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 330 cmake --build build -j16 --target test_cuda_attention turbokv_cuda_bench > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
B=./build/turbokv_cuda_bench
for p in 1 2; do
  for W in 0 1; do
    TURBOKV_H16_WIDE=$W timeout 90 $B --configs 128:32:8,64:9:3,256:4:1 --batches 1,4,16,64 --contexts 32768,65536,131072 --bits 1,2,3,4 --methods tq-mse --no-check --csv $R/w${W}_$p.csv > $R/w${W}_$p.log 2>&1
    echo "bench wide $W pass $p rc=$? $(( $(date +%s)-T0 )) s"
  done
  tar czf $OUT/s29b.tgz -C /tmp s29b
done
python3 - $R <<'PY'
import csv, sys, collections
R = sys.argv[1]
t = collections.defaultdict(list)
for W in '01':
    for p in '12':
        for r in csv.reader(open(f'{R}/w{W}_{p}.csv')):
            if r[0] != 'decode_attention' or not r[1].startswith('tq-mse'): continue
            t[(r[1], r[4], r[7], r[3], r[2], W)].append(float(r[9]))
keys = sorted({k[:5] for k in t}, key=lambda k: (k[0], int(k[1]), int(k[2]), int(k[3]), float(k[4])))
print('method d batch ctx bits | base us (2 passes) | wide us | base/wide')
for k in keys:
    a, b = t.get(k + ('0',), []), t.get(k + ('1',), [])
    if a and b: print(*k, '|', ' '.join(f'{x:.1f}' for x in a), '|', ' '.join(f'{x:.1f}' for x in b), '|', f'{min(a)/min(b):.3f}')
PY
(cd build && TURBOKV_H16_WIDE=1 timeout 200 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMse*') > $R/attn.log 2>&1; echo "test_cuda_attention TqMse* wide rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]|worst' $R/attn.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is" $R/attn.log | head -10
tar czf $OUT/s29b.tgz -C /tmp s29b
M="--metrics sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread"
for W in 0 1; do
  echo "== ncu wide $W" >> $R/ncu.txt
  TURBOKV_H16_WIDE=$W timeout 60 ncu --clock-control none --kernel-name-base demangled -k "regex:decode_h16_kernel<.int.128, .int.3, .int.3" -c 1 $M \
    $B --configs 128:32:8 --batches 16 --contexts 65536 --bits 3 --methods tq-mse --no-check --repeats 3 >> $R/ncu.txt 2>&1
done
grep -E "^==|decode_h16_kernel<|inst_executed.sum|issue_active|dram__|duration|grid_size|registers" $R/ncu.txt | grep -v PROF
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s29b.tgz -C /tmp s29b
