#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, one binary for a device call that cannot afford a device build: the CUDA
# test TUs named below and bench/cuda/bench_cuda.cpp linked into build-carry/tkv_dev against an up-to-date
# build-dev (Release, TURBOKV_CUDA=ON): `tkv_dev [gtest flags]` runs every linked test, `tkv_dev bench ...` is
# turbokv_cuda_bench. Written xz-compressed (~28 MB) to build-carry/tkv_dev.xz for `run`'s carry.
# Usage: bash docs/experiments/carry-build.sh test_cuda_qjl test_cuda_attention test_cuda_append
# (TURBOKV_SOURCE_DIR is ".": test_cuda_real finds data/kv when the binary runs in the repository root.)
set -euo pipefail
cd "$(dirname "$0")/../.."
# B=build-lean: a library configured with -DTURBOKV_CUDA_PTX=OFF (sm_90 code only: ~6 MB less compressed, for
# when the tree and the binary would pass the 64 MiB carry limit).
B=${B:-build-dev}; O=build-carry; mkdir -p $O
CXX="c++ -DTURBOKV_HAVE_CUDA=1 -DTURBOKV_SOURCE_DIR=\".\" -Iinclude -Itests -Itests/cuda -isystem /usr/local/cuda/include -O3 -DNDEBUG -ffp-contract=off -std=c++20"
objs=(); decls=""; first=""
for t in "$@"; do
  n=${t#test_cuda_}
  $CXX -Dmain=main_$n -c tests/cuda/$t.cpp -o $O/$t.o
  objs+=($O/$t.o); decls+="int main_$n(int, char**);"; [ -n "$first" ] || first=main_$n
done
$CXX -Dmain=bench_main -c bench/cuda/bench_cuda.cpp -o $O/bench_cuda.o
cat > $O/driver.cpp <<EOC
#include <cstring>
$decls
int bench_main(int, char**);
int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "bench") == 0) return bench_main(argc - 1, argv + 1);
  return $first(argc, argv);  // one gtest registry: every linked test runs
}
EOC
$CXX -c $O/driver.cpp -o $O/driver.o
c++ -O3 $O/driver.o "${objs[@]}" $O/bench_cuda.o -o $O/tkv_dev -L/usr/local/cuda/targets/x86_64-linux/lib \
  -Wl,-rpath,/usr/local/cuda/lib $B/libturbokv.a /usr/lib/x86_64-linux-gnu/libgtest.a /usr/local/cuda/lib/libcudart.so \
  /usr/lib/x86_64-linux-gnu/libfmt.so.9.1.0 -lcudadevrt -lcudart_static -lrt -lpthread -ldl
strip $O/tkv_dev
xz -T2 -6 -c $O/tkv_dev > $O/tkv_dev.xz
ls -la $O/tkv_dev $O/tkv_dev.xz
