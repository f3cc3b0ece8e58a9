#!/usr/bin/env bash
# Device script for session 22's two experiment patches (written in session 22, not yet run: that
# session's device time was spent). A = this tree; B = + split-pages-s22.patch (decode_h16's page-16 bulk
# copies read each page as [codes of the KV heads][their norms], the bench fills norms there: timing only,
# --no-check, since B's pools are not what the CPU reference encodes); C = + wide-windows-s22.patch (3-bit
# look-ups, one funnel shift per two 6-bit fields: a real change, so C also runs test_cuda_attention).
# From the repo root on the device, with the Debian dev packages carried in .deps:
#   export OUT && bash docs/experiments/run-patches-s22.sh
set -uo pipefail
OUT=${OUT:-/tmp/tkv_out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/patches.log") 2>&1
ROOT=$(pwd)
PREFIX=/tmp/deps; mkdir -p $PREFIX
for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
for side in b c; do
  rm -rf /tmp/src_$side && mkdir -p /tmp/src_$side
  tar -cf - --exclude=./.deps --exclude=./.devbase --exclude=./.devsrc --exclude=./build . | tar -x -C /tmp/src_$side
  P=$([ $side = b ] && echo split-pages-s22.patch || echo wide-windows-s22.patch)
  (cd /tmp/src_$side && (git apply "$ROOT/docs/experiments/$P" || patch -p1 < "$ROOT/docs/experiments/$P")) && echo "$side: $P applied"
done
cmake -S . -B /tmp/pa -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > "$OUT/build_a.log" 2>&1
cmake -S /tmp/src_b -B /tmp/pb -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > "$OUT/build_b.log" 2>&1
cmake -S /tmp/src_c -B /tmp/pc -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > "$OUT/build_c.log" 2>&1
(cmake --build /tmp/pa -j5 --target turbokv_cuda_bench >> "$OUT/build_a.log" 2>&1; echo "A build rc=$?") &
(cmake --build /tmp/pb -j5 --target turbokv_cuda_bench >> "$OUT/build_b.log" 2>&1; echo "B build rc=$?") &
cmake --build /tmp/pc -j6 --target turbokv_cuda_bench test_cuda_attention >> "$OUT/build_c.log" 2>&1; echo "C build rc=$?"
wait; echo "builds: $(( $(date +%s) - T0 )) s"
for pass in 1 2; do
  for side in a b c; do
    timeout 90 /tmp/p$side/turbokv_cuda_bench --configs 128:32:8,64:9:3 --batches 16 --contexts 65536 --bits 2,3,4 \
      --methods tq-mse,tq-prod --no-check --csv "$OUT/p${side}_$pass.csv" > /dev/null 2>&1
    echo "pass $pass $side rc=$?: $(grep -E "^decode_attention,tq-(mse|prod)" "$OUT/p${side}_$pass.csv" | cut -d, -f2,3,5,10 | tr '\n' ' ')"
  done
done
(cd /tmp/pc && timeout 120 ./tests/cuda/test_cuda_attention) > "$OUT/test_c.log" 2>&1; echo "C test_cuda_attention rc=$?"
grep -E "PASSED|FAILED" "$OUT/test_c.log" | head
echo "== done $(( $(date +%s) - T0 )) s"
