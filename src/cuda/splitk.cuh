// Helpers of the CUDA-core split-K decode of TurboQuant-Prod keys on contiguous blocks (tq_prod.cu)
// and of the block encoders (rvq.cu, pvq.cu, polar.cu, tq_prod.cu): block reductions, the Hadamard
// rotation of a shared-memory vector (also the staged decode's query rotation and the fp16 kernel's
// epilogue), the in-register warp FWHT in the reference's stage order, the per-tile online-softmax
// step, the split partials (store, log-sum-exp merge, the merge + inverse rotation kernel), the split
// count and the host-side argument checks of the VqDecodeArgs / ProdDecodeArgs entry points. Not
// public API. (The RVQ, product-VQ and PolarQuant decodes moved to staged.cuh in session 12.)
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>

#include "turbokv/error.h"

namespace turbokv::cuda::detail::splitk {

/// The CUDA-core split kernels: one token per thread per tile of kDecTile tokens; head_dim
/// <= 2 * kDecThreads (each thread owns accumulator dims threadIdx.x and + kDecThreads).
constexpr int kDecThreads = 128;
constexpr int kDecTile = kDecThreads;

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

/// Dense rotation of y[0..d) in shared memory (fp32, head_dim not a power of two): y_i <- sum_j
/// m[j][i] y_j (m row-major [d][d], ascending j, one fma each; forward Pi y with m = Pi^T, inverse
/// Pi^T y with m = Pi); tmp: shared scratch of d floats. All threads of the block take part.
__device__ __forceinline__ void rotate_dense_shared(float* y, float* tmp, int d, const float* __restrict__ m) {
  __syncthreads();
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < d; ++j) acc = __fmaf_rn(__ldg(m + static_cast<std::size_t>(j) * d + i), y[j], acc);
    tmp[i] = acc;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < d; i += blockDim.x) y[i] = tmp[i];
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

/// Elements per lane of a warp-per-vector encoder at a dense-rotation head_dim (a multiple of 16 in
/// 64..256 that is not a power of two: at most 240, i.e. 8 per lane).
constexpr int kDenseLaneElems = 8;

/// The dense (Haar) rotation of one vector by a warp (head_dim d not a power of two, rotation.h):
/// y[k] = sum_j m[j][i] x_j for i = lane + 32 k < d (entries with i >= d are left 0), ascending j, each
/// product and each sum rounded on its own (no FMA). With m = Pi^T that is Pi x in Rotation::forward's
/// order, with m = Pi it is Pi^T x in Rotation::inverse's order, so every y_i is the reference's bit for
/// bit. x: the vector [d] (shared memory, read by broadcast); m: [d][d] row-major (device; the warp
/// reads row j as contiguous lines). The encoders of RVQ, product VQ and PolarQuant and product VQ's
/// dequantize at those head_dims.
__device__ __forceinline__ void warp_dense_rotate(const float* __restrict__ m, const float* x, int d,
                                                  float (&y)[kDenseLaneElems]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int k = 0; k < kDenseLaneElems; ++k) y[k] = 0.0f;
  for (int j = 0; j < d; ++j) {
    const float xj = x[j];
    const float* row = m + static_cast<std::size_t>(j) * d;
#pragma unroll
    for (int k = 0; k < kDenseLaneElems; ++k) {
      const int i = lane + 32 * k;
      if (i < d) y[k] = __fadd_rn(y[k], __fmul_rn(__ldg(row + i), xj));
    }
  }
}

/// warp_dense_rotate in place: the warp's shared row x [d] becomes y = M^T x (same order and rounding).
/// The caller's __syncwarp() must precede (x written); this one returns after the row is rewritten and
/// synchronised, so every lane may read any of its elements.
__device__ __forceinline__ void warp_dense_rotate_row(const float* __restrict__ m, float* row, int d) {
  const int lane = threadIdx.x & 31;
  float y[kDenseLaneElems];
  warp_dense_rotate(m, row, d, y);
  __syncwarp();  // every lane has read x
#pragma unroll
  for (int k = 0; k < kDenseLaneElems; ++k)
    if (lane + 32 * k < d) row[lane + 32 * k] = y[k];
  __syncwarp();
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

/// One tile's online-softmax step (base 2) of a CUDA-core split kernel, one token per thread:
/// logit (log2 units) of this thread's token, w its weight factor (the value norm, or 1), valid
/// whether the token exists. Updates the running (mrun, lrun), rescales acc0 / acc1 and writes
/// p * w to pw[threadIdx.x]; the second block reduction's barriers publish pw to the block.
__device__ __forceinline__ void softmax_tile(float logit, float w, bool valid, float& mrun, float& lrun, float& acc0,
                                             float& acc1, float* pw, float* red) {
  const float mnew = fmaxf(mrun, block_reduce(logit, true, red));
  const float corr = exp2f(mrun - mnew);  // 0 on the first tile (mrun = -inf, mnew finite)
  const float p = valid ? exp2f(logit - mnew) : 0.0f;
  pw[threadIdx.x] = p * w;
  const float psum = block_reduce(p, false, red);  // also orders the pw writes before the reads after it
  lrun = lrun * corr + psum;
  acc0 *= corr;
  acc1 *= corr;
  mrun = mnew;
}

/// Writes this split's partial (m, l, acc[d]) of row bh to ws ([splits][rows][d + 2], split =
/// blockIdx.x, rows = gridDim.y); thread dims i0, i1 (written when < d).
__device__ __forceinline__ void store_partial(float* ws, int bh, int d, float m, float l, float acc0, float acc1,
                                              int i0, int i1) {
  float* slot = ws + (static_cast<std::size_t>(blockIdx.x) * gridDim.y + bh) * (d + 2);
  if (threadIdx.x == 0) {
    slot[0] = m;
    slot[1] = l;
  }
  if (i0 < d) slot[2 + i0] = acc0;
  if (i1 < d) slot[2 + i1] = acc1;
}

/// Log-sum-exp merge of the splits, then the inverse value rotation Pi^T = D H / sqrt(d) once
/// (rotate_shared; vrot != nullptr: the dense Pi^T y by rotate_dense_shared with vrot = Pi [d][d]) and,
/// for product VQ, its per-channel smoothing vlambda (nullptr: none). One block per (sequence, head)
/// row, kDecThreads threads, 2 d floats of dynamic shared memory. out: fp32 [rows][d].
static __global__ void __launch_bounds__(kDecThreads)
    merge_rotate_kernel(const float* __restrict__ ws, int splits, int rows, int d, const float* __restrict__ vsigns,
                        float vscale, const float* __restrict__ vrot, const float* __restrict__ vlambda,
                        float* __restrict__ out) {
  extern __shared__ float merge_y[];  // [2 d]
  const int bh = blockIdx.x;
  merge_partials(ws, splits, rows, d, bh, merge_y);
  __syncthreads();
  if (vrot != nullptr)
    rotate_dense_shared(merge_y, merge_y + d, d, vrot);
  else
    rotate_shared(merge_y, d, vsigns, vscale, true);
  for (int i = threadIdx.x; i < d; i += blockDim.x)
    out[static_cast<std::size_t>(bh) * d + i] = vlambda ? merge_y[i] * __ldg(vlambda + i) : merge_y[i];
}

/// Split count of the CUDA-core decodes: args.num_splits, or min(256, ceil(max_seq_len / kDecTile)).
template <class Args>
int decode_splits(const Args& a) {
  if (a.num_splits > 0) return a.num_splits;
  const int s = (a.max_seq_len + kDecTile - 1) / kDecTile;
  return s < 1 ? 1 : (s > 256 ? 256 : s);
}

/// The argument checks shared by rvq_decode, pvq_decode and tq_prod_decode (VqDecodeArgs and
/// ProdDecodeArgs have the same fields); throws std::invalid_argument naming the field. Returns
/// batch * num_heads (the merge grid).
template <class Args>
long long check_decode_args(const char* where, const Args& a) {
  check_arg(a.batch >= 0, where, "batch", a.batch, "must be >= 0");
  check_arg(a.num_kv_heads > 0, where, "num_kv_heads", a.num_kv_heads, "must be positive");
  check_arg(a.num_heads > 0 && a.num_heads % a.num_kv_heads == 0, where, "num_heads", a.num_heads,
            "must be a positive multiple of num_kv_heads");
  check_arg(a.max_seq_len >= 1, where, "max_seq_len", a.max_seq_len, "must be >= 1");
  check_arg(a.capacity >= a.max_seq_len, where, "capacity", a.capacity, "must be >= max_seq_len");
  check_arg(a.softmax_scale > 0 && std::isfinite(a.softmax_scale), where, "softmax_scale", a.softmax_scale,
            "must be positive and finite");
  check_arg(a.num_splits >= 0 && a.num_splits <= 256, where, "num_splits", a.num_splits, "must be in 0..256");
  const long long rows = 1LL * a.batch * a.num_heads;
  check_arg(rows <= 65535, where, "batch*num_heads", rows, "must be <= 65535");
  if (a.batch == 0) return 0;
  check_arg(a.q != nullptr, where, "q", static_cast<const void*>(a.q), "must be a non-null device pointer");
  check_arg(a.out != nullptr, where, "out", static_cast<const void*>(a.out), "must be a non-null device pointer");
  check_arg(a.keys != nullptr, where, "keys", static_cast<const void*>(a.keys), "must be a non-null device pointer");
  check_arg(a.values != nullptr, where, "values", static_cast<const void*>(a.values),
            "must be a non-null device pointer");
  check_arg(a.seq_lens != nullptr, where, "seq_lens", static_cast<const void*>(a.seq_lens),
            "must be a non-null device pointer");
  check_arg(a.workspace != nullptr && reinterpret_cast<std::uintptr_t>(a.workspace) % 16 == 0, where, "workspace",
            a.workspace, "must be a non-null, 16-byte aligned device pointer");
  return rows;
}

/// The workspace-size checks shared by the *_decode_workspace_bytes functions.
template <class Args>
void check_workspace_args(const char* where, const Args& a) {
  check_arg(a.batch >= 0, where, "batch", a.batch, "must be >= 0");
  check_arg(a.num_heads >= 0, where, "num_heads", a.num_heads, "must be >= 0");
  check_arg(a.num_splits >= 0 && a.num_splits <= 256, where, "num_splits", a.num_splits, "must be in 0..256");
  check_arg(a.max_seq_len >= 0, where, "max_seq_len", a.max_seq_len, "must be >= 0");
}

/// Workspace bytes of the split partials of a CUDA-core split decode (rvq, polar, tq-prod):
/// splits * batch * num_heads * (head_dim + 2) floats; the checks above and head_dim > 0.
template <class Args>
std::size_t partial_bytes(const char* where, const Args& a, int head_dim) {
  check_workspace_args(where, a);
  check_arg(head_dim > 0, where, "head_dim", head_dim, "must be positive");
  return sizeof(float) * static_cast<std::size_t>(decode_splits(a)) * a.batch * a.num_heads * (head_dim + 2);
}

}  // namespace turbokv::cuda::detail::splitk
