# Sourced by the device scripts (bench/cuda/run_device.sh, docs/experiments/run-s*.sh) in the repository root:
# the Debian dev packages carried in .deps (GoogleTest, fmt, nlohmann-json, CLI11, Eigen, Google Benchmark;
# bench/cuda/fetch_deps.sh fills it here) unpacked to /tmp/deps when the device image lacks them, and CMake
# and the loader pointed at them.
PREFIX=/tmp/deps
DEPS_ROOT=$(pwd)
if [ -d .deps ] && ! [ -f /usr/include/gtest/gtest.h -a -d /usr/include/eigen3 -a -d /usr/include/nlohmann -a -d /usr/include/CLI ]; then
  mkdir -p $PREFIX
  for f in .deps/*.deb; do dpkg -x "$f" $PREFIX 2>/dev/null || (cd /tmp && ar x "$DEPS_ROOT/$f" data.tar.xz && tar -xf data.tar.xz -C $PREFIX); done
  export CMAKE_PREFIX_PATH=$PREFIX/usr
  export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  echo "using carried deps in $PREFIX"
fi
