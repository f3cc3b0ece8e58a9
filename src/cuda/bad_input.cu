// The reference's input checks on the GPU for the appends that do not test inputs in their own kernels
// (common.cuh: flag_bad_vectors, flag_bad_kivi_scales): the appends cannot throw, so a rejected input
// sets a device flag the caller reads after the stream synchronizes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common.cuh"

namespace turbokv::cuda::detail {
namespace {

constexpr int kThreads = 256;

/// One warp per vector: the fp64 sum of squares of its d elements; !(sqrt < 32768) catches NaN and
/// Inf too (their squares are NaN / Inf; a finite fp32 square cannot overflow fp64).
template <class XT>
__global__ void __launch_bounds__(kThreads) bad_vectors_kernel(const void* x, long long n, int d, std::int32_t* bad) {
  const int lane = threadIdx.x & 31;
  const long long nwarps = static_cast<long long>(gridDim.x) * (kThreads / 32);
  for (long long v = blockIdx.x * (kThreads / 32) + threadIdx.x / 32; v < n; v += nwarps) {  // warp-uniform
    double s = 0;
    for (int i = lane; i < d; i += 32) {
      const double e = load_x<XT>(x, static_cast<std::size_t>(v) * d + i);
      s += e * e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0 && !(sqrt(s) < 32768.0)) atomicOr(bad, 1);
  }
}

/// One thread per group: key groups (b, KV head, token group, channel) over G tokens; value groups
/// (vector, channel group) over G channels. Scale (max - min) / levels in fp64 as the reference.
template <class XT>
__global__ void __launch_bounds__(kThreads)
    kivi_scales_kernel(const void* x, int batch, int num_new, int kvh, int d, double levels, bool key, int group,
                       std::int32_t* bad) {
  const long long groups = key ? 1LL * batch * kvh * (num_new / group) * d : 1LL * batch * num_new * kvh * (d / group);
  const long long step = static_cast<long long>(gridDim.x) * kThreads;
  for (long long i = blockIdx.x * kThreads + threadIdx.x; i < groups; i += step) {
    std::size_t first, stride;  // element index of the group's first value, and between its values
    if (key) {
      const long long j = i % d, r = i / d;  // channel; (b, head, token group)
      const long long tg = r % (num_new / group), bh = r / (num_new / group);
      const long long h = bh % kvh, b = bh / kvh;
      first = static_cast<std::size_t>(((b * num_new + tg * group) * kvh + h) * d + j);
      stride = static_cast<std::size_t>(kvh) * d;
    } else {
      const long long cg = i % (d / group), v = i / (d / group);
      first = static_cast<std::size_t>(v * d + cg * group);
      stride = 1;
    }
    float mx = -INFINITY, mn = INFINITY;
    for (int t = 0; t < group; ++t) {
      const float e = load_x<XT>(x, first + t * stride);
      mx = fmaxf(mx, e), mn = fminf(mn, e);
    }
    // NaN / Inf are flag_bad_vectors' (fmaxf / fminf drop NaN here)
    if ((static_cast<double>(mx) - mn) / levels > 32768.0) atomicOr(bad, 1);
  }
}

unsigned blocks_for(long long work) {
  const long long b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

}  // namespace

void flag_bad_vectors(const void* x, IoType x_type, long long n, int d, std::int32_t* bad, cudaStream_t s) {
  if (bad == nullptr || n <= 0) return;
  with_io_type(x_type, [&](auto t) {
    using XT = typename decltype(t)::type;
    bad_vectors_kernel<XT><<<blocks_for(n * 32), kThreads, 0, s>>>(x, n, d, bad);
  });
  TKV_CHECK_LAUNCH();
}

void flag_bad_kivi_scales(const void* x, IoType x_type, int batch, int num_new, int num_kv_heads, int d, int bits,
                          bool key, int group, std::int32_t* bad, cudaStream_t s) {
  if (bad == nullptr || batch <= 0 || num_new <= 0) return;
  const long long groups = key ? 1LL * batch * num_kv_heads * (num_new / group) * d
                               : 1LL * batch * num_new * num_kv_heads * (d / group);
  if (groups == 0) return;
  with_io_type(x_type, [&](auto t) {
    using XT = typename decltype(t)::type;
    kivi_scales_kernel<XT><<<blocks_for(groups), kThreads, 0, s>>>(x, batch, num_new, num_kv_heads, d,
                                                                     double((1 << bits) - 1), key, group, bad);
  });
  TKV_CHECK_LAUNCH();
}

}  // namespace turbokv::cuda::detail
