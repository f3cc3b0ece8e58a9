# Session 31 device run s31-3 (repo root on the device): test_cuda_attention with two new one-split cases of
# 131,072 tokens whose values have mean 4 (TurboQuant kernels 0-4 against fp64; the staged kernel lost such a
# tail before this session). Prints every long split's error.
# Usage: export OUT && bash docs/experiments/run-s31c.sh   (everything lands in $OUT/s31c.tgz)
set -uo pipefail
R=/tmp/s31c; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s31c.log") 2>&1
T0=$(date +%s)
ROOT=$(pwd)
PREFIX=/tmp/deps
if [ -d .deps ] && ! [ -f /usr/include/gtest/gtest.h -a -d /usr/include/eigen3 -a -d /usr/include/nlohmann -a -d /usr/include/CLI ]; then
  mkdir -p $PREFIX
  for f in .deps/*.deb; do dpkg -x "$f" $PREFIX 2>/dev/null || (cd /tmp && ar x "$ROOT/$f" data.tar.xz && tar -xf data.tar.xz -C $PREFIX); done
  export CMAKE_PREFIX_PATH=$PREFIX/usr
  export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTURBOKV_CUDA=ON > $R/cfg.log 2>&1
timeout 400 cmake --build build -j16 --target test_cuda_attention > $R/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 )) s"; grep -E "error" -A3 $R/build.log | head -30
(cd build && timeout 150 ./tests/cuda/test_cuda_attention --gtest_filter='CudaDecode.TqMseMatchesReference') > $R/attn.log 2>&1
echo "TqMseMatchesReference rc=$? $(( $(date +%s)-T0 )) s: $(grep -E '^\[  PASSED|^\[  FAILED|worst' $R/attn.log | tr '\n' ' ')"
grep -E "one split over" $R/attn.log
grep -E "Failure|Expected|Which is|trace|d=" -A1 $R/attn.log | head -30
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s31c.tgz -C /tmp s31c
