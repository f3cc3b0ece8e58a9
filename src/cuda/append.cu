// TurboQuant-MSE append: fused randomized Hadamard + quantize + pack, written
// straight into pages. D/16 threads per vector, 16 consecutive elements each
// (see append_kernel). The float operations are the reference's
// (formats.h, rotation.h), each an explicitly rounded intrinsic (no FMA):
//   y = x * sign; FWHT stages h = 1, 2, 4, ... ((a, b) -> (a + b, a - b));
//   y *= float(1/sqrt(D)); sumsq in 8 interleaved lanes + the fixed tree;
//   norm = sqrt(sum) (IEEE); t = y * (1 / norm) (IEEE); code = #boundaries < t.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common.cuh"
#include "turbokv/error.h"
#include "turbokv/formats.h"

namespace turbokv::cuda {
namespace {

constexpr int kThreads = 256;

struct AppendArgs {
  const void* x;  // [total][D] of the kernel's XT
  int total;  // batch * num_new * num_kv_heads vectors
  int num_new, num_kv_heads;
  const std::int32_t* start;
  const std::int32_t* pages;
  int max_pages, page_shift;
  std::uint8_t* pool;
  std::size_t stride;
  const float* signs;
  const float* boundaries;
  float scale;
};

// T = D/16 threads per vector; thread t of a vector's group holds the 16
// consecutive elements [16t, 16t + 16). FWHT stages h = 1..8 run in registers,
// h = 16..D/2 with log2(T) shuffle stages. The sum of squares needs lane
// k = i % 8 over ascending i, a transpose: the input goes through a padded
// shared row (thread stride 20 floats: conflict-free float4 writes and stride-8
// reads), thread t sums k = t % 8 (T = 4: k = t and t + 4), then the fixed tree
// by an xor-butterfly (fp32 addition is commutative, so both partners of a
// butterfly compute the same rounded sum). Codes of 16 consecutive elements
// are 2B bytes of the stream: packed in registers, stored directly.
// Centroid index without a compare per boundary (B >= 3): a monotone cell map
// cell(u) = clamp(round(u * invw + K)) into kCells cells (fma, then the
// 1.5 * 2^23 rounding trick; max before min so NaN maps to cell 0). Because the
// map is monotone, every boundary in a lower cell is < u and every boundary in
// a higher cell is > u; the table is built by applying the same map to the
// boundaries, so when each cell holds at most one boundary
//   #boundaries < u  ==  base[cell] + (u > first[cell])
// exactly (first = the first boundary at or above the cell, +inf if none).
// The boundaries are ascending (codebook.h: midpoints of ascending centroids),
// so base[cell] indexes the first one at or above the cell. When some cell
// holds two boundaries the block falls back to one compare per boundary
// (block-uniform flag; never the case for the d = 64/128/256 codebooks).
constexpr int kCells = 32;  // one 32-bit word per bank: conflict-free look-ups
constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23

__device__ __forceinline__ int cell_of(float u, float invw, float k) {
  const float f = fminf(fmaxf(__fmaf_rn(u, invw, k), kMagic), kMagic + (kCells - 1));
  return __float_as_int(f) - __float_as_int(kMagic);
}

template <int D, int B, bool kTable, class XT>
__global__ void __launch_bounds__(kThreads, 4) append_kernel(const AppendArgs a) {
  constexpr int T = D / 16;
  constexpr int VPB = kThreads / T;  // vectors per block step
  constexpr int RS = T * 20 + 8;     // shared row stride in floats (16-byte multiple)
  constexpr int CB = D * B / 8;
  constexpr int NB = (1 << B) - 1;
  static_assert(T >= 4 && T <= 16, "head_dim 64..256");
  __shared__ __align__(16) float s_x[VPB * RS];
  __shared__ float s_bnd[16];
  __shared__ int s_base[kCells];
  __shared__ float s_first[kCells];
  __shared__ int s_ok;
  if (threadIdx.x < 16) s_bnd[threadIdx.x] = threadIdx.x < NB ? a.boundaries[threadIdx.x] : INFINITY;
  __syncthreads();
  const float lo_b = s_bnd[0], hi_b = s_bnd[NB - 1];
  float invw = (kCells - 3) / (hi_b - lo_b);  // boundaries span cells ~1 .. kCells - 2
  if (!(invw > 0.0f && invw < 1e30f)) invw = 1.0f;
  const float kofs = kMagic + rintf(1.0f - lo_b * invw);
  if (kTable && threadIdx.x < kCells) {
    const int c = threadIdx.x;
    int base = 0, same = 0;
    for (int k = 0; k < NB; ++k) {
      const int ck = cell_of(s_bnd[k], invw, kofs);
      base += ck < c ? 1 : 0;
      same += ck == c ? 1 : 0;
    }
    s_base[c] = base;
    s_first[c] = s_bnd[base];  // +inf when base == NB (s_bnd[NB..15] = inf; NB <= 15)
    const bool ok = __all_sync(0xffffffffu, same <= 1);
    if (c == 0) s_ok = ok ? 1 : 0;
  }
  __syncthreads();
  const bool use_table = kTable && s_ok != 0;
  const int grp = threadIdx.x / T, t = threadIdx.x % T;
  const int lane = threadIdx.x % 32;
  const unsigned gmask = ((1u << T) - 1u) << (lane & ~(T - 1));
  float bnd[kTable ? 1 : NB];  // without the table: the boundaries in registers (uniform)
  if constexpr (!kTable)
#pragma unroll
    for (int k = 0; k < NB; ++k) bnd[k] = s_bnd[k];
  float sgn[16];
#pragma unroll
  for (int e = 0; e < 16; ++e) sgn[e] = __ldg(a.signs + 16 * t + e);
  float* row = s_x + grp * RS;
  auto load_x = [&](int v, float* x) {
    if constexpr (std::is_same_v<XT, float>) {
      const float4* xr =
          reinterpret_cast<const float4*>(static_cast<const float*>(a.x) + static_cast<std::size_t>(v) * D + 16 * t);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float4 f = __ldcs(xr + j);
        x[4 * j] = f.x, x[4 * j + 1] = f.y, x[4 * j + 2] = f.z, x[4 * j + 3] = f.w;
      }
    } else {  // 16-bit: two 16-byte loads, widened exactly
      const uint4* xr =
          reinterpret_cast<const uint4*>(static_cast<const XT*>(a.x) + static_cast<std::size_t>(v) * D + 16 * t);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint4 u = __ldcs(xr + j);
        const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          XT h[2];
          memcpy(h, &w[k], 4);
          x[8 * j + 2 * k] = static_cast<float>(h[0]);
          x[8 * j + 2 * k + 1] = static_cast<float>(h[1]);
        }
      }
    }
  };
  const int step = gridDim.x * VPB;
  float xn[16];
  int v = blockIdx.x * VPB + grp;
  if (v < a.total) load_x(v, xn);
  for (; v < a.total; v += step) {  // uniform per group (all T lanes share v)
    float x[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) x[e] = xn[e];
    if (v + step < a.total) load_x(v + step, xn);
    const int g = v % a.num_kv_heads;
    const int j = (v / a.num_kv_heads) % a.num_new;
    const int b = v / (a.num_kv_heads * a.num_new);
    const int pos = __ldg(a.start + b) + j;
    const int page = __ldg(a.pages + static_cast<std::size_t>(b) * a.max_pages + (pos >> a.page_shift));
    const int off = pos & ((1 << a.page_shift) - 1);
    // Element i lives at row[20 * (i / 16) + i % 16].
#pragma unroll
    for (int q = 0; q < 4; ++q)
      *reinterpret_cast<float4*>(row + 20 * t + 4 * q) = make_float4(x[4 * q], x[4 * q + 1], x[4 * q + 2], x[4 * q + 3]);
    float y[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) y[e] = __fmul_rn(x[e], sgn[e]);
#pragma unroll
    for (int h = 1; h < 16; h <<= 1)
#pragma unroll
      for (int e = 0; e < 16; ++e)
        if ((e & h) == 0) {
          const float p = y[e], q = y[e + h];
          y[e] = __fadd_rn(p, q);
          y[e + h] = __fsub_rn(p, q);
        }
#pragma unroll
    for (int lo = 1; lo < T; lo <<= 1) {
      // Lower partner: y + o; upper: o - y. fma(+-1, y, o): the product is exact,
      // so the one rounding is that of __fadd_rn(y, o) / __fsub_rn(o, y).
      const float s = (t & lo) ? -1.0f : 1.0f;
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        const float o = __shfl_xor_sync(gmask, y[e], lo);
        y[e] = __fmaf_rn(s, y[e], o);
      }
    }
    __syncwarp(gmask);
    // Sum of squares of x: acc[k] over i = k, k + 8, ... ascending.
    float acc;
    if constexpr (T >= 8) {
      const int k = t & 7;
      acc = 0.0f;
#pragma unroll
      for (int m = 0; m < D / 8; ++m) {
        const float xv = row[20 * (m >> 1) + 8 * (m & 1) + k];
        acc = __fadd_rn(acc, __fmul_rn(xv, xv));
      }
      acc = __fadd_rn(acc, __shfl_xor_sync(gmask, acc, 4));  // a_k + a_{k+4}
    } else {
      float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
      for (int m = 0; m < D / 8; ++m) {
        const float u = row[20 * (m >> 1) + 8 * (m & 1) + t];
        const float w = row[20 * (m >> 1) + 8 * (m & 1) + t + 4];
        a0 = __fadd_rn(a0, __fmul_rn(u, u));
        a1 = __fadd_rn(a1, __fmul_rn(w, w));
      }
      acc = __fadd_rn(a0, a1);
    }
    acc = __fadd_rn(acc, __shfl_xor_sync(gmask, acc, 2));  // (a0 + a4) + (a2 + a6), (a1 + a5) + (a3 + a7)
    const float sum = __fadd_rn(acc, __shfl_xor_sync(gmask, acc, 1));
    const float norm = __fsqrt_rn(sum);
    const float inv = norm > 0.0f ? __fdiv_rn(1.0f, norm) : 0.0f;
    float u[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) u[e] = __fmul_rn(__fmul_rn(y[e], a.scale), inv);
    unsigned long long bits = 0;  // code e at bit B * e; code = number of boundaries strictly below u
    if (use_table) {
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        const int c = cell_of(u[e], invw, kofs);
        const unsigned idx = static_cast<unsigned>(s_base[c]) + (u[e] > s_first[c] ? 1u : 0u);
        bits |= static_cast<unsigned long long>(idx) << (B * e);
      }
    } else if constexpr (kTable) {  // fallback (a cell holds two boundaries): boundaries from shared memory
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        unsigned idx = 0;
#pragma unroll 1
        for (int k = 0; k < NB; ++k) idx += u[e] > s_bnd[k] ? 1u : 0u;
        bits |= static_cast<unsigned long long>(idx) << (B * e);
      }
    } else {
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        unsigned idx = 0;
#pragma unroll
        for (int k = 0; k < NB; ++k) idx += u[e] > bnd[k] ? 1u : 0u;
        bits |= static_cast<unsigned long long>(idx) << (B * e);
      }
    }
    std::uint8_t* dst = a.pool + (static_cast<std::size_t>(page) * a.num_kv_heads + g) * a.stride +
                        static_cast<std::size_t>(off) * CB + 2 * B * t;
    if constexpr (B == 4) {
      *reinterpret_cast<uint2*>(dst) = make_uint2(static_cast<unsigned>(bits), static_cast<unsigned>(bits >> 32));
    } else if constexpr (B == 2) {
      *reinterpret_cast<std::uint32_t*>(dst) = static_cast<std::uint32_t>(bits);
    } else if constexpr (B == 1) {
      *reinterpret_cast<std::uint16_t*>(dst) = static_cast<std::uint16_t>(bits);
    } else {
#pragma unroll
      for (int q = 0; q < 3; ++q)
        reinterpret_cast<std::uint16_t*>(dst)[q] = static_cast<std::uint16_t>(bits >> (16 * q));
    }
    if (t == 0) {
      std::uint8_t* blk = a.pool + (static_cast<std::size_t>(page) * a.num_kv_heads + g) * a.stride;
      *reinterpret_cast<std::uint16_t*>(blk + (static_cast<std::size_t>(1) << a.page_shift) * CB + 2 * off) =
          float_to_half(norm);
    }
    __syncwarp(gmask);  // row is rewritten next iteration
  }
}

template <int D, int B, class XT>
void launch_append(const AppendArgs& a, cudaStream_t s) {
  constexpr int VPB = kThreads / (D / 16);
  const int blocks_needed = (a.total + VPB - 1) / VPB;
  const int cap = detail::num_sms() * 4;  // 4 resident blocks per SM (64 registers)
  const int grid = blocks_needed < cap ? blocks_needed : cap;
  // Widths 3 and 4 (7 and 15 boundaries) use the cell table; 1 and 2 compare directly.
  append_kernel<D, B, (B >= 3), XT><<<grid, kThreads, 0, s>>>(a);
  TKV_CHECK_LAUNCH();
}

template <int D, class XT>
void launch_append_d(int bits, const AppendArgs& a, cudaStream_t s) {
  switch (bits) {
    case 1: return launch_append<D, 1, XT>(a, s);
    case 2: return launch_append<D, 2, XT>(a, s);
    case 3: return launch_append<D, 3, XT>(a, s);
    case 4: return launch_append<D, 4, XT>(a, s);
  }
}

template <class XT>
void launch_append_any(int d, int bits, const AppendArgs& a, cudaStream_t s) {
  switch (d) {
    case 64: return launch_append_d<64, XT>(bits, a, s);
    case 128: return launch_append_d<128, XT>(bits, a, s);
    case 256: return launch_append_d<256, XT>(bits, a, s);
  }
}

}  // namespace

void tq_mse_append(const TqMseTables& codec, const void* x, int batch, int num_new, int num_kv_heads,
                   const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream, IoType x_type) {
  const char* where = "cuda::tq_mse_append";
  check_arg(batch >= 0 && num_new >= 0, where, "batch/num_new", batch, "must be >= 0");
  check_arg(num_kv_heads > 0, where, "num_kv_heads", num_kv_heads, "must be positive");
  check_arg(table.page_size >= 1 && (table.page_size & (table.page_size - 1)) == 0, where, "page_size",
            table.page_size, "must be a power of two");
  check_arg(pool.page_stride == tq_page_stride(table.page_size, codec.code_bytes()), where, "pool.page_stride",
            pool.page_stride, "must equal tq_page_stride(page_size, code_bytes)");
  const long long total = 1LL * batch * num_new * num_kv_heads;
  check_arg(total < (1LL << 31), where, "batch*num_new*num_kv_heads", total, "must be < 2^31");
  if (total == 0) return;
  check_arg(x && start && table.pages && pool.data, where, "pointers", 0, "must be non-null device pointers");
  AppendArgs a{x, static_cast<int>(total), num_new, num_kv_heads, start, table.pages, table.max_pages,
               __builtin_ctz(static_cast<unsigned>(table.page_size)), pool.data, pool.page_stride,
               codec.signs(), codec.boundaries(), codec.hadamard_scale()};
  const cudaStream_t s = detail::stream_of(stream);
  switch (x_type) {
    case IoType::kF32: return launch_append_any<float>(codec.head_dim(), codec.bits(), a, s);
    case IoType::kF16: return launch_append_any<__half>(codec.head_dim(), codec.bits(), a, s);
    case IoType::kBf16: return launch_append_any<__nv_bfloat16>(codec.head_dim(), codec.bits(), a, s);
  }
  throw std::invalid_argument(turbokv::detail::concat(where, ": x_type = ", static_cast<int>(x_type),
                                                      ": must be kF32, kF16 or kBf16"));
}

}  // namespace turbokv::cuda
