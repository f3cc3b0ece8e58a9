# For the next device call (written in session 36, not run yet): 6db0675's device-dependent pair default (host code
# only, never run on a GPU) and the 16-bit encode of 78c0135. Builds this tree, prints the device's DRAM bytes per SM
# cycle (the rule's input), runs test_cuda_attention's CudaDecode.* (its routing test mirrors the rule) and
# test_cuda_append, then times d128 3-bit pairs against one sequence per block at b8 / b16 / b64 x 64k / 128k in two
# alternating passes (bench kernels 3 = one sequence, 5 = pairs; the default row shows which the rule took), then
# issue 5's d128 rows against SDPA.
# Usage: export OUT && bash docs/experiments/run-s37a.sh   (carry .deps; output in $OUT/s37a.tgz)
set -uo pipefail
R=/tmp/s37a; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s37a.log") 2>&1
T0=$(date +%s)
. bench/cuda/device_deps.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
git log --oneline -1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 300 cmake --build build -j16 --target turbokv_cuda_bench test_cuda_attention test_cuda_append test_cuda_pack > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
grep -E "error" -A3 $R/build.log | head -20
python3 - <<'PY'
import ctypes
rt = None
for n in ('libcudart.so', 'libcudart.so.13', 'libcudart.so.12'):
    try: rt = ctypes.CDLL(n); break
    except OSError: pass
if rt:
    v = [ctypes.c_int() for _ in range(4)]
    for x, a in zip(v, (36, 37, 16, 13)): rt.cudaDeviceGetAttribute(ctypes.byref(x), a, 0)
    m, b, s, c = (x.value for x in v)
    print('mem %d kHz, bus %d bits, %d SMs at %d kHz: %.2f DRAM bytes per SM cycle' % (m, b, s, c, 2.0 * m * b / 8 / (s * c)))
PY
TP=$(find build -name test_cuda_pack -type f -executable | head -1)
timeout 60 $TP > $R/test-pack.log 2>&1; echo "test_cuda_pack rc=$? $(grep -E 'PASSED|FAILED|DRAM bytes' $R/test-pack.log | tr '\n' ' ')"
TA=$(find build -name test_cuda_append -type f -executable | head -1)
TB=$(find build -name test_cuda_attention -type f -executable | head -1)
timeout 60 $TA > $R/test-append.log 2>&1; echo "test_cuda_append rc=$? $(grep -E 'PASSED|FAILED' $R/test-append.log | tr '\n' ' ')"
timeout 150 $TB --gtest_filter='CudaDecode.*' > $R/test-decode.log 2>&1; echo "decode tests rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'PASSED|FAILED' $R/test-decode.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|is not the" $R/test-decode.log | head -10
tar czf $OUT/s37a.tgz -C /tmp s37a
B=./build/turbokv_cuda_bench
for p in 1 2; do
  timeout 120 $B --configs 128:32:8 --batches 8,16,64 --contexts 65536,131072 --bits 3 --methods tq-mse --no-check --csv $R/pairs-$p.csv > $R/pairs-$p.log 2>&1
  echo "pairs pass $p rc=$? $(( $(date +%s)-T0 )) s"
done
python3 - $R <<'PY'
import csv, sys
R = sys.argv[1]; t = {}
for p in (1, 2):
    for r in csv.reader(open(f'{R}/pairs-{p}.csv')):
        if len(r) > 13 and r[0] == 'decode_attention' and r[2] == '3': t.setdefault((int(r[7]), int(r[3])), {}).setdefault(r[1], []).append(float(r[9]))
for k, v in sorted(t.items()):
    print('  3-bit b%d x %d: ' % k + '  '.join('%s %s' % (m, '/'.join('%.1f' % x for x in xs)) for m, xs in sorted(v.items())))
PY
tar czf $OUT/s37a.tgz -C /tmp s37a
timeout 80 $B --configs 128:32:8 --batches 1,16 --contexts 32768,65536 --bits 2,3,4 --methods tq-mse --csv $R/sdpa.csv > $R/sdpa.log 2>&1
echo "bench rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked|CHECK FAILED' $R/sdpa.log | tr '\n' ' ')"
timeout 90 python3 bench/cuda/compare_sdpa.py --ours-csv $R/sdpa.csv > $R/compare.txt 2>&1; echo "compare rc=$? $(( $(date +%s)-T0 )) s"
grep -E "GPU|sdpa-cudnn|K2V2|K3V3|K4V4" $R/compare.txt | head -40
tar czf $OUT/s37a.tgz -C /tmp s37a
echo "done $(( $(date +%s)-T0 )) s"
