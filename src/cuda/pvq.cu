// Product VQ with smoothing + Hadamard (VecInfer; src/ref/pvq.cpp) on the GPU:
// PvqTables (the calibrated reference's lambda and codebooks), encode and paged
// append (the reference's bytes), dequantize (the reference's floats) and split-K
// decode attention (pages or contiguous blocks).
//
// Encode: 128 threads (4 warps) own a tile of 32 tokens (warp w: tokens
// [8w, 8w + 8)). Each warp rotates its tokens with the reference's float
// operations (lane l holds coordinates [lE, lE + E), E = D/32):
//   xs = x / lambda; y = xs * sign; FWHT (h = 1 .. E/2 in registers, then by
//   shuffles, each butterfly one rounded add); z = y * scale
// into a shared tile. Then, sub-vector by sub-vector, the block stages C_s
// ([g][K], SoA) in shared memory and each warp searches its tokens: lane l
// takes centroids k = l + 32 j, dist_k = sum_i (z_i - C_s[k][i])^2 accumulated
// in ascending i (multiply, then add, each rounded: the reference's order), keeps
// its first minimum, and the warp reduces (dist, k) to the lowest k among equal
// minima (= the reference's ascending strict-< scan). Codes are packed from a
// shared byte buffer into the LSB-first stream (packed(d/g, c)).
//
// The same encode kernel writes a contiguous block (pvq_encode) or pages (pvq_append: fp32, fp16 or
// bf16 input widened exactly). At a head_dim that is not a power of two (80, 96, 112, ...: the
// reference rotates by its dense Haar matrix) its D = 0 instance (head_dim at run time) computes
// z = Pi xs by warp_dense_rotate (the reference's order, lane l holding coordinates l + 32 k), and the
// dequantize's y = Pi^T c likewise.
//
// Decode: the staged split-K kernel (staged.cuh), on pages (pvq_paged_decode) or contiguous blocks
// (pvq_decode). Keys by look-up tables (PvqLutKey, VecInfer's table attend): once per query head
// pvq_lut_kernel builds LUT[s][k] = <(Pi (lambda q))_s, C_s[k]> (fp64, stored fp32, after the decode
// workspace) and a token's score is sum_s LUT[s][code_s]. Values (PvqFmt) decoded once per KV head and
// 32-token step into shared memory (centroid coordinates in the rotated, smoothed domain); the merge
// applies Pi_v^T and lambda_v once.
#include <cmath>
#include <vector>

#include "../ref/pvq.h"
#include "decode_h16.cuh"
#include "qjl.cuh"
#include "splitk.cuh"
#include "staged.cuh"
#include "turbokv/cuda_vq.h"
#include "turbokv/error.h"
#include "turbokv/pack.h"

namespace turbokv::cuda {
namespace {

using namespace detail::splitk;


constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kVecs = 32;  // tokens per encode block
constexpr int kVecsPerWarp = kVecs / kWarps;


struct EncArgs {
  const void* x;  // [n][d] of the kernel's XT
  std::size_t n;
  const float* lambda;
  const float* signs;
  const float* cent_t;  // [nsub][g][K]
  float scale;
  const float* rot_t;  // dense rotations (D = 0): Pi^T [d][d]; else nullptr
  int d;               // head_dim
};

/// D: head_dim (64, 128, 256), or 0 for a dense-rotation head_dim a.d (see the file comment).
template <int D, int G, int C, class XT, class Dst>
__global__ void __launch_bounds__(kThreads) pvq_encode_kernel(const EncArgs a, const Dst dst) {
  constexpr bool kDense = D == 0;
  constexpr int DM = kDense ? 256 : D, E = D / 32, K = 1 << C, KPL = K / 32;
  const int d = kDense ? a.d : D, NSUB = d / G, CB = (NSUB * C + 7) / 8;
  static_assert(K % 32 == 0, "whole centroids per lane");
  __shared__ __align__(16) float zs[kVecs][DM];
  __shared__ float cs[G * K];
  __shared__ std::uint8_t codes[kVecs][DM / G];
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const std::size_t v0 = static_cast<std::size_t>(blockIdx.x) * kVecs;
  const int nv = a.n - v0 < static_cast<std::size_t>(kVecs) ? static_cast<int>(a.n - v0) : kVecs;
  if constexpr (kDense) {
    // xs = x / lambda into the token's own row of zs (the warp's scratch), then z = Pi xs over it.
    for (int v = 0; v < kVecsPerWarp; ++v) {
      const int vv = w * kVecsPerWarp + v;
      if (vv >= nv) break;  // warp-uniform
      const std::size_t xt = (v0 + vv) * d;
      float* row = zs[vv];
      for (int i = lane; i < d; i += 32) row[i] = __fdiv_rn(detail::load_x<XT>(a.x, xt + i), __ldg(a.lambda + i));
      __syncwarp();
      warp_dense_rotate_row(a.rot_t, row, d);
    }
  } else {
    float lam[E], sgn[E];
#pragma unroll
    for (int e = 0; e < E; ++e) lam[e] = __ldg(a.lambda + lane * E + e), sgn[e] = __ldg(a.signs + lane * E + e);
    for (int v = 0; v < kVecsPerWarp; ++v) {
      const int vv = w * kVecsPerWarp + v;
      if (vv >= nv) break;  // warp-uniform
      const std::size_t xt = (v0 + vv) * D;
      float y[E];
#pragma unroll
      for (int e = 0; e < E; ++e)
        y[e] = __fmul_rn(__fdiv_rn(detail::load_x<XT>(a.x, xt + lane * E + e), lam[e]), sgn[e]);
      warp_fwht<E>(y);
#pragma unroll
      for (int e = 0; e < E; ++e) zs[vv][lane * E + e] = __fmul_rn(y[e], a.scale);
    }
  }
  for (int s = 0; s < NSUB; ++s) {
    __syncthreads();  // the tile is written / the previous C_s is no longer read
    for (int idx = threadIdx.x; idx < G * K; idx += kThreads)
      cs[idx] = __ldg(a.cent_t + static_cast<std::size_t>(s) * G * K + idx);
    __syncthreads();
    for (int v = 0; v < kVecsPerWarp; ++v) {
      const int vv = w * kVecsPerWarp + v;
      if (vv >= nv) break;  // warp-uniform
      float z[G];
#pragma unroll
      for (int i = 0; i < G; ++i) z[i] = zs[vv][s * G + i];  // broadcast
      float best = 0.0f;
      int bk = 0;
#pragma unroll
      for (int j = 0; j < KPL; ++j) {
        const int k = lane + 32 * j;
        float dd = 0.0f;
#pragma unroll
        for (int i = 0; i < G; ++i) {
          const float e = __fsub_rn(z[i], cs[i * K + k]);
          dd = __fadd_rn(dd, __fmul_rn(e, e));
        }
        if (j == 0 || dd < best) best = dd, bk = k;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, o);
        const int ok = __shfl_xor_sync(0xffffffffu, bk, o);
        if (ob < best || (ob == best && ok < bk)) best = ob, bk = ok;
      }
      if (lane == 0) codes[vv][s] = static_cast<std::uint8_t>(bk);
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < nv * CB; idx += kThreads) {
    const int v = idx / CB, kb = idx - v * CB;
    unsigned byte = 0;
    if constexpr (C == 8) {
      byte = codes[v][kb];
    } else {
#pragma unroll
      for (int bit = 0; bit < 8; ++bit) {
        const int g = 8 * kb + bit;
        if (g < NSUB * C) byte |= ((static_cast<unsigned>(codes[v][g / C]) >> (g % C)) & 1u) << bit;
      }
    }
    dst.at(v0 + v).codes[kb] = static_cast<std::uint8_t>(byte);
  }
}

struct DeqArgs {
  const std::uint8_t* block;
  std::size_t n;
  const float* lambda;
  const float* signs;
  const float* cent;  // [nsub][K][g]
  float scale;
  float* out;
  const float* rot;  // dense rotations (pvq_dequantize_dense_kernel): Pi [d][d]; else nullptr
  int d;             // head_dim
};

// Dense rotations (head_dim d not a power of two), one warp per token: centroid coordinates into the
// warp's shared row, Pi^T y by warp_dense_rotate (Rotation::inverse's order), * lambda.
template <int G, int C>
__global__ void __launch_bounds__(kThreads) pvq_dequantize_dense_kernel(const DeqArgs a) {
  constexpr int K = 1 << C;
  __shared__ float rows[kWarps][256];
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, d = a.d;
  const std::size_t CB = (static_cast<std::size_t>(d / G) * C + 7) / 8;
  float* row = rows[w];
  for (std::size_t t = static_cast<std::size_t>(blockIdx.x) * kWarps + w; t < a.n;
       t += static_cast<std::size_t>(gridDim.x) * kWarps) {  // warp-uniform
    const std::uint8_t* tok = a.block + t * CB;
    for (int j = lane; j < d; j += 32) {
      const int s = j / G;
      const unsigned code = get_code(tok, static_cast<std::size_t>(s), C);
      row[j] = __ldg(a.cent + (static_cast<std::size_t>(s) * K + code) * G + (j - s * G));
    }
    __syncwarp();
    float y[kDenseLaneElems];
    warp_dense_rotate(a.rot, row, d, y);
#pragma unroll
    for (int k = 0; k < kDenseLaneElems; ++k) {
      const int j = lane + 32 * k;
      if (j < d) a.out[t * d + j] = __fmul_rn(__ldg(a.lambda + j), y[k]);
    }
    __syncwarp();  // the row is rewritten for the next token
  }
}

// One warp per token: centroid coordinates, FWHT, * (scale * sign), * lambda (the reference decode's fp32 ops).
template <int D, int G, int C>
__global__ void __launch_bounds__(kThreads) pvq_dequantize_kernel(const DeqArgs a) {
  constexpr int E = D / 32, K = 1 << C, NSUB = D / G;
  constexpr std::size_t CB = (NSUB * C + 7) / 8;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float lam[E], ss[E];
#pragma unroll
  for (int e = 0; e < E; ++e)
    lam[e] = __ldg(a.lambda + lane * E + e), ss[e] = __fmul_rn(a.scale, __ldg(a.signs + lane * E + e));
  for (std::size_t t = static_cast<std::size_t>(blockIdx.x) * kWarps + w; t < a.n;
       t += static_cast<std::size_t>(gridDim.x) * kWarps) {  // warp-uniform
    const std::uint8_t* tok = a.block + t * CB;
    float y[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int j = lane * E + e, s = j / G;
      const unsigned code = get_code(tok, static_cast<std::size_t>(s), C);
      y[e] = __ldg(a.cent + (static_cast<std::size_t>(s) * K + code) * G + (j - s * G));
    }
    warp_fwht<E>(y);
    float* o = a.out + t * D + lane * E;
#pragma unroll
    for (int e = 0; e < E; ++e) o[e] = __fmul_rn(lam[e], __fmul_rn(y[e], ss[e]));
  }
}

/// The one dispatch from (head_dim, bits) to the kernels' compile-time (D, g, c): f(D, G, C) as
/// integral constants (D = 0: a dense-rotation head_dim, tab.dense()).
template <class F>
void with_dgc(const PvqTables& tab, F&& f) {
  using std::integral_constant;
  auto by_bits = [&](auto d_c) {
    switch (tab.bits()) {
      case 1: return f(d_c, integral_constant<int, 8>{}, integral_constant<int, 8>{});
      case 2: return f(d_c, integral_constant<int, 4>{}, integral_constant<int, 8>{});
      case 3: return f(d_c, integral_constant<int, 2>{}, integral_constant<int, 6>{});
      case 4: return f(d_c, integral_constant<int, 2>{}, integral_constant<int, 8>{});
    }
  };
  detail::with_head_dim_or_dense(tab.head_dim(), tab.dense(), by_bits);
}

template <class Dst>
void launch_encode(const PvqTables& tab, IoType x_type, const EncArgs& ea, const Dst& dst, cudaStream_t s) {
  with_dgc(tab, [&](auto d_c, auto g_c, auto c_c) {
    constexpr int D = decltype(d_c)::value, G = decltype(g_c)::value, C = decltype(c_c)::value;
    const unsigned grid = static_cast<unsigned>((ea.n + kVecs - 1) / kVecs);
    detail::with_io_type(x_type, [&](auto xt_c) {
      pvq_encode_kernel<D, G, C, typename decltype(xt_c)::type><<<grid, kThreads, 0, s>>>(ea, dst);
    });
    TKV_CHECK_LAUNCH();
  });
}

void launch_dequantize(const PvqTables& tab, const DeqArgs& da, cudaStream_t s) {
  with_dgc(tab, [&](auto d_c, auto g_c, auto c_c) {
    constexpr int D = decltype(d_c)::value, G = decltype(g_c)::value, C = decltype(c_c)::value;
    if constexpr (D == 0)
      pvq_dequantize_dense_kernel<G, C><<<detail::capped_grid(da.n, kWarps), kThreads, 0, s>>>(da);
    else
      pvq_dequantize_kernel<D, G, C><<<detail::capped_grid(da.n, kWarps), kThreads, 0, s>>>(da);
    TKV_CHECK_LAUNCH();
  });
}

// ---- Staged decode (staged.cuh): side.bits = c (code bits), side.shift = log2 g, side.cb = code
// bytes, tab0 = the centroids [num_sub][K][g]. Values (and any staged product-VQ rows): element j =
// C_s[code_s][j mod g] (s = j / g) in the rotated, smoothed domain; the merge applies Pi_v^T and lambda_v.
struct PvqFmt {
  static constexpr bool kLut = false, kSide = false, kRawSide = false, kSmemTab = false;
  __device__ __forceinline__ static std::size_t side_off(const detail::StagedSide&, int, int, int) { return 0; }
  template <int KQ, int LS, class R, class T>
  __device__ __forceinline__ static void stage(const detail::StagedSide& s, int D, const std::uint8_t* row,
                                               const std::uint8_t* /*side*/, int lane, T* dst) {
#pragma unroll
    for (int k = 0; k < KQ; ++k) {
      const int q = lane + LS * k, j = 4 * q;
      if (j < D) {
        if (s.shift >= 2) {  // g = 4 or 8: the quad lies in one sub-vector (16-byte aligned centroid coordinates)
          const int sub = j >> s.shift;
          const unsigned code = detail::field<R>(row, sub * s.bits, s.bits);
          const float4 c = __ldg(reinterpret_cast<const float4*>(
              s.tab0 + ((((static_cast<std::size_t>(sub) << s.bits) + code) << s.shift) | (j & ((1 << s.shift) - 1)))));
          detail::store_quad(dst + j, c.x, c.y, c.z, c.w);
        } else {  // g = 2: sub-vectors 2 q and 2 q + 1
          const unsigned c0 = detail::field<R>(row, 2 * q * s.bits, s.bits),
                         c1 = detail::field<R>(row, (2 * q + 1) * s.bits, s.bits);
          const float2 a = __ldg(reinterpret_cast<const float2*>(s.tab0 + (((static_cast<std::size_t>(2 * q) << s.bits) + c0) << 1)));
          const float2 b =
              __ldg(reinterpret_cast<const float2*>(s.tab0 + (((static_cast<std::size_t>(2 * q + 1) << s.bits) + c1) << 1)));
          detail::store_quad(dst + j, a.x, a.y, b.x, b.y);
        }
      }
    }
  }
};

/// Keys: VecInfer's table attend. Once per query head (pvq_lut_kernel) LUT[s][k] = <q'_s, C_s[k]>,
/// q' = Pi (lambda * q), in fp64 as the reference's prepare_query, stored fp32; the score of a token
/// is sum_s LUT[s][code_s] (side.off = num_sub, side.bits = c), no decoded keys.
struct PvqLutKey {
  static constexpr bool kLut = true, kSide = false, kRawSide = false, kSmemTab = false;
  __device__ __forceinline__ static float score(const detail::StagedSide& s, const std::uint8_t* blk, int /*ps*/,
                                                int slot, const float* lut) {
    const std::uint8_t* row = blk + static_cast<std::size_t>(slot) * s.cb;
    float s0 = 0.0f, s1 = 0.0f;  // even / odd sub-vectors (num_sub is even)
    for (int i = 0; i < s.off; i += 2) {
      s0 += __ldg(lut + (i << s.bits) + detail::field_at(row, i * s.bits, s.bits));
      s1 += __ldg(lut + ((i + 1) << s.bits) + detail::field_at(row, (i + 1) * s.bits, s.bits));
    }
    return s0 + s1;
  }
};

// LUT[row][s][k] = <(Pi (lambda * q))_s, C_s[k]> in fp64 (Pvq::do_prepare_query's order), stored fp32.
// rot_t (dense rotations, head_dim not a power of two): Pi^T [d][d], y = Pi (lambda q) in fp64 (ascending j,
// as Rotation::forward); signs and scale unused then. Dynamic shared memory: 2 d doubles.
__global__ void pvq_lut_kernel(const float* __restrict__ q, int d, int g, int kk, const float* __restrict__ lambda,
                               const float* __restrict__ signs, double scale, const float* __restrict__ cent,
                               const float* __restrict__ rot_t, float* __restrict__ lut) {
  extern __shared__ double lut_q[];  // [2 d]
  double* y = lut_q;
  const float* qq = q + static_cast<std::size_t>(blockIdx.x) * d;
  if (rot_t != nullptr) {
    double* ql = lut_q + d;
    for (int j = threadIdx.x; j < d; j += blockDim.x)
      ql[j] = __dmul_rn(static_cast<double>(qq[j]), static_cast<double>(lambda[j]));
    __syncthreads();
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
      double acc = 0;
      for (int j = 0; j < d; ++j)
        acc = __dadd_rn(acc, __dmul_rn(static_cast<double>(__ldg(rot_t + static_cast<std::size_t>(j) * d + i)), ql[j]));
      y[i] = acc;
    }
  } else {
    for (int j = threadIdx.x; j < d; j += blockDim.x)
      y[j] = __dmul_rn(__dmul_rn(static_cast<double>(qq[j]), static_cast<double>(lambda[j])), static_cast<double>(signs[j]));
    for (int h = 1; h < d; h <<= 1) {
      __syncthreads();
      for (int p = threadIdx.x; p < d / 2; p += blockDim.x) {
        const int j = (p / h) * 2 * h + p % h;
        const double u = y[j], v = y[j + h];
        y[j] = __dadd_rn(u, v);
        y[j + h] = __dsub_rn(u, v);
      }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < d; j += blockDim.x) y[j] = __dmul_rn(y[j], scale);
  }
  __syncthreads();
  const int nsub = d / g, ls = nsub * kk;
  float* out = lut + static_cast<std::size_t>(blockIdx.x) * ls;
  for (int idx = threadIdx.x; idx < ls; idx += blockDim.x) {
    const int s = idx / kk;
    const float* c = cent + static_cast<std::size_t>(idx) * g;  // C_s[k], idx = s * K + k
    double acc = 0;
    for (int i = 0; i < g; ++i) acc = __dadd_rn(acc, __dmul_rn(y[s * g + i], static_cast<double>(__ldg(c + i))));
    out[idx] = static_cast<float>(acc);
  }
}

/// StagedCall::prep of product-VQ keys: one pvq_lut_kernel block per (sequence, query head).
void pvq_lut_prep(const detail::StagedCall& call, const float* q, int rows, float* lut, cudaStream_t s) {
  const auto& t = *static_cast<const PvqTables*>(call.prep_ctx);
  pvq_lut_kernel<<<static_cast<unsigned>(rows), 128, 2 * sizeof(double) * t.head_dim(), s>>>(
      q, t.head_dim(), t.sub_dim(), t.num_centroids(), t.lambda(), t.signs(), static_cast<double>(t.hadamard_scale()),
      t.centroids(), t.rotation_t(), lut);
  TKV_CHECK_LAUNCH();
}

detail::StagedSide pvq_side(const PvqTables& t) {
  detail::StagedSide s{};
  s.tab0 = t.centroids();
  s.bits = t.code_bits(), s.shift = __builtin_ctz(static_cast<unsigned>(t.sub_dim()));
  s.cb = static_cast<int>(t.code_bytes());
  return s;
}

detail::StagedCall pvq_call(const PvqTables& kt, const PvqTables& vt) {
  detail::StagedCall c;
  c.kside = pvq_side(kt), c.vside = pvq_side(vt);
  c.kside.off = kt.num_sub(), c.kside.lut_floats = kt.lut_size();
  c.prep = pvq_lut_prep, c.prep_ctx = &kt;  // keys by look-up tables: no query rotation here
  c.vlambda = vt.lambda();
  if (vt.dense())  // head_dim not a power of two: the merge's dense Pi_v^T
    c.vrot = vt.rotation();
  else
    c.vsigns = vt.signs(), c.vscale = vt.hadamard_scale();
  c.launch = detail::launch_staged<PvqLutKey, PvqFmt>;
  return c;
}

}  // namespace

PvqTables::PvqTables(const Codec& codec) {
  const char* where = "cuda::PvqTables";
  const auto* r = dynamic_cast<const ref::Pvq*>(&codec);
  check_arg(r != nullptr, where, "codec", method_name(codec.config().method),
            "must be the reference pvq codec of make_codec (method pvq, center off)");
  check_arg(codec.calibrated(), where, "codec.calibrated", codec.calibrated(), "must be true (call calibrate())");
  const int d = codec.head_dim();
  check_arg(detail::gpu_head_dim(d), where, "codec.head_dim", d, "must be a multiple of 16 in 64..256 for pvq on the GPU");
  const RotationKind rk = r->rotation().kind();  // kHaar: the dense matrix Hadamard becomes where d is not 2^k
  check_arg(rk == RotationKind::kHadamard || rk == RotationKind::kHaar, where, "codec.rotation", rotation_name(rk),
            "must be hadamard");
  head_dim_ = d;
  bits_ = static_cast<int>(codec.config().bits);
  g_ = r->sub_dim();
  c_ = r->code_bits();
  static const int g_of[] = {0, 8, 4, 2, 2}, c_of[] = {0, 8, 8, 6, 8};
  check_arg(bits_ >= 1 && bits_ <= 4 && g_ == g_of[bits_] && c_ == c_of[bits_], where, "codec.bits", bits_,
            "must be 1..4 with the reference's (g, c)");
  scale_ = detail::upload_rotation(r->rotation(), signs_, rotation_, rotation_t_);  // dense where not a power of two
  lambda_ = detail::upload(r->lambda());
  cent_ = detail::upload(r->centroids());
  cent_t_ = detail::upload(r->centroids_soa());
}

std::size_t PvqTables::page_stride(int page_size) const {
  detail::check_page_size("cuda::PvqTables::page_stride", page_size);
  return detail::token_page_stride(page_size, code_bytes(), 0);
}

void pvq_encode(const PvqTables& tab, const float* x, std::size_t n, std::uint8_t* out, Stream stream) {
  if (!detail::check_block_io("cuda::pvq_encode", n, x, "x", out)) return;
  const EncArgs ea{x, n, tab.lambda(), tab.signs(), tab.centroids_soa(), tab.hadamard_scale(), tab.rotation_t(),
                   tab.head_dim()};
  launch_encode(tab, IoType::kF32, ea, detail::BlockDst{out, n, tab.code_bytes(), 0}, detail::stream_of(stream));
}

void pvq_append(const PvqTables& tab, const void* x, int batch, int num_new, int num_kv_heads,
                const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream, IoType x_type,
                std::int32_t* bad) {
  long long total = 0;
  const detail::PagedDst dst = detail::paged_dst("cuda::pvq_append", x, batch, num_new, num_kv_heads, start, table,
                                                 pool, x_type, tab.code_bytes(), 0,
                                                 "must equal PvqTables::page_stride(page_size)", total);
  if (total == 0) return;
  const EncArgs ea{x, static_cast<std::size_t>(total), tab.lambda(), tab.signs(), tab.centroids_soa(),
                   tab.hadamard_scale(), tab.rotation_t(), tab.head_dim()};
  detail::flag_bad_vectors(x, x_type, total, tab.head_dim(), bad, detail::stream_of(stream));
  launch_encode(tab, x_type, ea, dst, detail::stream_of(stream));
}

void pvq_dequantize(const PvqTables& tab, const std::uint8_t* block, std::size_t n, float* out, Stream stream) {
  if (!detail::check_block_io("cuda::pvq_dequantize", n, block, "block", out)) return;
  const DeqArgs da{block, n, tab.lambda(), tab.signs(), tab.centroids(), tab.hadamard_scale(), out, tab.rotation(),
                   tab.head_dim()};
  launch_dequantize(tab, da, detail::stream_of(stream));
}

std::size_t pvq_decode_workspace_bytes(const VqDecodeArgs& args, const PvqTables& ktab) {
  return detail::staged_blocks_workspace("cuda::pvq_decode_workspace_bytes", args, ktab.head_dim(), ktab.lut_size());
}

std::size_t pvq_paged_decode_workspace_bytes(const DecodeArgs& args, const PvqTables& ktab) {
  check_arg(ktab.head_dim() == args.head_dim, "cuda::pvq_paged_decode_workspace_bytes", "ktab.head_dim",
            ktab.head_dim(), "must equal args.head_dim");
  return detail::staged_lut_offset(args) +
         sizeof(float) * ktab.lut_size() * static_cast<std::size_t>(args.batch) * args.num_heads;
}

void pvq_decode(const PvqTables& ktab, const PvqTables& vtab, const VqDecodeArgs& a, Stream stream) {
  detail::staged_block_decode("cuda::pvq_decode", ktab, vtab, a, pvq_call(ktab, vtab), detail::stream_of(stream));
}

namespace detail {
// decode.cu: the product-VQ decode on the fp16 tensor-core kernel of decode_h16.cuh (instances below).
void pvq_paged_decode_h16(const PvqTables& ktab, const PvqTables& vtab, PagedPool kpool, PagedPool vpool,
                          const PageTable& table, const DecodeArgs& args, Stream stream);

/// Warps per block: 16 at head_dim 64; at 128 (128 KB of tables at 1, 2 and 4 bits, 32 KB at 3) 16 for
/// 1 and 2 bits (3 and 4 pipeline stages per warp), 8 with 4 stages for 3 and 4 bits (at 16 warps 4-bit
/// has room for only 2). H200 runs s19-1 and s19-2, two alternating passes each of `turbokv_cuda_bench
/// --configs 128:32:8,64:9:3 --batches 1,16,64 --contexts 32768,65536 --bits 1,2,3,4 --methods pvq` with 16
/// and 8 warps at head_dim 128 (us, 16 / 8 warps): batch 16 x 64k 1-bit 468.9 / 497.8, 2-bit 530.8 / 554.7,
/// 3-bit 605.8 / 605.2, 4-bit 608.1 / 612.7 (s19-1), 607.5 / 607.5 (s19-2); batch 64 x 64k 3-bit 2403.7 /
/// 2380.4; batch 1 x 32k 1-bit 37.2 / 33.5, 2-bit 39.6 / 35.0, 4-bit 42.8 / 38.7 (s19-1).
void launch_pvq_h16(int b, int d, int /*vb*/, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  if (d == 64) {
    switch (b) {
      case 1: return launch_h16_nw<64, 1, 1, 16, false, false, kModePvq>(shape, s, a);
      case 2: return launch_h16_nw<64, 2, 2, 16, false, false, kModePvq>(shape, s, a);
      case 3: return launch_h16_nw<64, 3, 3, 16, false, false, kModePvq>(shape, s, a);
      case 4: return launch_h16_nw<64, 4, 4, 16, false, false, kModePvq>(shape, s, a);
    }
  } else if (d == 128) {
    switch (b) {
      case 1: return launch_h16_nw<128, 1, 1, 16, false, false, kModePvq>(shape, s, a);
      case 2: return launch_h16_nw<128, 2, 2, 16, false, false, kModePvq>(shape, s, a);
      case 3: return launch_h16_nw<128, 3, 3, 8, false, false, kModePvq>(shape, s, a);
      case 4: return launch_h16_nw<128, 4, 4, 8, false, false, kModePvq>(shape, s, a);
    }
  } else if (d == 256 && b == 3) {  // 2 x 32 KB of 6-bit tables; 8 warps (registers), as TurboQuant's d256
    return launch_h16_nw<256, 3, 3, 8, false, false, kModePvq>(shape, s, a);
  }
  throw std::logic_error("launch_pvq_h16: head_dim out of range");
}
}  // namespace detail

void pvq_paged_decode(const PvqTables& ktab, const PvqTables& vtab, PagedPool kpool, PagedPool vpool,
                      const PageTable& table, const DecodeArgs& args, Stream stream) {
  // Kernel 0 with keys and values of the same width at head_dim 64 / 128, and at 3 bits at 256: the TurboQuant
  // fp16 kernel with per-sub-vector centroid tables (decode_h16.cuh, H16Layout::PVQ; D KB of shared memory,
  // D / 4 KB at 3 bits: 1, 2 and 4 bits do not fit at 256). TURBOKV_PVQ_H16=0 in the environment keeps the
  // look-up-table kernel there (A/B runs, tests).
  static const bool h16_off = detail::env_off("TURBOKV_PVQ_H16");
  const int b = ktab.bits();
  if (args.kernel == 0 && !h16_off && b >= 1 && b <= 4 && vtab.bits() == b &&
      (args.head_dim == 64 || args.head_dim == 128 || (args.head_dim == 256 && b == 3))) {
    detail::pvq_paged_decode_h16(ktab, vtab, kpool, vpool, table, args, stream);
    return;
  }
  detail::staged_paged_decode("cuda::pvq_paged_decode", ktab, vtab, kpool, vpool, table, args, pvq_call(ktab, vtab),
                              detail::stream_of(stream));
}

}  // namespace turbokv::cuda
