// Product VQ with smoothing + Hadamard (VecInfer; src/ref/pvq.cpp) on the GPU:
// PvqTables (the calibrated reference's lambda and codebooks), encode (the
// reference's bytes), dequantize (the reference's floats) and look-up-table
// split-K decode attention.
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
// Decode: (1) one block per query head builds q' = Pi (lambda * q) and the table
// LUT[s][k] = <q'_s, C_s[k]> in fp64 (the reference's prepare_query), stored
// fp32 in the workspace; (2) grid (splits, batch * num_heads), 128 threads: the
// LUT is staged in shared memory, one token per thread per tile: score =
// sum_s LUT[s][code_s]; online softmax; thread i accumulates coordinate i (and
// i + 128) of the value codec's rotated, smoothed domain from the value
// centroids C_s[code_s][i % g]; (3) log-sum-exp merge, Pi_v^T and lambda_v once.
#include <cmath>
#include <vector>

#include "../ref/pvq.h"
#include "qjl.cuh"
#include "splitk.cuh"
#include "turbokv/cuda_vq.h"
#include "turbokv/error.h"
#include "turbokv/pack.h"

namespace turbokv::cuda {
namespace {

using namespace detail::splitk;

using detail::qjl::allow_smem;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kVecs = 32;  // tokens per encode block
constexpr int kVecsPerWarp = kVecs / kWarps;


struct EncArgs {
  const float* x;
  std::size_t n;
  const float* lambda;
  const float* signs;
  const float* cent_t;  // [nsub][g][K]
  float scale;
  std::uint8_t* out;
};

template <int D, int G, int C>
__global__ void __launch_bounds__(kThreads) pvq_encode_kernel(const EncArgs a) {
  constexpr int E = D / 32, K = 1 << C, KPL = K / 32, NSUB = D / G;
  constexpr int CB = (NSUB * C + 7) / 8;
  static_assert(K % 32 == 0, "whole centroids per lane");
  __shared__ __align__(16) float zs[kVecs][D];
  __shared__ float cs[G * K];
  __shared__ std::uint8_t codes[kVecs][NSUB];
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const std::size_t v0 = static_cast<std::size_t>(blockIdx.x) * kVecs;
  const int nv = a.n - v0 < static_cast<std::size_t>(kVecs) ? static_cast<int>(a.n - v0) : kVecs;
  {
    float lam[E], sgn[E];
#pragma unroll
    for (int e = 0; e < E; ++e) lam[e] = __ldg(a.lambda + lane * E + e), sgn[e] = __ldg(a.signs + lane * E + e);
    for (int v = 0; v < kVecsPerWarp; ++v) {
      const int vv = w * kVecsPerWarp + v;
      if (vv >= nv) break;  // warp-uniform
      const float* xt = a.x + (v0 + vv) * D;
      float y[E];
#pragma unroll
      for (int e = 0; e < E; ++e) y[e] = __fmul_rn(__fdiv_rn(__ldg(xt + lane * E + e), lam[e]), sgn[e]);
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
    a.out[(v0 + v) * CB + kb] = static_cast<std::uint8_t>(byte);
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
};

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

template <int D, int G, int C>
void launch_d(bool encode, const EncArgs& ea, const DeqArgs& da, cudaStream_t s) {
  if (encode) {
    const std::size_t grid = (ea.n + kVecs - 1) / kVecs;
    pvq_encode_kernel<D, G, C><<<static_cast<unsigned>(grid), kThreads, 0, s>>>(ea);
  } else {
    pvq_dequantize_kernel<D, G, C><<<detail::capped_grid(da.n, kWarps), kThreads, 0, s>>>(da);
  }
  TKV_CHECK_LAUNCH();
}

/// The one dispatch from (head_dim, bits) to the kernels' compile-time (D, g, c).
template <int D>
void launch_bits(int bits, bool encode, const EncArgs& ea, const DeqArgs& da, cudaStream_t s) {
  switch (bits) {
    case 1: return launch_d<D, 8, 8>(encode, ea, da, s);
    case 2: return launch_d<D, 4, 8>(encode, ea, da, s);
    case 3: return launch_d<D, 2, 6>(encode, ea, da, s);
    case 4: return launch_d<D, 2, 8>(encode, ea, da, s);
  }
}

void launch(const PvqTables& tab, bool encode, const EncArgs& ea, const DeqArgs& da, cudaStream_t s) {
  switch (tab.head_dim()) {
    case 64: return launch_bits<64>(tab.bits(), encode, ea, da, s);
    case 128: return launch_bits<128>(tab.bits(), encode, ea, da, s);
    case 256: return launch_bits<256>(tab.bits(), encode, ea, da, s);
  }
}

// ---- Look-up-table split-K decode: product-VQ keys and values (contiguous blocks).


// LUT[bh][s][k] = <(Pi (lambda * q))_s, C_s[k]> in fp64 (Pvq::do_prepare_query's order), stored fp32.
__global__ void pvq_lut_kernel(const float* __restrict__ q, int d, int g, int kk, const float* __restrict__ lambda,
                               const float* __restrict__ signs, double scale, const float* __restrict__ cent,
                               float* __restrict__ lut) {
  extern __shared__ double lut_q[];  // [d]
  double* y = lut_q;
  const float* qq = q + static_cast<std::size_t>(blockIdx.x) * d;
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

struct DecArgs {
  const std::uint8_t* keys;
  const std::uint8_t* values;
  const std::int32_t* lens;
  const float* lut;  // [batch * num_heads][ls]
  int num_heads, group, num_kv_heads, d, splits, capacity;
  int knsub, kc, kk, ls;  // key sub-vectors, code bits, centroids, LUT floats
  int vg, vc, vk;         // value sub-dim, code bits, centroids
  std::size_t kcb, vcb;   // code bytes per token
  const float* vcent;     // [nsub][K][g]
  float logit_scale;      // softmax_scale * log2(e)
  float* ws;              // [splits][batch * num_heads][d + 2]: m, l, acc[d]
};


__global__ void __launch_bounds__(kDecThreads) pvq_decode_split_kernel(const DecArgs a) {
  extern __shared__ __align__(16) float sh[];
  float* lut = sh;              // [ls]
  float* pw = lut + a.ls;       // [kDecTile] softmax weights
  float* red = pw + kDecTile;   // [32]
  const int bh = blockIdx.y, b = bh / a.num_heads, h = bh % a.num_heads, g = h / a.group;
  const int d = a.d;
  const int len = __ldg(a.lens + b);
  const int chunk = (len + a.splits - 1) / a.splits;
  const int s0 = min(len, static_cast<int>(blockIdx.x) * chunk), s1 = min(len, s0 + chunk);
  if (s0 < s1) {  // block-uniform: empty splits skip the table load
    const float4* src = reinterpret_cast<const float4*>(a.lut + static_cast<std::size_t>(bh) * a.ls);
    for (int i = threadIdx.x; i < a.ls / 4; i += kDecThreads) reinterpret_cast<float4*>(lut)[i] = __ldg(src + i);
  }
  __syncthreads();
  const std::uint8_t* kbk = a.keys + (static_cast<std::size_t>(b) * a.num_kv_heads + g) * a.capacity * a.kcb;
  const std::uint8_t* vbk = a.values + (static_cast<std::size_t>(b) * a.num_kv_heads + g) * a.capacity * a.vcb;
  float mrun = -INFINITY, lrun = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
  const int i0 = threadIdx.x, i1 = threadIdx.x + kDecThreads;
  const int s_0 = i0 / a.vg, s_1 = i1 / a.vg;  // value sub-vectors of this thread's coordinates
  const float* c0 = a.vcent + static_cast<std::size_t>(s_0) * a.vk * a.vg + (i0 - s_0 * a.vg);
  const float* c1 = a.vcent + static_cast<std::size_t>(s_1) * a.vk * a.vg + (i1 - s_1 * a.vg);
  for (int t0 = s0; t0 < s1; t0 += kDecTile) {
    const int t = t0 + threadIdx.x;
    float logit = -INFINITY;
    if (t < s1) {
      const std::uint8_t* tc = kbk + static_cast<std::size_t>(t) * a.kcb;
      float sc0 = 0.0f, sc1 = 0.0f;  // even / odd sub-vectors
      for (int s = 0; s < a.knsub; s += 2) {
        sc0 += lut[s * a.kk + static_cast<int>(get_code(tc, static_cast<std::size_t>(s), a.kc))];
        sc1 += lut[(s + 1) * a.kk + static_cast<int>(get_code(tc, static_cast<std::size_t>(s + 1), a.kc))];
      }
      logit = (sc0 + sc1) * a.logit_scale;
    }
    softmax_tile(logit, 1.0f, t < s1, mrun, lrun, acc0, acc1, pw, red);  // publishes pw
    const int nt = min(kDecTile, s1 - t0);
    for (int tt = 0; tt < nt; ++tt) {
      const std::uint8_t* vc = vbk + static_cast<std::size_t>(t0 + tt) * a.vcb;
      const float w = pw[tt];
      if (i0 < d)
        acc0 = __fmaf_rn(w, __ldg(c0 + get_code(vc, static_cast<std::size_t>(s_0), a.vc) * a.vg), acc0);
      if (i1 < d)
        acc1 = __fmaf_rn(w, __ldg(c1 + get_code(vc, static_cast<std::size_t>(s_1), a.vc) * a.vg), acc1);
    }
    __syncthreads();  // pw is rewritten by the next tile
  }
  store_partial(a.ws, bh, d, mrun, lrun, acc0, acc1, i0, i1);
}
/// Floats of the split partials, rounded up to a multiple of 4 (the LUTs follow, 16-byte aligned).
std::size_t partial_floats(const VqDecodeArgs& a, int head_dim) {
  const std::size_t f = static_cast<std::size_t>(decode_splits(a)) * a.batch * a.num_heads * (head_dim + 2);
  return (f + 3) / 4 * 4;
}

}  // namespace

PvqTables::PvqTables(const Codec& codec) {
  const char* where = "cuda::PvqTables";
  const auto* r = dynamic_cast<const ref::Pvq*>(&codec);
  check_arg(r != nullptr, where, "codec", method_name(codec.config().method),
            "must be the reference pvq codec of make_codec (method pvq, center off)");
  check_arg(codec.calibrated(), where, "codec.calibrated", codec.calibrated(), "must be true (call calibrate())");
  const int d = codec.head_dim();
  check_arg(d == 64 || d == 128 || d == 256, where, "codec.head_dim", d, "must be 64, 128 or 256 for pvq on the GPU");
  check_arg(r->rotation().kind() == RotationKind::kHadamard, where, "codec.rotation", rotation_name(r->rotation().kind()),
            "must be hadamard");
  head_dim_ = d;
  bits_ = static_cast<int>(codec.config().bits);
  g_ = r->sub_dim();
  c_ = r->code_bits();
  static const int g_of[] = {0, 8, 4, 2, 2}, c_of[] = {0, 8, 8, 6, 8};
  check_arg(bits_ >= 1 && bits_ <= 4 && g_ == g_of[bits_] && c_ == c_of[bits_], where, "codec.bits", bits_,
            "must be 1..4 with the reference's (g, c)");
  scale_ = Rotation::hadamard_scale(d);
  lambda_ = detail::upload(r->lambda());
  signs_ = detail::upload(r->rotation().signs());
  cent_ = detail::upload(r->centroids());
  cent_t_ = detail::upload(r->centroids_soa());
}

void pvq_encode(const PvqTables& tab, const float* x, std::size_t n, std::uint8_t* out, Stream stream) {
  if (!detail::check_block_io("cuda::pvq_encode", n, x, "x", out)) return;
  const EncArgs ea{x, n, tab.lambda(), tab.signs(), tab.centroids_soa(), tab.hadamard_scale(), out};
  launch(tab, true, ea, DeqArgs{}, detail::stream_of(stream));
}

void pvq_dequantize(const PvqTables& tab, const std::uint8_t* block, std::size_t n, float* out, Stream stream) {
  if (!detail::check_block_io("cuda::pvq_dequantize", n, block, "block", out)) return;
  const DeqArgs da{block, n, tab.lambda(), tab.signs(), tab.centroids(), tab.hadamard_scale(), out};
  launch(tab, false, EncArgs{}, da, detail::stream_of(stream));
}

std::size_t pvq_decode_workspace_bytes(const VqDecodeArgs& args, const PvqTables& ktab) {
  const char* where = "cuda::pvq_decode_workspace_bytes";
  check_workspace_args(where, args);
  return sizeof(float) * (partial_floats(args, ktab.head_dim()) +
                          static_cast<std::size_t>(args.batch) * args.num_heads * ktab.lut_size());
}

void pvq_decode(const PvqTables& ktab, const PvqTables& vtab, const VqDecodeArgs& a, Stream stream) {
  const char* where = "cuda::pvq_decode";
  check_arg(vtab.head_dim() == ktab.head_dim(), where, "vtab.head_dim", vtab.head_dim(), "must equal ktab.head_dim");
  const long long rows = check_decode_args(where, a);
  if (rows == 0) return;
  const int d = ktab.head_dim(), splits = decode_splits(a);
  float* ws = static_cast<float*>(a.workspace);
  float* lut = ws + partial_floats(a, d);
  const int ls = static_cast<int>(ktab.lut_size());
  const cudaStream_t s = detail::stream_of(stream);
  pvq_lut_kernel<<<static_cast<unsigned>(rows), kDecThreads, sizeof(double) * d, s>>>(
      a.q, d, ktab.sub_dim(), ktab.num_centroids(), ktab.lambda(), ktab.signs(),
      static_cast<double>(ktab.hadamard_scale()), ktab.centroids(), lut);
  TKV_CHECK_LAUNCH();
  const DecArgs k{a.keys, a.values, a.seq_lens, lut, a.num_heads, a.num_heads / a.num_kv_heads, a.num_kv_heads, d,
                  splits, a.capacity, ktab.num_sub(), ktab.code_bits(), ktab.num_centroids(), ls, vtab.sub_dim(),
                  vtab.code_bits(), vtab.num_centroids(), ktab.code_bytes(), vtab.code_bytes(), vtab.centroids(),
                  a.softmax_scale * 1.4426950408889634f, ws};
  const std::size_t smem = sizeof(float) * (static_cast<std::size_t>(ls) + kDecTile + 32);
  allow_smem(pvq_decode_split_kernel, smem);
  pvq_decode_split_kernel<<<dim3(splits, static_cast<unsigned>(rows)), kDecThreads, smem, s>>>(k);
  TKV_CHECK_LAUNCH();
  merge_rotate_kernel<<<static_cast<unsigned>(rows), kDecThreads, sizeof(float) * d, s>>>(
      ws, splits, static_cast<int>(rows), d, vtab.signs(), vtab.hadamard_scale(), vtab.lambda(), a.out);
  TKV_CHECK_LAUNCH();
}

}  // namespace turbokv::cuda
