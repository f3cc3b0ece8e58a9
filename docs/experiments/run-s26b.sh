# Session 26 device run s26-2 and s26-3 (repo root on the device, .deps carried): the staged fp32 input of the
# encode (B = this tree: one bulk copy per group into shared memory, rotated LDS.128 reads; s26-3: the copy issued right after the stage reads; s26-4: one copy and mbarrier per warp, warp-uniform loop, y stores as STS.128) against
# A = this tree with docs/experiments/stage-s26.patch reversed (session 25's LDG.128 loads).
# test_cuda_append on B (incl. GroupsLoopOverManyVectors, RejectsMisalignedInput), three alternating
# passes of the encode rows (--no-check), a checked pass of B, ncu L1 breakdown of B's d256 3-bit
# encode, memcheck / racecheck of test_cuda_append on B.
# Usage: export OUT && bash docs/experiments/run-s26b.sh   (everything lands in $OUT/s26b.tgz)
set -uo pipefail
R=/tmp/s26b; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s26b.log") 2>&1
T0=$(date +%s)
PREFIX=/tmp/deps; mkdir -p $PREFIX; for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
FLAGS="-G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON"
rm -rf /tmp/A && mkdir -p /tmp/A && tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/A && tar xf -)
(cd /tmp/A && patch -R -p1 < docs/experiments/stage-s26.patch) > $R/patchA.log 2>&1; echo "patch -R A rc=$?"
cmake -S . -B build $FLAGS > $R/cfg.log 2>&1
cmake -S /tmp/A -B /tmp/A/build $FLAGS > $R/cfgA.log 2>&1
(timeout 280 cmake --build /tmp/A/build -j8 --target turbokv_cuda_bench > $R/buildA.log 2>&1; echo "build A rc=$? $(( $(date +%s)-T0 )) s") &
APID=$!
timeout 300 cmake --build build -j16 --target test_cuda_append turbokv_cuda_bench > $R/build.log 2>&1; echo "build B rc=$? $(( $(date +%s)-T0 )) s"
(cd build && timeout 120 ./tests/cuda/test_cuda_append) > $R/append.log 2>&1; echo "test_cuda_append (B) rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]' $R/append.log | tr '\n' ' ')"
wait $APID
tar czf $OUT/s26b.tgz -C /tmp s26b
A=/tmp/A/build/turbokv_cuda_bench; B=./build/turbokv_cuda_bench
ARGS="--configs 128:32:8,64:9:3,256:4:1 --batches 16 --contexts 65536,131072 --bits 1,2,3,4 --methods encode"
for p in 1 2 3; do
  for V in A B; do
    X=$A; [ $V = B ] && X=$B
    timeout 60 $X $ARGS --no-check --csv $R/ab_${V}_$p.csv > $R/ab_${V}_$p.log 2>&1
    echo "pass $p $V rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^encode,' $R/ab_${V}_$p.csv | cut -d, -f3,4,5,14 | tr '\n' ' ')"
  done
done
tar czf $OUT/s26b.tgz -C /tmp s26b
timeout 90 $B $ARGS --csv $R/checkedB.csv > $R/checkedB.log 2>&1; echo "checked B rc=$?"; grep -i "checked against\|FAIL" $R/checkedB.log | tail -4
timeout 120 ncu --clock-control none --section SpeedOfLight --section SourceCounters -o $R/ncuB_d256_3 \
  --metrics breakdown:l1tex__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed \
  -k regex:append_kernel --launch-skip 3 --launch-count 1 \
  $B --configs 256:4:1 --batches 16 --contexts 65536 --bits 3 --methods encode --no-check > $R/ncuB_d256_3.txt 2>&1
echo "ncu rc=$? $(( $(date +%s)-T0 )) s"
ncu -i $R/ncuB_d256_3.ncu-rep --page details > $R/ncuB_d256_3.txt 2>&1
ncu -i $R/ncuB_d256_3.ncu-rep --page source --csv --print-source sass > $R/ncuB_d256_3_sass.csv 2>&1
grep -E "l1tex__|Duration|L1/TEX Cache|inst_executed|warps_active|issue_active|dram__" $R/ncuB_d256_3.txt | head -30
tar czf $OUT/s26b.tgz -C /tmp s26b
(cd build && timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/cuda/test_cuda_append) > $R/memcheck.log 2>&1; echo "memcheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'ERROR SUMMARY|^\[  PASSED|^\[  FAILED' $R/memcheck.log | tr '\n' ' ')"
(cd build && timeout 150 compute-sanitizer --tool racecheck --error-exitcode 3 ./tests/cuda/test_cuda_append) > $R/racecheck.log 2>&1; echo "racecheck rc=$? $(( $(date +%s)-T0 )) s: $(grep -E 'HAZARD|RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED' $R/racecheck.log | tail -3 | tr '\n' ' ')"
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s26b.tgz -C /tmp s26b
