# Session 36 device run (one call; ~13 device minutes were left after failed starts): HEAD built (session 35's
# launch_pair128 removal, never run on a GPU, and the 16-bit-input encode's sign by XOR), the decode tests
# (TqMse cases incl. the head_dim-128 pairs) and the append tests, an A/B of the encode (TURBOKV_APPEND_SIGN_MUL=1
# = the old sign multiply) in alternating passes, issue 5's d128 rows against SDPA, then ncu of the 3-bit
# pair decode and the fp16-input d128 3-bit encode.
# Usage: export OUT && bash docs/experiments/run-s36a.sh   (carry .deps; output in $OUT/s36a.tgz)
set -uo pipefail
R=/tmp/s36a; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s36a.log") 2>&1
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
timeout 300 cmake --build build -j16 --target turbokv_cuda_bench test_cuda_attention test_cuda_append > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
grep -E "error" -A3 $R/build.log | head -20
TA=$(find build -name test_cuda_append -type f -executable | head -1)
TB=$(find build -name test_cuda_attention -type f -executable | head -1)
timeout 60 $TA > $R/test-append.log 2>&1; echo "test_cuda_append rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'PASSED|FAILED' $R/test-append.log | tr '\n' ' ')"
TURBOKV_APPEND_SIGN_MUL=1 timeout 30 $TA --gtest_filter='*SixteenBit*' > $R/test-append-mul.log 2>&1; echo "append (sign mul) rc=$? $(grep -E 'PASSED|FAILED' $R/test-append-mul.log | tr '\n' ' ')"
timeout 150 $TB --gtest_filter='CudaDecode.*' > $R/test-decode.log 2>&1; echo "decode tests rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'PASSED|FAILED' $R/test-decode.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|relative" $R/test-decode.log | head -10
tar czf $OUT/s36a.tgz -C /tmp s36a
B=./build/turbokv_cuda_bench
E="--configs 128:32:8,64:9:3,256:4:1 --batches 16 --contexts 65536 --bits 2,3,4 --methods encode"
timeout 60 $B $E --csv $R/enc-B1.csv > $R/enc-B1.log 2>&1; echo "enc B1 (xor, checked) rc=$? $(grep -iE 'checked|CHECK FAILED' $R/enc-B1.log | tr '\n' ' ')"
TURBOKV_APPEND_SIGN_MUL=1 timeout 60 $B $E --no-check --csv $R/enc-A1.csv > $R/enc-A1.log 2>&1; echo "enc A1 rc=$?"
timeout 60 $B $E --no-check --csv $R/enc-B2.csv > $R/enc-B2.log 2>&1; echo "enc B2 rc=$?"
TURBOKV_APPEND_SIGN_MUL=1 timeout 60 $B $E --no-check --csv $R/enc-A2.csv > $R/enc-A2.log 2>&1; echo "enc A2 rc=$? $(( $(date +%s)-T0 )) s"
python3 - $R <<'PY'
import csv, sys, glob
R = sys.argv[1]; t = {}
for tag in ('A1', 'B1', 'A2', 'B2'):
    for r in csv.reader(open(f'{R}/enc-{tag}.csv')):
        if len(r) > 13 and r[0] == 'encode': t.setdefault((r[4], r[2], r[1]), {})[tag] = (float(r[9]), float(r[13]))
for k, v in sorted(t.items()):
    if len(v) == 4:
        a = (v['A1'][0] + v['A2'][0]) / 2; b = (v['B1'][0] + v['B2'][0]) / 2
        print('  d%s %s-bit %-16s A(mul) %7.1f %7.1f us  B(xor) %7.1f %7.1f us  A/B %.3f  B GB/s %5.0f' % (k[0], k[1], k[2], v['A1'][0], v['A2'][0], v['B1'][0], v['B2'][0], a / b, v['B1'][1]))
PY
tar czf $OUT/s36a.tgz -C /tmp s36a
timeout 80 $B --configs 128:32:8 --batches 1,16 --contexts 32768,65536 --bits 2,3,4 --methods tq-mse --csv $R/sdpa.csv > $R/sdpa.log 2>&1
echo "bench rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked|CHECK FAILED' $R/sdpa.log | tr '\n' ' ')"
timeout 90 python3 bench/cuda/compare_sdpa.py --ours-csv $R/sdpa.csv > $R/compare.txt 2>&1; echo "compare rc=$? $(( $(date +%s)-T0 )) s"
grep -E "GPU|sdpa-cudnn|sdpa-flash|K2V2|K3V3|K4V4" $R/compare.txt | head -30
tar czf $OUT/s36a.tgz -C /tmp s36a
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
timeout 90 $NCU --set full -k regex:decode_h16 -c 1 -o $R/ncu-k3 $B --configs 128:32:8 --batches 16 --contexts 65536 --bits 3 --methods tq-mse --no-check > $R/ncu-k3.log 2>&1
echo "ncu k3 rc=$? $(( $(date +%s)-T0 )) s"
timeout 40 $NCU --import $R/ncu-k3.ncu-rep --page details > $R/ncu-k3.txt 2>&1
grep -E "Duration|Issue Slots Busy|Registers Per|Achieved Occ|DRAM Throughput|No Eligible|Warp Cycles Per Issued|decode_h16" $R/ncu-k3.txt | head -12
tar czf $OUT/s36a.tgz -C /tmp s36a
timeout 90 $NCU --set full --kernel-name-base demangled -k 'regex:append_kernel<128, 3, true, __half' -c 1 -o $R/ncu-enc $B --configs 128:32:8 --batches 16 --contexts 65536 --bits 3 --methods encode --no-check > $R/ncu-enc.log 2>&1
echo "ncu encode rc=$? $(( $(date +%s)-T0 )) s"
timeout 40 $NCU --import $R/ncu-enc.ncu-rep --page details > $R/ncu-enc.txt 2>&1
grep -E "Duration|Issue Slots Busy|Registers Per|Achieved Occ|DRAM Throughput|L1/TEX Hit|No Eligible|append" $R/ncu-enc.txt | head -12
tar czf $OUT/s36a.tgz -C /tmp s36a
echo "done $(( $(date +%s)-T0 )) s"
