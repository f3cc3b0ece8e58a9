#!/usr/bin/env bash
# Device script for the split-page-layout experiment (docs/experiments/split-pages-s22.patch), written in
# session 22 and not yet run: A = this tree, B = this tree with the patch applied (decode_h16's page-16
# bulk copies read each page as [codes of the KV heads][their norms], the bench fills norms there).
# Timing only (--no-check: B's pools are not what the CPU reference encodes). From the repo root on the
# device, with the Debian dev packages carried in .deps:
#   export OUT && bash docs/experiments/run-split-pages-s22.sh
set -uo pipefail
OUT=${OUT:-/tmp/tkv_out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/split.log") 2>&1
PREFIX=/tmp/deps; mkdir -p $PREFIX
for f in .deps/*.deb; do dpkg -x "$f" $PREFIX; done
export CMAKE_PREFIX_PATH=$PREFIX/usr LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
rm -rf /tmp/split_src && mkdir -p /tmp/split_src
tar -cf - --exclude=./.deps --exclude=./.devbase --exclude=./.devsrc --exclude=./build . | tar -x -C /tmp/split_src
(cd /tmp/split_src && git apply "$OLDPWD/docs/experiments/split-pages-s22.patch" 2>/dev/null || patch -p1 < "$OLDPWD/docs/experiments/split-pages-s22.patch")
cmake -S . -B /tmp/split_a -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > "$OUT/split_build_a.log" 2>&1
cmake -S /tmp/split_src -B /tmp/split_b -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > "$OUT/split_build_b.log" 2>&1
(cmake --build /tmp/split_a -j8 --target turbokv_cuda_bench >> "$OUT/split_build_a.log" 2>&1; echo "A build rc=$?") &
cmake --build /tmp/split_b -j8 --target turbokv_cuda_bench >> "$OUT/split_build_b.log" 2>&1; echo "B build rc=$?"
wait; echo "builds: $(( $(date +%s) - T0 )) s"
for pass in 1 2; do
  for side in a b; do
    timeout 90 /tmp/split_$side/turbokv_cuda_bench --configs 128:32:8,64:9:3 --batches 16 --contexts 65536 --bits 2,3,4 \
      --methods tq-mse --no-check --csv "$OUT/split_${side}_$pass.csv" > /dev/null 2>&1
    echo "pass $pass $side rc=$?: $(grep -E '^decode_attention,tq-mse' "$OUT/split_${side}_$pass.csv" | cut -d, -f3,5,10 | tr '\n' ' ')"
  done
done
echo "== done $(( $(date +%s) - T0 )) s"
