# Session 34 device run 3 (the final tree): compute-sanitizer memcheck / racecheck over the decode tests
# (lengths capped at 130) and the argument tests, issue 5's headline shapes against PyTorch SDPA in the same run (compare_sdpa on the
# bench's checked rows), the encode rows (fp32 / fp16 / bf16 input), then the other paged decodes' tests.
# Usage: export OUT && bash docs/experiments/run-s34c.sh   (carry .deps; output in $OUT/s34c.tgz)
set -uo pipefail
R=/tmp/s34c; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s34c.log") 2>&1
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
if ! [ -x build/turbokv_cuda_bench ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
fi
timeout 330 cmake --build build -j16 --target turbokv_cuda_bench test_cuda_attention test_cuda_kivi test_cuda_vq_paged test_cuda_fp8 > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"
grep -E "error" -A3 $R/build.log | head -20
B=./build/turbokv_cuda_bench
TB=$(find build -name test_cuda_attention -type f -executable | head -1)
timeout 60 $TB --gtest_filter='CudaDecode.PagedRejectsMisalignedPools:CudaDecode.RejectsBadArguments:CudaDecode.FractionalRejectsMixedWidths' > $R/test-args.log 2>&1
echo "argument tests rc=$? $(( $(date +%s)-T0 )) s"; grep -E "FAILED|PASSED|Failure" $R/test-args.log | head
timeout 100 $B --configs 128:32:8 --batches 1,16 --contexts 32768,65536 --bits 2,3,4 --methods tq-mse --csv $R/sdpa.csv > $R/sdpa.log 2>&1
echo "bench rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked|CHECK FAILED' $R/sdpa.log | tr '\n' ' ')"
timeout 100 python3 bench/cuda/compare_sdpa.py --ours-csv $R/sdpa.csv > $R/compare.txt 2>&1; echo "compare rc=$? $(( $(date +%s)-T0 )) s"
grep -E "GPU|sdpa-cudnn|sdpa-flash|K2V2|K3V3|K4V4" $R/compare.txt | head -40
tar czf $OUT/s34c.tgz -C /tmp s34c
export TURBOKV_CUDA_TEST_SMALL=1
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
timeout 100 $CS --tool memcheck --error-exitcode 9 $TB --gtest_filter='CudaDecode.TqMseMatchesReference' > $R/memcheck.log 2>&1
echo "memcheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $R/memcheck.log | tr '\n' ' ')"
tar czf $OUT/s34c.tgz -C /tmp s34c
timeout 100 $CS --tool racecheck --error-exitcode 9 $TB --gtest_filter='CudaDecode.TqMseMatchesReference' > $R/racecheck.log 2>&1
echo "racecheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'RACECHECK SUMMARY|PASSED|FAILED' $R/racecheck.log | tr '\n' ' ')"
tar czf $OUT/s34c.tgz -C /tmp s34c
unset TURBOKV_CUDA_TEST_SMALL
for t in test_cuda_fp8 test_cuda_kivi test_cuda_vq_paged; do  # the other paged decodes (pool alignment check)
  X=$(find build -name $t -type f -executable | head -1)
  timeout 40 $X > $R/$t.log 2>&1; echo "$t rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'PASSED|FAILED' $R/$t.log | tr '\n' ' ')"
done
tar czf $OUT/s34c.tgz -C /tmp s34c
timeout 100 $B --configs 128:32:8,64:9:3,256:4:1 --batches 16 --contexts 65536 --bits 2,3,4 --methods encode --csv $R/encode.csv > $R/encode.log 2>&1
echo "encode rc=$? $(( $(date +%s)-T0 )) s: $(grep -iE 'checked|CHECK FAILED' $R/encode.log | tr '\n' ' ')"
python3 - $R/encode.csv <<'PY'
import csv, sys
for r in csv.reader(open(sys.argv[1])):
    if len(r) > 13 and r[0] == 'encode': print('  d%s %s-bit %-18s %8.1f us %7.0f GB/s' % (r[4], r[2], r[1], float(r[9]), float(r[13])))
PY
tar czf $OUT/s34c.tgz -C /tmp s34c
