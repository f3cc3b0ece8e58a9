# Session 34 device run: head_dim-128 sequence pairs (H16Layout::PAIR at D = 256, 12 warps) on an H200.
# Builds the working tree once (kernel 0 = pairs where the default rule takes them, "tq-mse (1 seq/block)" =
# the one-sequence kernel, timed next to it in the same binary), runs the decode tests, two bench passes
# (the first checked against the CPU reference), then compare_sdpa on the first pass's rows.
# Usage: export OUT && bash docs/experiments/run-s34a.sh   (everything lands in $OUT/s34a.tgz)
set -uo pipefail
R=/tmp/s34a; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s34a.log") 2>&1
T0=$(date +%s)
ROOT=$(pwd)
PREFIX=/tmp/deps
if [ -d .deps ] && ! [ -f /usr/include/gtest/gtest.h -a -d /usr/include/eigen3 -a -d /usr/include/nlohmann -a -d /usr/include/CLI ]; then
  mkdir -p $PREFIX
  for f in .deps/*.deb; do dpkg -x "$f" $PREFIX 2>/dev/null || (cd /tmp && ar x "$ROOT/$f" data.tar.xz && tar -xf data.tar.xz -C $PREFIX); done
  export CMAKE_PREFIX_PATH=$PREFIX/usr
  export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 330 cmake --build build -j16 --target turbokv_cuda_bench test_cuda_attention > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
grep -E "error" -A3 $R/build.log | head -20
TB=$(find build -name test_cuda_attention -type f -executable | head -1)
B=./build/turbokv_cuda_bench
SH="--configs 128:32:8 --batches 8,16,64 --contexts 32768,65536,131072 --bits 2,3,4 --methods tq-mse"
timeout 120 $B $SH --csv $R/p1.csv > $R/p1.log 2>&1
echo "pass 1 rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked|CHECK FAILED' $R/p1.log | tr '\n' ' ')"
timeout 90 $B $SH --no-check --csv $R/p2.csv > $R/p2.log 2>&1; echo "pass 2 rc=$? $(( $(date +%s)-T0 )) s"
python3 - $R/p1.csv $R/p2.csv <<'PY'
import csv, sys, collections
for f in sys.argv[1:]:
    t = collections.defaultdict(dict)
    for r in csv.reader(open(f)):
        if len(r) < 14 or r[0] != 'decode_attention': continue
        t[(float(r[2]), int(r[7]), int(r[3]))][r[1]] = float(r[9])
    print(f)
    for k in sorted(t):
        a, b = t[k].get('tq-mse'), t[k].get('tq-mse (1 seq/block)')
        if a and b: print('  bits %.1f b%-3d L%-7d pair/default %8.1f  1seq %8.1f  speedup %.3f' % (k + (a, b, b / a)))
PY
tar czf $OUT/s34a.tgz -C /tmp s34a
timeout 150 $TB --gtest_filter='CudaDecode.TqMseMatchesReference:CudaDecode.RejectsBadArguments' > $R/test.log 2>&1
echo "test rc=$? $(( $(date +%s)-T0 )) s"; grep -E "FAILED|PASSED|Failure" $R/test.log | head -20
tar czf $OUT/s34a.tgz -C /tmp s34a
timeout 150 python3 bench/cuda/compare_sdpa.py --ours-csv $R/p1.csv > $R/compare.txt 2>&1; echo "compare rc=$? $(( $(date +%s)-T0 )) s"
grep -E "GPU|sdpa-cudnn|K3V3 |K4V4 |K2V2 " $R/compare.txt | head -60
tar czf $OUT/s34a.tgz -C /tmp s34a
