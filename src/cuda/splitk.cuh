// Device helpers shared by the CUDA-core split-K decode kernels of the other
// methods (tq_prod.cu, rvq.cu, pvq.cu) and their encoders: block reductions,
// the Hadamard rotation of a shared-memory vector, the in-register warp FWHT in
// the reference's stage order, and the log-sum-exp merge of split partials.
// Not public API.
#pragma once

#include <cuda_runtime.h>

namespace turbokv::cuda::detail::splitk {

/// Max (is_max) or sum of v over the block (blockDim.x a multiple of 32, <= 1024);
/// red: shared scratch of blockDim.x / 32 floats. Every thread gets the result.
__device__ __forceinline__ float block_reduce(float v, bool is_max, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, u) : v + u;
  }
  __syncthreads();  // red is reused
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = red[0];
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) v = is_max ? fmaxf(v, red[w]) : v + red[w];
  return v;
}

/// Hadamard rotation of y[0..d) in shared memory (fp32): forward y *= sign, FWHT,
/// *= scale; inverse FWHT, *= scale * sign. All threads of the block take part.
__device__ __forceinline__ void rotate_shared(float* y, int d, const float* __restrict__ signs, float scale,
                                              bool inverse) {
  if (!inverse)
    for (int j = threadIdx.x; j < d; j += blockDim.x) y[j] *= __ldg(signs + j);
  for (int h = 1; h < d; h <<= 1) {
    __syncthreads();
    for (int p = threadIdx.x; p < d / 2; p += blockDim.x) {
      const int j = (p / h) * 2 * h + p % h;
      const float u = y[j], v = y[j + h];
      y[j] = u + v;
      y[j + h] = u - v;
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < d; j += blockDim.x) y[j] *= inverse ? scale * __ldg(signs + j) : scale;
  __syncthreads();
}

/// In-register FWHT of a warp's D = 32 E values (lane l: [lE, lE + E)), the
/// reference's stage order h = 1, 2, ..., D/2; every butterfly one rounded add.
template <int E>
__device__ __forceinline__ void warp_fwht(float (&y)[E]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int h = 1; h < E; h <<= 1)
#pragma unroll
    for (int e = 0; e < E; ++e)
      if ((e & h) == 0) {
        const float p = y[e], q = y[e + h];
        y[e] = __fadd_rn(p, q);
        y[e + h] = __fsub_rn(p, q);
      }
#pragma unroll
  for (int lo = 1; lo < 32; lo <<= 1) {
    const float s = (lane & lo) ? -1.0f : 1.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float o = __shfl_xor_sync(0xffffffffu, y[e], lo);
      y[e] = __fmaf_rn(s, y[e], o);
    }
  }
}

/// Log-sum-exp merge of the split partials of row bh: ws holds [splits][rows][d + 2]
/// (m in log2 units, l, acc[d]); writes y[i] = sum_s 2^(m_s - M) acc_s[i] / sum_s 2^(m_s - M) l_s
/// (block-strided over i; the caller synchronises before reading y).
__device__ __forceinline__ void merge_partials(const float* __restrict__ ws, int splits, int rows, int d, int bh,
                                               float* y) {
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) mx = fmaxf(mx, ws[(static_cast<std::size_t>(s) * rows + bh) * (d + 2)]);
  float l = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float* sl = ws + (static_cast<std::size_t>(s) * rows + bh) * (d + 2);
    l += sl[1] * exp2f(sl[0] - mx);
  }
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float* sl = ws + (static_cast<std::size_t>(s) * rows + bh) * (d + 2);
      acc += sl[2 + i] * exp2f(sl[0] - mx);
    }
    y[i] = acc / l;
  }
}

}  // namespace turbokv::cuda::detail::splitk
