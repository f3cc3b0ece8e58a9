// Helpers of the GPU tests: device detection (exit 77 = skipped), device buffers.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "turbokv/cuda.h"
#include "turbokv/rng.h"

namespace turbokv::test {

constexpr int kSkipReturnCode = 77;

#define TKV_TEST_CUDA(expr)                                                                             \
  do {                                                                                                  \
    const cudaError_t e_ = (expr);                                                                      \
    if (e_ != cudaSuccess)                                                                              \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(e_) + " at " + __FILE__ + \
                               ":" + std::to_string(__LINE__));                                         \
  } while (0)

/// main() for a GPU test: SKIPPED (77) with the reason when no device is usable.
inline int cuda_test_main(int argc, char** argv, const char* name) {
  std::string why;
  if (cuda::device_count(&why) == 0) {
    std::printf("SKIPPED %s: no CUDA device (%s)\n", name, why.c_str());
    std::fflush(stdout);
    // _Exit: the CUDA runtime's failed initialisation must not turn a skip into a
    // LeakSanitizer failure in the sanitizer build.
    std::_Exit(kSkipReturnCode);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

/// Owning device buffer of n elements of T.
template <class T>
struct DevBuf {
  T* p = nullptr;
  std::size_t n = 0;
  explicit DevBuf(std::size_t count) : n(count) { TKV_TEST_CUDA(cudaMalloc(&p, bytes() ? bytes() : 1)); }
  DevBuf(const std::vector<T>& v) : DevBuf(v.size()) { upload(v); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  std::size_t bytes() const { return n * sizeof(T); }
  void upload(const std::vector<T>& v) { TKV_TEST_CUDA(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice)); }
  std::vector<T> download() const {
    std::vector<T> v(n);
    TKV_TEST_CUDA(cudaDeviceSynchronize());
    TKV_TEST_CUDA(cudaMemcpy(v.data(), p, bytes(), cudaMemcpyDeviceToHost));
    return v;
  }
  void fill_byte(int b) { TKV_TEST_CUDA(cudaMemset(p, b, bytes() ? bytes() : 1)); }
};

/// A random permutation of 0..n-1 (physical page ids), seeded.
inline std::vector<std::int32_t> permutation(std::size_t n, std::uint64_t seed) {
  std::vector<std::int32_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::int32_t>(i);
  Rng r(seed);
  for (std::size_t i = n; i > 1; --i) std::swap(v[i - 1], v[r.next() % i]);
  return v;
}

/// A fresh seed per process run (fresh random data each run); printed by the tests on failure.
inline std::uint64_t fresh_seed() {
  static const std::uint64_t s = [] {
    const char* env = std::getenv("TURBOKV_TEST_SEED");
    if (env) return static_cast<std::uint64_t>(std::strtoull(env, nullptr, 0));
    return static_cast<std::uint64_t>(std::random_device{}()) << 32 ^ std::random_device{}();
  }();
  return s;
}

}  // namespace turbokv::test
