// The SIMD kernels, written once over a vector-traits class T and stamped out
// per ISA: kernels_avx2.cpp and kernels_avx512.cpp define T (Avx2 / Avx512)
// and include this file, so it is compiled only with those files' flags.
// Never include it from baseline files.
//
// T provides: W (lanes), F/I vector types, load/store/arith, fma (attention
// only: the encode path uses mul then add, formats.h), lut<WIDE> (16-entry
// codebook look-up), groups<BITS> (W groups of 8 packed codes into 32-bit
// lanes; reads group_bytes<BITS> bytes), fwht_lane (in-register Hadamard
// stage), quantize, store_codes_u8, sumsq8 (the format's 8-lane order),
// reduce_tokens (W vectors -> lane t = sum of vector slot(t)), exp, srlv (lane-wise
// shifts), selecti / select (lane-wise choice by a 0 / ~0 mask; fractional TurboQuant-MSE),
// from_f16 / from_bf16 (W 16-bit values -> fp32), from_e4m3 (W e4m3 bytes -> fp32 times 2^-8, exact),
// from_u8 (W bytes -> fp32, exact).
// With TURBOKV_KERNELS_SOURCES_ONLY defined, only the encode/decode kernels and
// the token sources (TqSrc, DenseSrc) are compiled, for other kernels built on them.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>
#include <utility>

#include "byte_groups.h"
#include "kernels.h"
#include "turbokv/half.h"

namespace turbokv::cpu::detail {
namespace KNS {

using F = T::F;
using I = T::I;
constexpr int W = T::W;
constexpr int TB = W;                  // tokens per block
constexpr int kMaxDim = 512;
constexpr int kMaxNv = kMaxDim / 8 / W;  // group vectors per token at most

// ---------------------------------------------------------------- encode

inline void fwht(float* y, int d) {
  for (int h = 1; h < d; h <<= 1) {
    if (h < W) {
      for (int k = 0; k < d; k += W) T::store(y + k, T::fwht_lane(T::load(y + k), h));
    } else {
      for (int i = 0; i < d; i += 2 * h)
        for (int j = i; j < i + h; j += W) {
          const F a = T::load(y + j), b = T::load(y + j + h);
          T::store(y + j, T::add(a, b));
          T::store(y + j + h, T::sub(a, b));
        }
    }
  }
}

/// fn(std::integral_constant<int, B>{}) with B = bits (1..4; anything else is taken as 4): the one
/// place a runtime width becomes a compile-time one in this file.
template <class Fn>
inline decltype(auto) with_bits(int bits, Fn&& fn) {
  switch (bits) {
    case 1: return fn(std::integral_constant<int, 1>{});
    case 2: return fn(std::integral_constant<int, 2>{});
    case 3: return fn(std::integral_constant<int, 3>{});
    default: return fn(std::integral_constant<int, 4>{});
  }
}

/// encode with the Hadamard rotation at a compile-time head_dim D (a power of two, >= W) and width
/// BITS: the general path's operations in its order (so the same bytes: sign multiply, the FWHT
/// stages h = 1, 2, 4, ..., times the Hadamard scale, times 1 / ||x||, quantize), with the row held in
/// registers instead of a buffer rewritten per stage, and the 1-bit codes taken straight from the
/// compare masks (session 15: d64 1-bit encode 11.2M vectors/s on one thread, a tenth of faiss's
/// unrotated sign test).
template <int D, int BITS>
void encode_hadamard(const TqState& st, const float* x, std::size_t count, std::uint8_t* codes, float* norms) {
  constexpr int NV = D / W;
  static_assert(NV >= 1 && (NV & (NV - 1)) == 0);
  const F sc = T::set1(st.scale);
  for (std::size_t t = 0; t < count; ++t) {
    const float* xt = x + t * static_cast<std::size_t>(D);
    const float norm = std::sqrt(T::sumsq8(xt, D));
    F y[NV];
    for (int i = 0; i < NV; ++i) y[i] = T::mul(T::load(xt + i * W), T::load(st.signs.data() + i * W));
    for (int h = 1; h < W; h <<= 1)
      for (int i = 0; i < NV; ++i) y[i] = T::fwht_lane(y[i], h);
    for (int hv = 1; hv < NV; hv <<= 1)
      for (int i = 0; i < NV; i += 2 * hv)
        for (int j = i; j < i + hv; ++j) {
          const F a = y[j], b = y[j + hv];
          y[j] = T::add(a, b);
          y[j + hv] = T::sub(a, b);
        }
    const F inv = T::set1(norm > 0 ? 1.0f / norm : 0.0f);
    std::uint8_t* out = codes + t * st.code_bytes;
    if constexpr (BITS == 1) {
      for (int i = 0; i < NV; ++i) {
        const auto m = T::gt_bits(T::mul(T::mul(y[i], sc), inv), st.bnd16[0]);
        std::memcpy(out + i * (W / 8), &m, W / 8);  // lane j -> bit j: LSB-first
      }
    } else {
      alignas(64) std::uint8_t cb[D];
      for (int i = 0; i < NV; ++i) T::store_codes_u8(cb + i * W, T::quantize(T::mul(T::mul(y[i], sc), inv), st));
      pack_groups<BITS>(cb, D, out);
    }
    norms[t] = norm;
  }
}

void encode(const TqState& st, const float* x, std::size_t count, std::uint8_t* codes, float* norms) {
  if (st.rot == Rot::kHadamard && (st.dim == 64 || st.dim == 128 || st.dim == 256))
    return with_bits(st.bits, [&](auto b) {
      constexpr int B = decltype(b)::value;
      switch (st.dim) {
        case 64: return encode_hadamard<64, B>(st, x, count, codes, norms);
        case 128: return encode_hadamard<128, B>(st, x, count, codes, norms);
        default: return encode_hadamard<256, B>(st, x, count, codes, norms);
      }
    });
  const int d = st.dim, bits = st.bits;
  alignas(64) float y[kMaxDim];
  alignas(64) std::uint8_t cb[kMaxDim];
  for (std::size_t t = 0; t < count; ++t) {
    const float* xt = x + t * static_cast<std::size_t>(d);
    const float norm = std::sqrt(T::sumsq8(xt, d));
    if (st.rot == Rot::kHadamard) {
      for (int k = 0; k < d; k += W) T::store(y + k, T::mul(T::load(xt + k), T::load(st.signs.data() + k)));
      fwht(y, d);
      const F sc = T::set1(st.scale);
      for (int k = 0; k < d; k += W) T::store(y + k, T::mul(T::load(y + k), sc));
    } else if (st.rot == Rot::kDense) {
      for (int k = 0; k < d; k += W) T::store(y + k, T::zero());
      for (int j = 0; j < d; ++j) {
        const float* col = st.mat_t.data() + static_cast<std::size_t>(j) * d;
        const F xj = T::set1(xt[j]);
        for (int k = 0; k < d; k += W) T::store(y + k, T::add(T::load(y + k), T::mul(T::load(col + k), xj)));
      }
    } else {
      std::memcpy(y, xt, sizeof(float) * static_cast<std::size_t>(d));
    }
    const F inv = T::set1(norm > 0 ? 1.0f / norm : 0.0f);
    for (int k = 0; k < d; k += W) T::store_codes_u8(cb + k, T::quantize(T::mul(T::load(y + k), inv), st));
    with_bits(bits, [&](auto b) { pack_groups<decltype(b)::value>(cb, d, codes + t * st.code_bytes); });
    norms[t] = norm;
  }
}

void convert(const std::uint16_t* x, bool bf16, std::size_t count, float* out) {
  std::size_t i = 0;
  if (bf16)
    for (; i + W <= count; i += W) T::store(out + i, T::from_bf16(x + i));
  else
    for (; i + W <= count; i += W) T::store(out + i, T::from_f16(x + i));
  for (; i < count; ++i) out[i] = bf16 ? bf16_to_float(x[i]) : half_to_float(x[i]);
}

void decode(const TqState& st, const std::uint8_t* codes, const std::uint8_t* norms16, std::size_t count,
            float* out) {
  const int d = st.dim, bits = st.bits;
  alignas(64) std::uint8_t cb[kMaxDim];
  alignas(64) float y[kMaxDim];
  const F lo = T::load(st.cbx), hi = T::load(st.cbx + (W == 16 ? 0 : 8));
  for (std::size_t t = 0; t < count; ++t) {
    with_bits(bits, [&](auto b) { unpack_groups<decltype(b)::value>(codes + t * st.code_bytes, d, cb); });
    for (int k = 0; k < d; k += W) T::store(y + k, T::template lut<true>(T::load_u8(cb + k), lo, hi));
    const float norm = half_to_float(static_cast<std::uint16_t>(norms16[2 * t] | (norms16[2 * t + 1] << 8)));
    float* o = out + t * static_cast<std::size_t>(d);
    const F nv = T::set1(norm);
    if (st.rot == Rot::kHadamard) {
      fwht(y, d);
      for (int k = 0; k < d; k += W)
        T::store(o + k, T::mul(nv, T::mul(T::load(y + k), T::load(st.inv_scale.data() + k))));
    } else if (st.rot == Rot::kDense) {
      alignas(64) float xr[kMaxDim];
      for (int k = 0; k < d; k += W) T::store(xr + k, T::zero());
      for (int i = 0; i < d; ++i) {
        const float* row = st.mat.data() + static_cast<std::size_t>(i) * d;
        const F yi = T::set1(y[i]);
        for (int k = 0; k < d; k += W) T::store(xr + k, T::add(T::load(xr + k), T::mul(T::load(row + k), yi)));
      }
      for (int k = 0; k < d; k += W) T::store(o + k, T::mul(nv, T::load(xr + k)));
    } else {
      for (int k = 0; k < d; k += W) T::store(o + k, T::mul(nv, T::load(y + k)));
    }
  }
}

// ---------------------------------------------------------------- sources of token vectors

/// Staged TurboQuant codes of one block of TB tokens (BITS-wide codes).
template <int BITS>
struct TqSrc {
  static constexpr bool kIsTq = true;
  static constexpr bool WIDE = T::kNeedWide && BITS == 4;
  const TqState* st;
  const std::uint8_t* block;
  std::size_t n, block_bytes;
  int nv, gstride;
  F lo, hi;
  int ng;
  bool transpose = false;  ///< keys: also keep the groups token-in-lane (gt) for scoring
  bool scalars = true;     ///< load the block's fp16 norms (false: the owner reads its own scalars)
  alignas(64) std::int32_t g[TB * kMaxNv * W];   // [token][group]
  alignas(64) std::int32_t gt[kMaxNv * W * TB];  // [group][token]
  alignas(64) float norms[TB];

  TqSrc(const TqState& s, const std::uint8_t* b, std::size_t n_) : st(&s), block(b), n(n_) {
    block_bytes = n * (s.code_bytes + 2);
    ng = s.ng;
    nv = (s.ng + W - 1) / W;
    gstride = nv * W;
    lo = T::load(s.cb16);
    hi = T::load(s.cb16 + (W == 16 ? 0 : 8));
  }
  int vectors() const { return nv * 8; }

  const std::uint8_t* gptr = nullptr;  ///< values: codes of the block's first token when read in place
  bool direct = false;

  void stage(std::size_t t, int cnt) {
    constexpr int L = T::template group_bytes<BITS>();
    alignas(64) std::uint8_t tmp[64];
    // Read in place (no staging copy) unless a load could run past the buffer.
    const bool in_place = cnt == TB && (t + cnt - 1) * st->code_bytes + static_cast<std::size_t>(nv - 1) * W * BITS + L <= block_bytes;
    if (transpose && in_place) {  // keys: load, transpose in registers, keep token-in-lane rows only
      const std::uint8_t* p = block + t * st->code_bytes;
      for (int v = 0; v < nv; ++v) {
        I r[W];
        for (int i = 0; i < TB; ++i) r[i] = T::template groups<BITS>(p + i * st->code_bytes + v * W * BITS);
        T::transpose(r);
        for (int j = 0; j < W; ++j) T::storei(gt + (v * W + j) * TB, r[j]);
      }
      if (scalars) load_norms(t, cnt);
      return;
    }
    direct = !transpose && in_place;
    const int staged = direct ? 0 : cnt;
    if (direct) gptr = block + t * st->code_bytes;
    for (int i = 0; i < staged; ++i) {
      const std::size_t base = (t + i) * st->code_bytes;
      for (int v = 0; v < nv; ++v) {
        const std::size_t off = base + static_cast<std::size_t>(v) * W * BITS;
        const std::uint8_t* src = block + off;
        if (off + L > block_bytes) {  // would read past the block: copy what is there
          std::memset(tmp, 0, sizeof tmp);
          std::memcpy(tmp, src, block_bytes - off);
          src = tmp;
        }
        T::storei(g + i * gstride + v * W, T::template groups<BITS>(src));
      }
    }
    if (transpose) {
      for (int i = cnt; i < TB; ++i)
        for (int v = 0; v < nv; ++v) T::storei(g + i * gstride + v * W, T::zeroi());
      for (int v = 0; v < nv; ++v) {
        I r[W];
        for (int i = 0; i < TB; ++i) r[i] = T::loadi(g + i * gstride + v * W);
        T::transpose(r);
        for (int j = 0; j < W; ++j) T::storei(gt + (v * W + j) * TB, r[j]);
      }
    }
    if (scalars) load_norms(t, cnt);
  }
  void load_norms(std::size_t t, int cnt) {
    const std::uint8_t* nb = block + n * st->code_bytes + 2 * t;
    if (cnt == TB) {
      T::store(norms, T::from_f16(reinterpret_cast<const std::uint16_t*>(nb)));
    } else {
      for (int i = 0; i < TB; ++i)
        norms[i] = i < cnt ? half_to_float(static_cast<std::uint16_t>(nb[2 * i] | (nb[2 * i + 1] << 8))) : 0.0f;
    }
  }
  F norm_vec() const { return T::load(norms); }
  static constexpr bool kHasNorm = true;
  // Always inlined: an out-of-line call in the value loop saves and restores every vector register (AVX2).
  [[gnu::always_inline]] I group(int i, int v) const {
    if (direct) return T::template groups<BITS>(gptr + i * st->code_bytes + v * W * BITS);
    return T::loadi(g + i * gstride + v * W);
  }
  /// Group j of every token of the block, token i in lane i.
  I trow(int j) const { return T::loadi(gt + j * TB); }
  /// Value weight of token i (every lane): the probability (tq_value_chunk).
  F weight(float p, int, int) const { return T::set1(p); }
  template <int S>
  F code(I gv) const { return T::template lut<WIDE>(T::template srli<BITS * S>(gv), lo, hi); }
};

template <bool F16>
struct DenseSrc {
  const float* f32 = nullptr;
  const std::uint16_t* f16 = nullptr;
  std::size_t stride, t = 0;
  static constexpr bool kIsTq = false;
  int nvec;
  DenseSrc(const void* base, std::size_t stride_, int dim) : stride(stride_), nvec(dim / W) {
    if constexpr (F16)
      f16 = static_cast<const std::uint16_t*>(base);
    else
      f32 = static_cast<const float*>(base);
  }
  int vectors() const { return nvec; }
  void stage(std::size_t t0, int) { t = t0; }
  static constexpr bool kHasNorm = false;
  F norm_vec() const { return T::set1(1.0f); }
  F get(int i, int k) const {
    const std::size_t off = (t + i) * stride + static_cast<std::size_t>(k) * W;
    if constexpr (F16)
      return T::from_f16(f16 + off);
    else
      return T::load(f32 + off);
  }
};

#ifndef TURBOKV_KERNELS_SOURCES_ONLY  // defined by tq_mse_bf16_avx512.cpp: encode, convert, decode and the sources only
// ---------------------------------------------------------------- attention

inline int slot(int t) { return T::slot(t); }

/// dots[(h0 + h) * TB * W + slot(i) * W ...] = per-lane partial <q_h, token i>.
template <int GH, class Src>
inline void score_heads(const Src& src, int K, int cnt, const float* qp, int P, int h0, float* dots) {
  for (int i = cnt; i < TB; ++i)
    for (int h = 0; h < GH; ++h) T::store(dots + ((h0 + h) * TB + slot(i)) * W, T::zero());
  for (int i = 0; i < cnt; ++i) {
    F a[GH];
    for (int h = 0; h < GH; ++h) a[h] = T::zero();
    for (int k = 0; k < K; ++k) {
      const F c = src.get(i, k);
      for (int h = 0; h < GH; ++h) a[h] = T::fma(T::load(qp + (h0 + h) * P + k * W), c, a[h]);
    }
    for (int h = 0; h < GH; ++h) T::store(dots + ((h0 + h) * TB + slot(i)) * W, a[h]);
  }
}

// ---- TurboQuant scores, tokens in lanes: for group j, shift S turns the block's
// group-j dwords into the codes of coordinate 8j+S of all TB tokens; one look-up
// and one broadcast-q FMA per head. q: natural order [G][dim]. No reductions.

template <int GH, class Src, int... S>
inline void tq_score_t(const Src& src, const float* q, int d, float* out, std::integer_sequence<int, S...>) {
  F a[2][GH];
  for (int h = 0; h < GH; ++h) a[0][h] = a[1][h] = T::zero();
  for (int j = 0; j < src.ng; ++j) {
    const auto gt = src.trow(j);  // I, or a source's own group type (RvqKeySrc)
    const float* qj = q + 8 * j;
    auto step = [&](auto sc) {
      constexpr int s = decltype(sc)::value;
      const F c = src.template code<s>(gt);
      for (int h = 0; h < GH; ++h) a[s & 1][h] = T::fma(T::set1(qj[h * d + s]), c, a[s & 1][h]);
    };
    (step(std::integral_constant<int, S>{}), ...);
  }
  for (int h = 0; h < GH; ++h) T::store(out + h * W, T::add(a[0][h], a[1][h]));
}

/// out[h * W + i] = <q_h, codes of token i> (no norm) for the G heads.
template <class Src>
void tq_scores_block(const Src& src, const float* q, int G, int d, float* out) {
  constexpr int M = T::kScoreHeads;
  constexpr auto seq = std::make_integer_sequence<int, 8>{};
  int h0 = 0;
  for (; h0 + M <= G; h0 += M) tq_score_t<M>(src, q + h0 * d, d, out + h0 * W, seq);
  const float* qh = q + h0 * d;
  float* o = out + h0 * W;
  switch (G - h0) {
    case 1: tq_score_t<1>(src, qh, d, o, seq); break;
    case 2: tq_score_t<2>(src, qh, d, o, seq); break;
    case 3: tq_score_t<3>(src, qh, d, o, seq); break;
    case 4: if constexpr (M > 4) tq_score_t<4>(src, qh, d, o, seq); break;
    case 5: if constexpr (M > 5) tq_score_t<5>(src, qh, d, o, seq); break;
    case 6: if constexpr (M > 6) tq_score_t<6>(src, qh, d, o, seq); break;
    case 7: if constexpr (M > 7) tq_score_t<7>(src, qh, d, o, seq); break;
    default: break;
  }
}

// ---- TurboQuant values: group vector v of token i gives 8 code vectors (shift S = 0..7,
// compile time); acc[h] += w[h][i] * c[code] in the layout of kernels.h.

template <int GH, int S0, int SC, class Src, int... S>
inline void tq_value_chunk(const Src& src, int cnt, const float* pw, float* acc, int P, int h0, int v,
                           std::integer_sequence<int, S...>) {
  // The block's terms are summed from zero and added to acc once (attend_block says why).
  F a[GH][SC];
  float* base = acc + h0 * P + (v * 8 + S0) * W;
  for (int h = 0; h < GH; ++h) ((a[h][S] = T::zero()), ...);
  for (int i = 0; i < cnt; ++i) {
    const auto gv = src.group(i, v);  // I, or a source's own group type (RvqValSrc)
    if constexpr (W == 8 && SC == 2) {
      // AVX2 (16 registers): both code vectors first, then one head's weight at a time. With all GH
      // weights live across the two look-ups (the order below) GCC kept one of the 8 accumulators on
      // the stack, a load-FMA-store chain through memory on every token.
      const F c0 = src.template code<S0>(gv), c1 = src.template code<S0 + 1>(gv);
      for (int h = 0; h < GH; ++h) {
        const F w = src.weight(pw[(h0 + h) * TB + i], i, v);
        a[h][0] = T::fma(w, c0, a[h][0]);
        a[h][1] = T::fma(w, c1, a[h][1]);
      }
      continue;
    }
    F w[GH];
    for (int h = 0; h < GH; ++h) w[h] = src.weight(pw[(h0 + h) * TB + i], i, v);
    auto step = [&](auto sc) {
      constexpr int s = decltype(sc)::value;
      const F c = src.template code<S0 + s>(gv);
      for (int h = 0; h < GH; ++h) a[h][s] = T::fma(w[h], c, a[h][s]);
    };
    (step(std::integral_constant<int, S>{}), ...);
  }
  for (int h = 0; h < GH; ++h) ((T::store(base + h * P + S * W, T::add(T::load(base + h * P + S * W), a[h][S]))), ...);
}

template <int GH, class Src, int... C>
inline void tq_value_heads(const Src& src, int cnt, const float* pw, float* acc, int P, int h0,
                           std::integer_sequence<int, C...>) {
  constexpr int SC = T::sc(GH);
  for (int v = 0; v < src.nv; ++v)
    (tq_value_chunk<GH, C * SC, SC>(src, cnt, pw, acc, P, h0, v, std::make_integer_sequence<int, SC>{}), ...);
}

template <int GH, class Src>
inline void tq_value(const Src& src, int cnt, const float* pw, float* acc, int P, int h0) {
  tq_value_heads<GH>(src, cnt, pw, acc, P, h0, std::make_integer_sequence<int, 8 / T::sc(GH)>{});
}
template <class Src>
void dense_score_block(const Src& src, int cnt, const float* qp, int G, int P, float* dots) {
  const int K = src.vectors();
  constexpr int M = T::kScoreHeads;
  int h0 = 0;
  for (; h0 + M <= G; h0 += M) score_heads<M>(src, K, cnt, qp, P, h0, dots);
  switch (G - h0) {
    case 1: score_heads<1>(src, K, cnt, qp, P, h0, dots); break;
    case 2: score_heads<2>(src, K, cnt, qp, P, h0, dots); break;
    case 3: score_heads<3>(src, K, cnt, qp, P, h0, dots); break;
    case 4: if constexpr (M > 4) score_heads<4>(src, K, cnt, qp, P, h0, dots); break;
    case 5: if constexpr (M > 5) score_heads<5>(src, K, cnt, qp, P, h0, dots); break;
    case 6: if constexpr (M > 6) score_heads<6>(src, K, cnt, qp, P, h0, dots); break;
    case 7: if constexpr (M > 7) score_heads<7>(src, K, cnt, qp, P, h0, dots); break;
    default: break;
  }
}


template <int GH, int SC, class Src>
inline void value_heads(const Src& src, int K, int cnt, const float* pw, float* acc, int P, int h0) {
  int k0 = 0;
  for (; k0 + SC <= K; k0 += SC) {
    F a[GH][SC];
    for (int h = 0; h < GH; ++h)
      for (int s = 0; s < SC; ++s) a[h][s] = T::load(acc + (h0 + h) * P + (k0 + s) * W);
    for (int i = 0; i < cnt; ++i) {
      F w[GH];
      for (int h = 0; h < GH; ++h) w[h] = T::set1(pw[(h0 + h) * TB + i]);
      for (int s = 0; s < SC; ++s) {
        const F c = src.get(i, k0 + s);
        for (int h = 0; h < GH; ++h) a[h][s] = T::fma(w[h], c, a[h][s]);
      }
    }
    for (int h = 0; h < GH; ++h)
      for (int s = 0; s < SC; ++s) T::store(acc + (h0 + h) * P + (k0 + s) * W, a[h][s]);
  }
  for (; k0 < K; ++k0) {  // dense tails (K not a multiple of SC)
    F a[GH];
    for (int h = 0; h < GH; ++h) a[h] = T::load(acc + (h0 + h) * P + k0 * W);
    for (int i = 0; i < cnt; ++i) {
      const F c = src.get(i, k0);
      for (int h = 0; h < GH; ++h) a[h] = T::fma(T::set1(pw[(h0 + h) * TB + i]), c, a[h]);
    }
    for (int h = 0; h < GH; ++h) T::store(acc + (h0 + h) * P + k0 * W, a[h]);
  }
}

template <class Src>
void dense_value_block(const Src& src, int cnt, const float* pw, float* acc, int G, int P) {
  const int K = src.vectors();
  int h0 = 0;
  for (; h0 + 4 <= G; h0 += 4) value_heads<4, T::sc(4)>(src, K, cnt, pw, acc, P, h0);
  switch (G - h0) {
    case 1: value_heads<1, T::sc(1)>(src, K, cnt, pw, acc, P, h0); break;
    case 2: value_heads<2, T::sc(2)>(src, K, cnt, pw, acc, P, h0); break;
    case 3: value_heads<3, T::sc(3)>(src, K, cnt, pw, acc, P, h0); break;
    default: break;
  }
}

template <class Src>
void value_block(const Src& src, int cnt, const float* pw, float* acc, int G, int P) {
  if constexpr (Src::kIsTq) {
    int h0 = 0;
    for (; h0 + 4 <= G; h0 += 4) tq_value<4>(src, cnt, pw, acc, P, h0);
    switch (G - h0) {
      case 1: tq_value<1>(src, cnt, pw, acc, P, h0); break;
      case 2: tq_value<2>(src, cnt, pw, acc, P, h0); break;
      case 3: tq_value<3>(src, cnt, pw, acc, P, h0); break;
      default: break;
    }
  } else {
    dense_value_block(src, cnt, pw, acc, G, P);
  }
}

// ---- TurboQuant-Prod keys (Zandieh et al., arXiv 2504.19874, Algorithm 2): score / ||x|| =
// <Pi q, c[mse codes]> + kappa gamma <S Pi q, signs>: two code streams with tokens in lanes. The
// sign bits are 1-bit codes of the "codebook" {-1, +1} against u = S Pi q. 1- and 2-bit streams
// (the signs; MSE codes at b = 2, 3) are scored four bits at a time through per-head 16-entry
// tables (NibbleTables): two / four look-ups and adds per group of 8 coordinates and head instead
// of eight FMAs. 3-bit MSE codes (b = 4) go through tq_scores_block.

/// Per-head 16-entry tables for a BITS-bit code stream with tokens in lanes: each look-up takes the
/// low four bits of a lane's code group shifted by kShift * k (k < NK), which hold CPN = kShift / BITS
/// codes: four 1-bit, two 2-bit, one 3-bit (kShift = 3; the fourth bit belongs to the next code, so
/// every entry appears twice) or one 4-bit code. For head h, code group j (8 coordinates) and look-up
/// k, entry e = sum_c cb[(e >> BITS c) & (2^BITS - 1)] * q_h[8j + CPN k + c] (fp32, c ascending).
template <int BITS>
struct NibbleTables {
  static_assert(BITS >= 1 && BITS <= 4);
  static constexpr int kShift = BITS == 3 ? 3 : 4;
  static constexpr int NK = 8 * BITS / kShift;  // look-ups per code group
  static constexpr int CPN = kShift / BITS;     // codes per look-up
  static constexpr int kHi = W == 16 ? 0 : 8;  // second half of a table for T::lut
  std::vector<float> buf;
  float* tab = nullptr;                         // [G][ng][NK][16] in buf, 64-byte aligned
  int ng = 0;

  void build(const float* q, int G, int stride, int ng_, const float* cb) {
    ng = ng_;
    buf.resize(static_cast<std::size_t>(G) * ng * NK * 16 + 16);
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(buf.data());
    tab = buf.data() + ((64 - a % 64) % 64) / sizeof(float);
    for (int h = 0; h < G; ++h)
      for (int j = 0; j < ng; ++j)
        for (int k = 0; k < NK; ++k) {
          const float* qq = q + static_cast<std::size_t>(h) * stride + 8 * j + CPN * k;
          float* o = tab + (static_cast<std::size_t>(h * ng + j) * NK + k) * 16;
          for (int e = 0; e < 16; ++e) {
            float acc = 0.0f;
            for (int c = 0; c < CPN; ++c) acc += cb[(e >> (BITS * c)) & ((1 << BITS) - 1)] * qq[c];
            o[e] = acc;
          }
        }
  }

  template <int GH, class Src, int... K>
  void score_t(const Src& src, int h0, float* out, std::integer_sequence<int, K...>) const {
    F a[2][GH];
    for (int h = 0; h < GH; ++h) a[0][h] = a[1][h] = T::zero();
    for (int j = 0; j < ng; ++j) {
      const I g = src.trow(j);
      auto step = [&](auto kc) {
        constexpr int k = decltype(kc)::value;
        const I gk = T::template srli<kShift * k>(g);
        for (int h = 0; h < GH; ++h) {
          const float* tb = tab + (static_cast<std::size_t>((h0 + h) * ng + j) * NK + k) * 16;
          a[k & 1][h] = T::add(a[k & 1][h], T::template lut<T::kNeedWide>(gk, T::load(tb), T::load(tb + kHi)));
        }
      };
      (step(std::integral_constant<int, K>{}), ...);
    }
    for (int h = 0; h < GH; ++h) T::store(out + h * W, T::add(a[0][h], a[1][h]));
  }

  /// out[h * W + i] = <q_h, codes of token i> for the G heads (src: the stream's TqSrc, transposed).
  template <class Src>
  void score(const Src& src, int G, float* out) const {
    constexpr int M = T::kScoreHeads;
    constexpr auto seq = std::make_integer_sequence<int, NK>{};
    int h0 = 0;
    for (; h0 + M <= G; h0 += M) score_t<M>(src, h0, out + h0 * W, seq);
    float* o = out + h0 * W;
    switch (G - h0) {
      case 1: score_t<1>(src, h0, o, seq); break;
      case 2: score_t<2>(src, h0, o, seq); break;
      case 3: score_t<3>(src, h0, o, seq); break;
      case 4: if constexpr (M > 4) score_t<4>(src, h0, o, seq); break;
      case 5: if constexpr (M > 5) score_t<5>(src, h0, o, seq); break;
      case 6: if constexpr (M > 6) score_t<6>(src, h0, o, seq); break;
      case 7: if constexpr (M > 7) score_t<7>(src, h0, o, seq); break;
      default: break;
    }
  }
};

/// TurboQuant-MSE keys scored through NibbleTables (token-in-lane, like tq_scores_block): per code
/// group and head NK look-ups and adds instead of 8 broadcast-q FMAs, so the keys leave the FMA
/// pipes to the values. The tables are built on the first score_block (q is fixed per job).
template <int BITS>
struct TqTabSrc : TqSrc<BITS> {
  static constexpr bool kOwnScores = true;
  NibbleTables<BITS> tab;
  bool built = false;
  TqTabSrc(const TqState& s, const std::uint8_t* b, std::size_t n_) : TqSrc<BITS>(s, b, n_) { this->transpose = true; }
  /// out[h * W + i] = <q_h, c[codes of token i]> (no norm); q: [G][stride], rotated.
  void score_block(const float* q, int G, int stride, float* out) {
    if (!built) {
      tab.build(q, G, stride, this->ng, this->st->cb16);
      built = true;
    }
    tab.score(*this, G, out);
  }
};

/// The source of a BITS-wide TurboQuant-MSE key stream in attend_tq and the RVQ keys' 1-bit streams
/// (the split and Prod kernels keep their own choices): look-up tables where that
/// measured faster (docs/RESULTS.md, session 13): 1-bit at both levels (four coordinates per look-up
/// and add instead of four broadcast-q FMAs), 2-bit at AVX-512 (at AVX2 a 16-entry look-up is two
/// permutes and a blend, and 2-bit went 4088 -> 4311 us). 3- and 4-bit stay on FMAs: their one-code
/// tables (8 KB a head at head_dim 128) took them from 2383 / 2508 to 3540 / 4119 us.
template <int BITS>
using KeyStream = std::conditional_t<(BITS == 1 || (BITS == 2 && W == 16)), TqTabSrc<BITS>, TqSrc<BITS>>;

template <int MB>
struct ProdSrc {
  static constexpr bool kIsTq = true;       // scores come token-in-lane (attend_block)
  static constexpr bool kOwnScores = true;  // ... from score_block
  static constexpr bool kHasNorm = true;
  static constexpr bool kMseTables = MB == 1 || MB == 2;
  const ProdKeyState* ps;
  const std::uint8_t* block;
  std::size_t n;
  TqSrc<MB == 0 ? 1 : MB> mse;  // unused when MB == 0 (b = 1: signs only)
  TqSrc<1> sgn;
  NibbleTables<1> stab;                            // signs against S Pi q
  NibbleTables<(MB == 2 ? 2 : 1)> mtab;            // MSE codes against Pi q (MB 1, 2)
  bool built = false;                              // tables: on the first score_block (q fixed per job)
  alignas(64) float norms[TB];
  alignas(64) float kg[TB];       // kappa * gamma per token
  alignas(64) float sd[16 * W];   // sign-part dots [G][W]

  ProdSrc(const ProdKeyState& s, const std::uint8_t* b, std::size_t n_)
      : ps(&s), block(b), n(n_), mse(s.mse, b, n_), sgn(s.sgn, b + s.mse_bytes, n_) {
    const std::size_t total = n_ * (s.code_bytes + 4);
    mse.block_bytes = total;
    sgn.block_bytes = total - s.mse_bytes;
    mse.transpose = sgn.transpose = true;
    mse.scalars = sgn.scalars = false;
  }
  void stage(std::size_t t, int cnt) {
    if constexpr (MB > 0) mse.stage(t, cnt);
    sgn.stage(t, cnt);
    const std::uint8_t* sc = block + n * ps->code_bytes + 4 * t;
    for (int i = 0; i < TB; ++i) {
      const bool in = i < cnt;
      norms[i] = in ? half_to_float(static_cast<std::uint16_t>(sc[4 * i] | (sc[4 * i + 1] << 8))) : 0.0f;
      kg[i] = in ? ps->kappa * half_to_float(static_cast<std::uint16_t>(sc[4 * i + 2] | (sc[4 * i + 3] << 8))) : 0.0f;
    }
  }
  F norm_vec() const { return T::load(norms); }

  /// out[h * W + i] = <Pi q_h, c[code_i]> + kappa gamma_i <S Pi q_h, signs_i>; q: [G][stride] = [Pi q | S Pi q].
  void score_block(const float* q, int G, int stride, float* out) {
    if (!built) {
      static constexpr float kSigns[2] = {-1.0f, 1.0f};  // sign bit 0 = -1, 1 = +1 (formats.h)
      stab.build(q + ps->dim, G, stride, sgn.ng, kSigns);
      if constexpr (kMseTables) mtab.build(q, G, stride, mse.ng, ps->mse.cb16);
      built = true;
    }
    stab.score(sgn, G, sd);
    const F k = T::load(kg);
    if constexpr (MB > 0) {
      if constexpr (kMseTables)
        mtab.score(mse, G, out);
      else
        tq_scores_block(mse, q, G, stride, out);
      for (int h = 0; h < G; ++h) T::store(out + h * W, T::fma(k, T::load(sd + h * W), T::load(out + h * W)));
    } else {
      for (int h = 0; h < G; ++h) T::store(out + h * W, T::mul(k, T::load(sd + h * W)));
    }
  }
};

// ---- Fractional TurboQuant-MSE (width b + 0.5, the outlier split; Zandieh et al., arXiv 2504.19874,
// Algorithm 1 per part, split after Sec. 4.3): two TurboQuant-MSE code streams per token row (outlier
// part b + 1 bits, rest b bits), each with its own rotation, codebook and fp16 norm. Keys:
// score = ||x_o|| <Pi_o q_o, c_o[codes_o]> + ||x_r|| <Pi_r q_r, c_r[codes_r]>, each part scored token-in-lane
// by tq_scores_block; values: each part accumulated in its own rotated domain (SplitHeadState, kernels.h),
// weights times that part's norm. Two layouts: where both parts' code groups fit one register
// (SplitHeadState::packed: head_dim <= 8 W, e.g. 128 at AVX-512) SplitPacked* holds them side by side
// (one transpose, one value pass with per-lane shifts and codebooks, tq_value); otherwise SplitKeySrc /
// SplitValSrc run the two parts as two TqSrc streams (tq_scores_block, value_block).

/// The fp16 norm pairs (||x_o||, ||x_r||) of tokens [t, t + cnt) of a split block (at sc = the block's
/// scalars + 4 t) -> n0[i], n1[i] (0 for i >= cnt).
inline void load_split_norms(const std::uint8_t* sc, int cnt, float* n0, float* n1) {
  alignas(64) float pair[2 * TB];
  if (cnt == TB) {
    T::store(pair, T::from_f16(reinterpret_cast<const std::uint16_t*>(sc)));
    T::store(pair + W, T::from_f16(reinterpret_cast<const std::uint16_t*>(sc) + W));
  } else {
    for (int i = 0; i < 2 * TB; ++i)
      pair[i] = i < 2 * cnt ? half_to_float(static_cast<std::uint16_t>(sc[2 * i] | (sc[2 * i + 1] << 8))) : 0.0f;
  }
  for (int i = 0; i < TB; ++i) n0[i] = pair[2 * i], n1[i] = pair[2 * i + 1];
}

/// The two part streams of a split block (BL = the rest's bits) and the block's per-part norms.
template <int BL>
struct SplitParts {
  static constexpr bool kSplitSrc = true;
  const SplitHeadState* xs;
  const std::uint8_t* block;
  std::size_t n;
  TqSrc<BL + 1> hi;  // outlier part
  TqSrc<BL> lo;      // the rest
  alignas(64) float nrm[2][TB];

  SplitParts(const SplitHeadState& s, const std::uint8_t* b, std::size_t n_, bool keys)
      : xs(&s), block(b), n(n_), hi(s.part[0], b + s.code_offset[0], n_), lo(s.part[1], b + s.code_offset[1], n_) {
    const std::size_t total = n_ * (s.row_bytes + 4);
    hi.block_bytes = total - s.code_offset[0];
    lo.block_bytes = total - s.code_offset[1];
    hi.transpose = lo.transpose = keys;
    hi.scalars = lo.scalars = false;
  }
  void stage(std::size_t t, int cnt) {
    hi.stage(t, cnt);
    lo.stage(t, cnt);
    load_split_norms(block + n * xs->row_bytes + 4 * t, cnt, nrm[0], nrm[1]);
  }
  /// The norms are applied per part (score_block / values), so the common factor is 1.
  F norm_vec() const { return T::set1(1.0f); }
};

/// Split keys: out[h * W + i] = ||x_o|| <q_o, c_o[...]> + ||x_r|| <q_r, c_r[...]> (norms included).
template <int BL>
struct SplitKeySrc : SplitParts<BL> {
  static constexpr bool kIsTq = true;       // scores come token-in-lane (attend_block)
  static constexpr bool kOwnScores = true;  // ... from score_block
  static constexpr bool kHasNorm = false;
  alignas(64) float rest[16 * W];
  SplitKeySrc(const SplitHeadState& s, const std::uint8_t* b, std::size_t n_) : SplitParts<BL>(s, b, n_, true) {}
  void score_block(const float* q, int G, int stride, float* out) {
    tq_scores_block(this->hi, q, G, stride, out);
    tq_scores_block(this->lo, q + this->xs->part[0].dim, G, stride, rest);
    const F a = T::load(this->nrm[0]), b = T::load(this->nrm[1]);
    for (int h = 0; h < G; ++h) T::store(out + h * W, T::fma(b, T::load(rest + h * W), T::mul(a, T::load(out + h * W))));
  }
};

/// Split values: acc_o += p ||x_o|| c_o[codes_o] at 0, acc_r += p ||x_r|| c_r[codes_r] at split_acc_offset.
template <int BL>
struct SplitValSrc : SplitParts<BL> {
  static constexpr bool kIsTq = true;
  static constexpr bool kHasNorm = false;   // pw arrives without a norm ...
  static constexpr bool kOwnValues = true;  // ... and values() applies each part's
  int off;
  alignas(64) float pw2[2][16 * TB];
  SplitValSrc(const SplitHeadState& s, const std::uint8_t* b, std::size_t n_)
      : SplitParts<BL>(s, b, n_, false), off(s.split_acc_offset(W)) {}
  void values(int cnt, const float* pw, float* acc, int G, int P) {
    const F a = T::load(this->nrm[0]), b = T::load(this->nrm[1]);
    for (int h = 0; h < G; ++h) {
      const F p = T::load(pw + h * TB);
      T::store(pw2[0] + h * TB, T::mul(p, a));
      T::store(pw2[1] + h * TB, T::mul(p, b));
    }
    value_block(this->hi, cnt, pw2[0], acc, G, P);
    value_block(this->lo, cnt, pw2[1], acc + off, G, P);
  }
};

/// Groups of one part's codes, transposed (token i in lane i) by their owner: a key source for
/// tq_scores_block with that part's codebook.
template <int BITS>
struct TqRows {
  static constexpr bool WIDE = T::kNeedWide && BITS == 4;
  const std::int32_t* gt;  ///< [ng][TB]
  int ng;
  F lo, hi;
  TqRows(const std::int32_t* rows, const TqState& st)
      : gt(rows), ng(st.ng), lo(T::load(st.cb16)), hi(T::load(st.cb16 + (W == 16 ? 0 : 8))) {}
  I trow(int j) const { return T::loadi(gt + j * TB); }
  template <int S>
  F code(I gv) const { return T::template lut<WIDE>(T::template srli<BITS * S>(gv), lo, hi); }
};

/// Both parts of a token in one register (SplitHeadState::packed: 2 ng <= W, head_dim <= 8 W): lanes
/// [0, ng) hold the outlier part's code groups, lanes [ng, 2 ng) the rest's, so a W-lane pass serves
/// both parts instead of two half-empty ones.
template <int BL>
struct SplitPacked {
  static constexpr int BH = BL + 1;
  static constexpr bool kSplitSrc = true;
  const SplitHeadState* xs;
  const std::uint8_t* block;
  std::size_t n, block_bytes, hoff;
  int ng;
  I sel;  // lanes >= ng: ~0 (the rest)
  alignas(64) std::int32_t g[TB * W];  // [token][lane]
  alignas(64) float nrm[2][TB];

  SplitPacked(const SplitHeadState& s, const std::uint8_t* b, std::size_t n_)
      : xs(&s), block(b), n(n_), block_bytes(n_ * (s.row_bytes + 4)), ng(s.part[0].ng) {
    // A BL-bit group load at row + hoff puts the rest's group j - ng in lane j (code_offset[1] = ng BH).
    hoff = s.code_offset[1] - static_cast<std::size_t>(ng) * BL;
    alignas(64) std::int32_t m[W];
    for (int j = 0; j < W; ++j) m[j] = j >= ng ? -1 : 0;
    sel = T::loadi(m);
  }
  /// Token t + i's packed groups (zero for i >= cnt).
  I packed_groups(std::size_t t, int i, int cnt, bool in_place) const {
    if (i >= cnt) return T::zeroi();
    const std::size_t off = (t + i) * xs->row_bytes;
    const std::uint8_t* src = block + off;
    alignas(64) std::uint8_t tmp[256];
    if (!in_place && off + need() > block_bytes) {  // would read past the block: copy what is there
      std::memset(tmp, 0, sizeof tmp);
      std::memcpy(tmp, src, std::min(need(), block_bytes - off));
      src = tmp;
    }
    return T::selecti(sel, T::template groups<BH>(src), T::template groups<BL>(src + hoff));
  }
  /// Bytes a token's two group loads read from its row start.
  std::size_t need() const {
    return std::max<std::size_t>(T::template group_bytes<BH>(), hoff + T::template group_bytes<BL>());
  }
  /// True when every load of tokens [t, t + cnt) stays inside the block.
  bool in_place(std::size_t t, int cnt) const { return (t + cnt - 1) * xs->row_bytes + need() <= block_bytes; }
  void load_norms(std::size_t t, int cnt) { load_split_norms(block + n * xs->row_bytes + 4 * t, cnt, nrm[0], nrm[1]); }
  /// Values: every token's packed groups into g.
  void stage(std::size_t t, int cnt) {
    const bool ip = in_place(t, cnt);
    for (int i = 0; i < TB; ++i) T::storei(g + i * W, packed_groups(t, i, cnt, ip));
    load_norms(t, cnt);
  }
  F norm_vec() const { return T::set1(1.0f); }
};

/// Packed split keys: one transpose for both parts, then each part's rows scored by tq_scores_block.
template <int BL>
struct SplitPackedKeySrc : SplitPacked<BL> {
  static constexpr bool kIsTq = true;
  static constexpr bool kOwnScores = true;
  static constexpr bool kHasNorm = false;
  alignas(64) std::int32_t gt[W * TB];  // [lane][token]
  alignas(64) float rest[16 * W];
  TqRows<BL + 1> r0;
  TqRows<BL> r1;
  SplitPackedKeySrc(const SplitHeadState& s, const std::uint8_t* b, std::size_t n_)
      : SplitPacked<BL>(s, b, n_), r0(gt, s.part[0]), r1(gt + s.part[0].ng * TB, s.part[1]) {}
  void stage(std::size_t t, int cnt) {  // transposed in registers (g unused)
    const bool ip = this->in_place(t, cnt);
    I r[W];
    for (int i = 0; i < TB; ++i) r[i] = this->packed_groups(t, i, cnt, ip);
    this->load_norms(t, cnt);
    T::transpose(r);
    for (int j = 0; j < W; ++j) T::storei(gt + j * TB, r[j]);
  }
  void score_block(const float* q, int G, int stride, float* out) {
    tq_scores_block(r0, q, G, stride, out);
    tq_scores_block(r1, q + this->xs->part[0].dim, G, stride, rest);
    const F a = T::load(this->nrm[0]), b = T::load(this->nrm[1]);
    for (int h = 0; h < G; ++h) T::store(out + h * W, T::fma(b, T::load(rest + h * W), T::mul(a, T::load(out + h * W))));
  }
};

/// Packed split values for tq_value: one group vector per token (nv = 1), code S of lane j shifted by
/// S BH (outlier lanes) or S BL (the rest) and looked up in that part's codebook; the weight of token
/// i carries each lane's part norm. Accumulator: float s W + j = part 0 coordinate 8 j + s (j < ng),
/// part 1 coordinate 8 (j - ng) + s (ng <= j < 2 ng), padding beyond (SplitHeadState::packed).
template <int BL>
struct SplitPackedValSrc : SplitPacked<BL> {
  static constexpr bool kIsTq = true;
  static constexpr bool kHasNorm = false;  // weight() applies each lane's part norm
  static constexpr int BH = BL + 1;
  int nv = 1;
  F lo0, hi0, lo1, hi1;
  I sh[8];
  alignas(64) float wn[TB * W];  // [token][lane]: ||x_o|| or ||x_r||
  SplitPackedValSrc(const SplitHeadState& s, const std::uint8_t* b, std::size_t n_) : SplitPacked<BL>(s, b, n_) {
    lo0 = T::load(s.part[0].cb16), hi0 = T::load(s.part[0].cb16 + (W == 16 ? 0 : 8));
    lo1 = T::load(s.part[1].cb16), hi1 = T::load(s.part[1].cb16 + (W == 16 ? 0 : 8));
    alignas(64) std::int32_t v[W];
    for (int k = 0; k < 8; ++k) {
      for (int j = 0; j < W; ++j) v[j] = k * (j >= this->ng ? BL : BH);
      sh[k] = T::loadi(v);
    }
  }
  void stage(std::size_t t, int cnt) {
    SplitPacked<BL>::stage(t, cnt);
    for (int i = 0; i < TB; ++i)
      T::store(wn + i * W, T::select(this->sel, T::set1(this->nrm[0][i]), T::set1(this->nrm[1][i])));
  }
  I group(int i, int) const { return T::loadi(this->g + i * W); }
  F weight(float p, int i, int) const { return T::mul(T::set1(p), T::load(wn + i * W)); }
  template <int S>
  F code(I gv) const {
    const I idx = T::srlv(gv, sh[S]);
    return T::select(this->sel, T::template lut<T::kNeedWide && BH == 4>(idx, lo0, hi0),
                     T::template lut<T::kNeedWide && BL == 4>(idx, lo1, hi1));
  }
};

inline void attend_init(int G, int P, float* m, float* lv, float* acc) {
  for (int h = 0; h < G; ++h) {
    m[h] = -INFINITY;
    T::store(lv + h * W, T::zero());
  }
  std::fill(acc, acc + static_cast<std::size_t>(G) * P, 0.0f);
}

/// One block of up to TB tokens [t, t + cnt): scores, online softmax, values.
/// tq_value's sources (TurboQuant, split widths, RVQ, KIVI) sum the block's weighted value terms from
/// zero and add them to acc once per block (as each lane of lv adds one term per block): added to acc
/// token by token, the terms of a long, peaked sequence fell below half an ulp of acc and were lost
/// while lv kept them (TurboQuant 4-bit, head_dim 256, 131,072 tokens on one thread, logits spread over
/// ~3 nats, values of mean 4: relative error 1.9e-4 against the fp64 reference; the CUDA staged kernel
/// had the same defect, staged.cuh). The dense sources (value_heads: fp8 / fp16 codecs, the dense
/// baselines) still add per token: summed per block, the fp16 path measured 5% slower (32,768 tokens,
/// 32/8 heads, head_dim 128, one thread, best of ten interleaved runs: 8242 -> 8693 us), and with jobs
/// of at most 8,192 tokens (attention.cpp kMaxChunkTokens) they stay within 4.4e-6 on that input.
/// m: [G] running max; lv: [G][W] lane-wise sums of exp(logit - m); acc: [G][P];
/// dots: [16 * TB * W], pw: [16 * TB] scratch.
template <class KSrc, class VSrc>
inline void attend_block(KSrc& ks, VSrc& vs, std::size_t t, int cnt, const float* qp, int G, int P, int d,
                         float scale, float softcap, float* m, float* lv, float* acc, float* dots, float* pw) {
  ks.stage(t, cnt);
  vs.stage(t, cnt);
  if constexpr (requires { KSrc::kOwnScores; })
    ks.score_block(qp, G, d, dots);  // token-in-lane scores without the norm, like tq_scores_block
  else if constexpr (KSrc::kIsTq)
    tq_scores_block(ks, qp, G, d, dots);
  else
    dense_score_block(ks, cnt, qp, G, P, dots);
  const F kn = T::mul(ks.norm_vec(), T::set1(scale)), vn = vs.norm_vec();
  for (int h = 0; h < G; ++h) {
    F s;
    if constexpr (KSrc::kIsTq)
      s = T::load(dots + h * W);
    else
      s = T::reduce_tokens(dots + h * TB * W);
    s = T::mul(s, kn);
    if (softcap > 0) {
      alignas(64) float tmp[TB];
      T::store(tmp, s);
      for (int i = 0; i < TB; ++i) tmp[i] = softcap * std::tanh(tmp[i] / softcap);
      s = T::load(tmp);
    }
    if (cnt < TB) s = T::tail(s, cnt, -INFINITY);
    if (T::any_gt(s, m[h])) {  // the running max moves: rescale this head's state
      const float bm = T::hmax(s);
      const float alpha = std::exp(m[h] - bm);  // 0 on the first block
      const F va = T::set1(alpha);
      T::store(lv + h * W, T::mul(T::load(lv + h * W), va));
      float* a = acc + static_cast<std::size_t>(h) * P;
      for (int f = 0; f < P; f += W) T::store(a + f, T::mul(T::load(a + f), va));
      m[h] = bm;
    }
    F p = T::exp(T::sub(s, T::set1(m[h])));
    if (cnt < TB) p = T::tail(p, cnt, 0.0f);
    T::store(lv + h * W, T::add(T::load(lv + h * W), p));
    if constexpr (VSrc::kHasNorm) p = T::mul(p, vn);
    T::store(pw + h * TB, p);
  }
  if constexpr (requires { VSrc::kOwnValues; })
    vs.values(cnt, pw, acc, G, P);
  else
    value_block(vs, cnt, pw, acc, G, P);
}

/// Lane sums -> l[h].
inline void attend_finish(int G, const float* lv, float* l) {
  for (int h = 0; h < G; ++h) l[h] = T::hsum(T::load(lv + h * W));
}

/// The fused loop: blocks of TB tokens over [t0, t1).
template <class KSrc, class VSrc>
void attend_loop(KSrc& ks, VSrc& vs, std::size_t t0, std::size_t t1, const float* qp, int G, int P, int d,
                 float scale, float softcap, float* m, float* l, float* acc) {
  alignas(64) float dots[16 * TB * W];
  alignas(64) float pw[16 * TB];
  alignas(64) float lv[16 * W];
  attend_init(G, P, m, lv, acc);
  for (std::size_t t = t0; t < t1; t += TB)
    attend_block(ks, vs, t, static_cast<int>(std::min<std::size_t>(TB, t1 - t)), qp, G, P, d, scale, softcap, m, lv,
                 acc, dots, pw);
  attend_finish(G, lv, l);
}

template <int KB, int VB>
void attend_tq(const AttnJob& j) {
  KeyStream<KB> ks(*j.ks, j.kcodes, j.n);
  TqSrc<VB> vs(*j.vs, j.vcodes, j.n);
  ks.transpose = true;
  const int P = layout_floats(j.ks->ng, W);
  attend_loop(ks, vs, j.t0, j.t1, j.qp, j.G, P, j.ks->dim, j.scale, j.softcap, j.m, j.l, j.acc);
}

template <int KB>
void attend_k(const AttnJob& j) {
  switch (j.vs->bits) {
    case 1: attend_tq<KB, 1>(j); break;
    case 2: attend_tq<KB, 2>(j); break;
    case 3: attend_tq<KB, 3>(j); break;
    default: attend_tq<KB, 4>(j); break;
  }
}

template <int MB, int VB>
void attend_prod_t(const ProdAttnJob& j) {
  ProdSrc<MB> ks(*j.ks, j.kcodes, j.n);
  TqSrc<VB> vs(*j.vs, j.vcodes, j.n);
  const int P = layout_floats(j.vs->ng, W);
  attend_loop(ks, vs, j.t0, j.t1, j.qs, j.G, P, j.qstride, j.scale, j.softcap, j.m, j.l, j.acc);
}

template <int MB>
void attend_prod_k(const ProdAttnJob& j) {
  switch (j.vs->bits) {
    case 1: attend_prod_t<MB, 1>(j); break;
    case 2: attend_prod_t<MB, 2>(j); break;
    case 3: attend_prod_t<MB, 3>(j); break;
    default: attend_prod_t<MB, 4>(j); break;
  }
}

void attend_prod(const ProdAttnJob& j) {
  switch (j.ks->mse_bits) {
    case 0: attend_prod_k<0>(j); break;
    case 1: attend_prod_k<1>(j); break;
    case 2: attend_prod_k<2>(j); break;
    default: attend_prod_k<3>(j); break;
  }
}

// ---- RVQ (two-stage residual scalar VQ, RvqHeadState in kernels.h): a token is two TurboQuant-MSE-like
// code streams (stage 1 at 0, stage 2 at stage_bytes; each with its own codebook) and one fp16 norm.
// Keys: score = <Pi q, c1[codes1] + c2[codes2]> token-in-lane like TurboQuant-MSE keys; values: both
// stages' centroids summed, then accumulated with one weight.

/// The two streams of an RVQ block (S: the stream type); the first reads the norms.
template <class S>
struct RvqStreams {
  S s0, s1;
  RvqStreams(const RvqHeadState& x, const std::uint8_t* b, std::size_t n)
      : s0(x.stage[0], b, n), s1(x.stage[1], b + x.stage_bytes, n) {
    s1.block_bytes = n * (x.code_bytes + 2) - x.stage_bytes;  // s0's is the whole block already
    s1.scalars = false;
  }
  void stage(std::size_t t, int cnt) {
    s0.stage(t, cnt);
    s1.stage(t, cnt);
  }
  F norm_vec() const { return s0.norm_vec(); }
};

/// Group j (keys, token-in-lane) or group vector v (values) of both stages.
struct RvqGroups {
  I a, b;
};

/// RVQ keys. 1-bit: each stage scored through its own nibble tables (four coordinates per look-up);
/// 2..4 bits: one token-in-lane pass (tq_scores_block) whose code is c1[code1] + c2[code2], so both
/// stages share one broadcast-q FMA per head and coordinate.
template <int BITS>
struct RvqKeySrc : RvqStreams<std::conditional_t<BITS == 1, TqTabSrc<1>, TqSrc<BITS>>> {
  static constexpr bool kIsTq = true;       // scores come token-in-lane (attend_block)
  static constexpr bool kOwnScores = true;  // ... from score_block
  static constexpr bool kHasNorm = true;
  int ng;
  alignas(64) float part[16 * W];
  RvqKeySrc(const RvqHeadState& x, const std::uint8_t* b, std::size_t n)
      : RvqStreams<std::conditional_t<BITS == 1, TqTabSrc<1>, TqSrc<BITS>>>(x, b, n), ng(x.stage[0].ng) {
    this->s0.transpose = this->s1.transpose = true;
  }
  RvqGroups trow(int j) const { return {this->s0.trow(j), this->s1.trow(j)}; }
  template <int S>
  F code(const RvqGroups& g) const {
    return T::add(this->s0.template code<S>(g.a), this->s1.template code<S>(g.b));
  }
  /// out[h * W + i] = <q_h, c1[codes1_i] + c2[codes2_i]> (no norm).
  void score_block(const float* q, int G, int stride, float* out) {
    if constexpr (BITS == 1) {
      this->s0.score_block(q, G, stride, out);
      this->s1.score_block(q, G, stride, part);
      for (int h = 0; h < G; ++h) T::store(out + h * W, T::add(T::load(out + h * W), T::load(part + h * W)));
    } else {
      tq_scores_block(*this, q, G, stride, out);
    }
  }
};

/// RVQ values: one tq_value pass whose code is c1[code1] + c2[code2] (one FMA per head and coordinate).
template <int BITS>
struct RvqValSrc : RvqStreams<TqSrc<BITS>> {
  static constexpr bool kIsTq = true;
  static constexpr bool kHasNorm = true;
  int nv;
  RvqValSrc(const RvqHeadState& x, const std::uint8_t* b, std::size_t n)
      : RvqStreams<TqSrc<BITS>>(x, b, n), nv(this->s0.nv) {}
  [[gnu::always_inline]] RvqGroups group(int i, int v) const { return {this->s0.group(i, v), this->s1.group(i, v)}; }
  F weight(float p, int i, int v) const { return this->s0.weight(p, i, v); }
  template <int S>
  F code(const RvqGroups& g) const {
    return T::add(this->s0.template code<S>(g.a), this->s1.template code<S>(g.b));
  }
};

template <int KB, int VB>
void attend_rvq_t(const RvqAttnJob& j) {
  RvqKeySrc<KB> ks(*j.ks, j.kcodes, j.n);
  RvqValSrc<VB> vs(*j.vs, j.vcodes, j.n);
  const int P = layout_floats(j.vs->stage[0].ng, W);
  attend_loop(ks, vs, j.t0, j.t1, j.qp, j.G, P, j.ks->dim, j.scale, j.softcap, j.m, j.l, j.acc);
}

template <int KB>
void attend_rvq_k(const RvqAttnJob& j) {
  switch (j.vs->bits) {
    case 1: attend_rvq_t<KB, 1>(j); break;
    case 2: attend_rvq_t<KB, 2>(j); break;
    case 3: attend_rvq_t<KB, 3>(j); break;
    default: attend_rvq_t<KB, 4>(j); break;
  }
}

void attend_rvq(const RvqAttnJob& j) {
  switch (j.ks->bits) {
    case 1: attend_rvq_k<1>(j); break;
    case 2: attend_rvq_k<2>(j); break;
    case 3: attend_rvq_k<3>(j); break;
    default: attend_rvq_k<4>(j); break;
  }
}

// ---- KIVI at 1..4 bits (Liu et al., arXiv 2402.02750; KiviHeadState in kernels.h): x_hat = min + scale *
// code with integer codes read as a TurboQuant-MSE stream of the identity codebook. Keys (per channel,
// groups of `group` tokens): <q, x_hat_t> = <q * scale_g, code_t> + <q, min_g> for the token's group g,
// token-in-lane with the scaled query. Values (per token, groups of `group` channels): each lane's
// x_hat = min + scale * code from its channel group's pair, accumulated by tq_value (decoding first
// keeps the sum as accurate as the reference's: with sum p scale code and sum p min kept apart, their
// cancellation cost 1.09e-5 relative error on a near-zero output).

/// fp16 bits at p (little-endian) -> float (F16C).
inline float f16_at(const std::uint8_t* p) {
  return _cvtsh_ss(static_cast<unsigned short>(p[0] | (p[1] << 8)));
}

/// The group-scaled query of a KIVI key source (both widths' sources): for token group g of a block of
/// n tokens, qs [G][dim] = q_h * scale_g (per channel) and cst[h] = <q_h, min_g> (q: [G][stride]), so
/// <q_h, x_hat_t> = <qs_h, code_t> + cst[h] for the group's tokens; kept until another group is needed.
struct KiviKeyQuery {
  std::size_t gcur = static_cast<std::size_t>(-1);  // the token group whose query is in qs
  std::vector<float> qs;
  alignas(64) float cst[16];

  /// For each token group the tokens [t, t + cnt) touch (a block may straddle groups), in order: qs and
  /// cst for it, then fn(first, a, e), with [a, e) the block's tokens of the group relative to t and
  /// first true for the first group.
  template <class Fn>
  void each_group(const KiviHeadState& kx, const std::uint8_t* block, std::size_t n, std::size_t t, int cnt,
                  const float* q, int G, int stride, Fn fn) {
    const std::size_t gs = static_cast<std::size_t>(kx.group);
    const std::size_t g0 = t / gs, g1 = (t + cnt - 1) / gs;
    for (std::size_t g = g0; g <= g1; ++g) {
      if (g != gcur) {
        gcur = g;
        prepare(kx, block, n, g, q, G, stride);
      }
      const std::size_t a = g == g0 ? 0 : g * gs - t;
      fn(g == g0, a, std::min<std::size_t>(static_cast<std::size_t>(cnt), (g + 1) * gs - t));
    }
  }

 private:
  void prepare(const KiviHeadState& kx, const std::uint8_t* block, std::size_t n, std::size_t g, const float* q,
               int G, int stride) {
    const int d = kx.dim;
    qs.resize(static_cast<std::size_t>(G) * d);
    const std::uint8_t* pr = block + n * kx.row_bytes + g * static_cast<std::size_t>(d) * 4;
    alignas(64) float mn[kMaxDim], sc[kMaxDim];
    for (int j = 0; j < d; ++j) mn[j] = f16_at(pr + 4 * j), sc[j] = f16_at(pr + 4 * j + 2);
    for (int h = 0; h < G; ++h) {
      F c = T::zero();
      for (int k = 0; k < d; k += W) {
        const F qv = T::load(q + static_cast<std::size_t>(h) * stride + k);
        T::store(qs.data() + static_cast<std::size_t>(h) * d + k, T::mul(qv, T::load(sc + k)));
        c = T::fma(qv, T::load(mn + k), c);
      }
      cst[h] = T::hsum(c);
    }
  }
};

template <int BITS>
struct KiviKeySrc : TqSrc<BITS> {
  static constexpr bool kOwnScores = true;  // token-in-lane scores from score_block (no norm)
  const KiviHeadState* kx;
  std::size_t t = 0;
  int cnt = 0;
  KiviKeyQuery kq;
  alignas(64) float part[16 * W];
  KiviKeySrc(const KiviHeadState& x, const std::uint8_t* b, std::size_t n) : TqSrc<BITS>(x.codes, b, n), kx(&x) {
    this->block_bytes = n * x.row_bytes;  // loads stay inside the codes
    this->transpose = true;
    this->scalars = false;
  }
  void stage(std::size_t t_, int cnt_) {
    TqSrc<BITS>::stage(t_, cnt_);
    t = t_;
    cnt = cnt_;
  }
  F norm_vec() const { return T::set1(1.0f); }
  /// out[h * W + i] = <q_h, x_hat of token t + i> for i < cnt.
  void score_block(const float* q, int G, int stride, float* out) {
    kq.each_group(*kx, this->block, this->n, t, cnt, q, G, stride, [&](bool first, std::size_t a, std::size_t e) {
      float* dst = first ? out : part;
      tq_scores_block(*this, kq.qs.data(), G, kx->dim, dst);
      for (int h = 0; h < G; ++h) T::store(dst + h * W, T::add(T::load(dst + h * W), T::set1(kq.cst[h])));
      if (!first)
        for (int h = 0; h < G; ++h)
          for (std::size_t i = a; i < e; ++i) out[h * W + i] = part[h * W + i];
    });
  }
};

/// A KIVI value token's group vector with its lanes' scale and min (lane l: channel group of coordinates 8 l..).
struct KiviGroup {
  I g;
  F sc, mn;
};

template <int BITS>
struct KiviValSrc : TqSrc<BITS> {
  static constexpr bool kHasNorm = false;
  const KiviHeadState* vx;
  int npairs;                        // channel groups a token
  I sidx[kMaxNv], midx[kMaxNv];      // vector v, lane l: float index of its channel group's scale / min
  alignas(64) float pairs[TB * 16];  // token i: its (min, scale) pairs as floats
  KiviValSrc(const KiviHeadState& x, const std::uint8_t* b, std::size_t n)
      : TqSrc<BITS>(x.codes, b, n), vx(&x), npairs(x.dim / x.group) {
    this->block_bytes = n * x.row_bytes;
    this->scalars = false;
    alignas(64) std::int32_t is[W], im[W];
    for (int v = 0; v < this->nv; ++v) {
      for (int l = 0; l < W; ++l) {
        const int c = std::min(8 * (v * W + l) / x.group, npairs - 1);  // padding lanes: the last group
        im[l] = 2 * c;
        is[l] = 2 * c + 1;
      }
      sidx[v] = T::loadi(is);
      midx[v] = T::loadi(im);
    }
    std::fill(pairs, pairs + TB * 16, 0.0f);
  }
  void stage(std::size_t t, int cnt) {
    TqSrc<BITS>::stage(t, cnt);
    const std::uint8_t* pr = this->block + this->n * vx->row_bytes + t * static_cast<std::size_t>(npairs) * 4;
    for (int i = 0; i < cnt; ++i)
      for (int k = 0; k < 2 * npairs; ++k) pairs[i * 16 + k] = f16_at(pr + (static_cast<std::size_t>(i) * npairs * 2 + k) * 2);
  }
  F norm_vec() const { return T::set1(1.0f); }  // unused (kHasNorm = false); TqSrc's reads unset norms
  [[gnu::always_inline]] KiviGroup group(int i, int v) const {
    const float* o = pairs + i * 16;
    const F lo = T::load(o), hi = T::load(o + (W == 16 ? 0 : 8));
    return {TqSrc<BITS>::group(i, v), T::template lut<T::kNeedWide>(sidx[v], lo, hi),
            T::template lut<T::kNeedWide>(midx[v], lo, hi)};
  }
  /// x_hat of coordinate 8 l + S of lane l: min + scale * code (fp32, one rounding: close to the decode's).
  template <int S>
  F code(const KiviGroup& x) const {
    return T::fma(x.sc, TqSrc<BITS>::template code<S>(x.g), x.mn);
  }
};

// KIVI at 8 bits: a code byte is its integer, so the sources read W code bytes as W floats (from_u8)
// with coordinates in lanes, like the fp8 source: keys scored by dense_score_block against the group's
// scaled query (KiviKeyQuery; the group's <q, min> added to each token's first lane), values
// x_hat = min + scale * code (fp32 fma, one rounding, as KiviValSrc) accumulated by dense_value_block
// in natural order (the job's P is head_dim). Session 16's table: 8-bit KIVI through the codec-domain
// path was 0.54x the fp16 baseline at 32k tokens.

struct Kivi8KeySrc {
  static constexpr bool kIsTq = false, kHasNorm = false;
  static constexpr bool kOwnScores = true;  // dense partial sums per token (reduced by attend_block)
  const KiviHeadState* kx;
  const std::uint8_t* block;
  std::size_t n, t = 0;
  int cnt = 0;
  KiviKeyQuery kq;
  alignas(64) float part[16 * TB * W];
  Kivi8KeySrc(const KiviHeadState& x, const std::uint8_t* b, std::size_t n_) : kx(&x), block(b), n(n_) {}
  int vectors() const { return kx->dim / W; }
  void stage(std::size_t t_, int cnt_) { t = t_, cnt = cnt_; }
  F norm_vec() const { return T::set1(1.0f); }
  F get(int i, int k) const { return T::from_u8(block + (t + i) * kx->row_bytes + static_cast<std::size_t>(k) * W); }
  /// dots[(h TB + slot(i)) W ..]: lane partial sums of <q_h, x_hat of token t + i> (the dense layout).
  void score_block(const float* q, int G, int stride, float* dots) {
    kq.each_group(*kx, block, n, t, cnt, q, G, stride, [&](bool first, std::size_t a, std::size_t e) {
      float* dst = first ? dots : part;
      dense_score_block(*this, cnt, kq.qs.data(), G, kx->dim, dst);
      for (int h = 0; h < G; ++h)
        for (std::size_t i = a; i < e; ++i) {
          const std::size_t at = (static_cast<std::size_t>(h) * TB + slot(static_cast<int>(i))) * W;
          if (!first) std::memcpy(dots + at, part + at, sizeof(float) * W);
          dots[at] += kq.cst[h];
        }
    });
  }
};

struct Kivi8ValSrc {
  static constexpr bool kIsTq = false, kHasNorm = false;
  static constexpr int kMaxVec = kMaxDim / W;
  const KiviHeadState* vx;
  const std::uint8_t* block;
  std::size_t n, t = 0;
  int npairs;                           // channel groups a token (<= 8)
  I sidx[kMaxVec], midx[kMaxVec];       // vector k, lane l: float index of channel k W + l's scale / min
  alignas(64) float pairs[TB * 16];     // token i: its (min, scale) pairs as floats
  Kivi8ValSrc(const KiviHeadState& x, const std::uint8_t* b, std::size_t n_)
      : vx(&x), block(b), n(n_), npairs(x.dim / x.group) {
    alignas(64) std::int32_t is[W], im[W];
    for (int k = 0; k < x.dim / W; ++k) {
      for (int l = 0; l < W; ++l) {
        const int c = (k * W + l) / x.group;
        im[l] = 2 * c;
        is[l] = 2 * c + 1;
      }
      sidx[k] = T::loadi(is);
      midx[k] = T::loadi(im);
    }
    std::fill(pairs, pairs + TB * 16, 0.0f);
  }
  int vectors() const { return vx->dim / W; }
  void stage(std::size_t t0, int cnt) {
    t = t0;
    const std::uint8_t* pr = block + n * vx->row_bytes + t0 * static_cast<std::size_t>(npairs) * 4;
    for (int i = 0; i < cnt; ++i)
      for (int k = 0; k < 2 * npairs; ++k) pairs[i * 16 + k] = f16_at(pr + (static_cast<std::size_t>(i) * npairs * 2 + k) * 2);
  }
  F norm_vec() const { return T::set1(1.0f); }
  F get(int i, int k) const {
    const float* o = pairs + i * 16;
    const F lo = T::load(o), hi = T::load(o + (W == 16 ? 0 : 8));
    const F sc = T::template lut<T::kNeedWide>(sidx[k], lo, hi), mn = T::template lut<T::kNeedWide>(midx[k], lo, hi);
    return T::fma(sc, T::from_u8(block + (t + i) * vx->row_bytes + static_cast<std::size_t>(k) * W), mn);
  }
};

template <class KS, class VS>
void attend_kivi_t(const KiviAttnJob& j) {
  KS ks(*j.ks, j.kcodes, j.n);
  VS vs(*j.vs, j.vcodes, j.n);
  attend_loop(ks, vs, j.t0, j.t1, j.q, j.G, kivi_value_floats(*j.vs, W), j.ks->dim, j.scale, j.softcap, j.m, j.l, j.acc);
}

template <class KS>
void attend_kivi_k(const KiviAttnJob& j) {
  switch (j.vs->bits) {
    case 1: attend_kivi_t<KS, KiviValSrc<1>>(j); break;
    case 2: attend_kivi_t<KS, KiviValSrc<2>>(j); break;
    case 3: attend_kivi_t<KS, KiviValSrc<3>>(j); break;
    case 4: attend_kivi_t<KS, KiviValSrc<4>>(j); break;
    default: attend_kivi_t<KS, Kivi8ValSrc>(j); break;
  }
}

void attend_kivi(const KiviAttnJob& j) {
  switch (j.ks->bits) {
    case 1: attend_kivi_k<KiviKeySrc<1>>(j); break;
    case 2: attend_kivi_k<KiviKeySrc<2>>(j); break;
    case 3: attend_kivi_k<KiviKeySrc<3>>(j); break;
    case 4: attend_kivi_k<KiviKeySrc<4>>(j); break;
    default: attend_kivi_k<Kivi8KeySrc>(j); break;
  }
}

// ---- fp8 (OCP e4m3, per-token fp16 scale) and fp16 codec blocks (FloatAttnJob): DenseSrc's structure
// (dense_score_block / dense_value_block) on one head's contiguous block.

/// fp8 codec block: get(i, k) = e4m3 codes of token t + i, coordinates [k W, k W + W), times 2^-8
/// (T::from_e4m3); the norm is scale * 2^8, so score and value weights see x_hat exactly.
struct Fp8Src {
  static constexpr bool kIsTq = false;
  static constexpr bool kHasNorm = true;
  const std::uint8_t* block;
  std::size_t n, t = 0;
  int d;
  alignas(64) float scl[TB];
  Fp8Src(const std::uint8_t* b, std::size_t n_, int d_) : block(b), n(n_), d(d_) {}
  int vectors() const { return d / W; }
  void stage(std::size_t t0, int cnt) {
    t = t0;
    const std::uint8_t* sp = block + n * static_cast<std::size_t>(d) + 2 * t0;
    for (int i = 0; i < TB; ++i) scl[i] = i < cnt ? f16_at(sp + 2 * i) * 256.0f : 0.0f;
  }
  F norm_vec() const { return T::load(scl); }
  F get(int i, int k) const { return T::from_e4m3(block + (t + i) * static_cast<std::size_t>(d) + k * W); }
};

template <int KB, int VB>
void attend_float_t(const FloatAttnJob& j) {
  auto make = [&](auto tag, const std::uint8_t* codes) {
    if constexpr (decltype(tag)::value == 8)
      return Fp8Src(codes, j.n, j.dim);
    else
      return DenseSrc<true>(codes, static_cast<std::size_t>(j.dim), j.dim);
  };
  auto ks = make(std::integral_constant<int, KB>{}, j.kcodes);
  auto vs = make(std::integral_constant<int, VB>{}, j.vcodes);
  attend_loop(ks, vs, j.t0, j.t1, j.q, j.G, j.dim, j.dim, j.scale, j.softcap, j.m, j.l, j.acc);
}

void attend_float(const FloatAttnJob& j) {
  if (j.kbits == 8)
    j.vbits == 8 ? attend_float_t<8, 8>(j) : attend_float_t<8, 16>(j);
  else
    j.vbits == 8 ? attend_float_t<16, 8>(j) : attend_float_t<16, 16>(j);
}

/// A SplitAttnJob's key (transposed) or value source: a split source from the SplitHeadState, else a TqSrc.
template <class S>
constexpr bool kIsSplitSrc = requires { S::kSplitSrc; };

template <class KS, class VS>
void attend_split_t(const SplitAttnJob& j) {
  auto make = [&](auto* tag, const SplitHeadState* x, const TqState* st, const std::uint8_t* codes) {
    using S = std::remove_pointer_t<decltype(tag)>;
    if constexpr (kIsSplitSrc<S>)
      return S(*x, codes, j.n);
    else
      return S(*st, codes, j.n);
  };
  KS ks = make(static_cast<KS*>(nullptr), j.kx, j.ks, j.kcodes);
  VS vs = make(static_cast<VS*>(nullptr), j.vx, j.vs, j.vcodes);
  if constexpr (!kIsSplitSrc<KS>) ks.transpose = true;
  attend_loop(ks, vs, j.t0, j.t1, j.qs, j.G, j.P, j.qstride, j.scale, j.softcap, j.m, j.l, j.acc);
}

/// Values of a split job: split (BL = 1..3; packed or not, like split keys of the same head_dim) or
/// integer widths (1..4).
template <class KS, int Packed>
void attend_split_kv(const SplitAttnJob& j) {
  if (j.vx) {
    const bool packed = j.vx->packed(W);
    if constexpr (Packed != 0) {  // split keys: the same head_dim, so the same packing
      if (packed) {
        switch (j.vx->part[1].bits) {
          case 1: attend_split_t<KS, SplitPackedValSrc<1>>(j); break;
          case 2: attend_split_t<KS, SplitPackedValSrc<2>>(j); break;
          default: attend_split_t<KS, SplitPackedValSrc<3>>(j); break;
        }
        return;
      }
    }
    if constexpr (Packed != 1) {
      if (!packed) {
        switch (j.vx->part[1].bits) {
          case 1: attend_split_t<KS, SplitValSrc<1>>(j); break;
          case 2: attend_split_t<KS, SplitValSrc<2>>(j); break;
          default: attend_split_t<KS, SplitValSrc<3>>(j); break;
        }
      }
    }
  } else {
    switch (j.vs->bits) {
      case 1: attend_split_t<KS, TqSrc<1>>(j); break;
      case 2: attend_split_t<KS, TqSrc<2>>(j); break;
      case 3: attend_split_t<KS, TqSrc<3>>(j); break;
      default: attend_split_t<KS, TqSrc<4>>(j); break;
    }
  }
}

void attend_split(const SplitAttnJob& j) {
  if (j.kx && j.kx->packed(W)) {
    switch (j.kx->part[1].bits) {
      case 1: attend_split_kv<SplitPackedKeySrc<1>, 1>(j); break;
      case 2: attend_split_kv<SplitPackedKeySrc<2>, 1>(j); break;
      default: attend_split_kv<SplitPackedKeySrc<3>, 1>(j); break;
    }
  } else if (j.kx) {
    switch (j.kx->part[1].bits) {
      case 1: attend_split_kv<SplitKeySrc<1>, 0>(j); break;
      case 2: attend_split_kv<SplitKeySrc<2>, 0>(j); break;
      default: attend_split_kv<SplitKeySrc<3>, 0>(j); break;
    }
  } else {  // integer keys: values packed or not
    switch (j.ks->bits) {
      case 1: attend_split_kv<TqSrc<1>, 2>(j); break;
      case 2: attend_split_kv<TqSrc<2>, 2>(j); break;
      case 3: attend_split_kv<TqSrc<3>, 2>(j); break;
      default: attend_split_kv<TqSrc<4>, 2>(j); break;
    }
  }
}

void attend(const AttnJob& j) {
  switch (j.ks->bits) {
    case 1: attend_k<1>(j); break;
    case 2: attend_k<2>(j); break;
    case 3: attend_k<3>(j); break;
    default: attend_k<4>(j); break;
  }
}

/// Dense: token-major over all kv_heads of the job, so memory is read in order.
template <bool F16>
void attend_dense_t(const DenseJob& j) {
  using E = std::conditional_t<F16, std::uint16_t, float>;
  const E* kb = static_cast<const E*>(j.k);
  const E* vb = static_cast<const E*>(j.v);
  const int d = j.dim, G = j.G;
  alignas(64) float dots[16 * TB * W];
  alignas(64) float pw[16 * TB];
  std::vector<float> lvs(static_cast<std::size_t>(G) * j.kv_heads * W);
  attend_init(G * j.kv_heads, d, j.m, lvs.data(), j.acc);
  for (std::size_t t = j.t0; t < j.t1; t += TB) {
    const int cnt = static_cast<int>(std::min<std::size_t>(TB, j.t1 - t));
    // The next block's rows are one contiguous span per tensor; prefetch a
    // slice of it while serving each kv head of this one.
    const std::size_t span = static_cast<std::size_t>(TB) * j.stride * sizeof(E);
    const bool pf = t + 2 * TB <= j.t1;
    const char* nk = reinterpret_cast<const char*>(kb + (t + TB) * j.stride);
    const char* nv = reinterpret_cast<const char*>(vb + (t + TB) * j.stride);
    for (int g = 0; g < j.kv_heads; ++g) {
      if (pf)
        for (std::size_t b = span * g / j.kv_heads; b < span * (g + 1) / j.kv_heads; b += 64) {
          _mm_prefetch(nk + b, _MM_HINT_T1);
          _mm_prefetch(nv + b, _MM_HINT_T1);
        }
      DenseSrc<F16> ks(kb + static_cast<std::size_t>(g) * d, j.stride, d), vs(vb + static_cast<std::size_t>(g) * d, j.stride, d);
      const std::size_t h = static_cast<std::size_t>(g) * G;
      attend_block(ks, vs, t, cnt, j.q + h * d, G, d, d, j.scale, j.softcap, j.m + h, lvs.data() + h * W,
                   j.acc + h * d, dots, pw);
    }
  }
  attend_finish(G * j.kv_heads, lvs.data(), j.l);
}

void attend_dense(const DenseJob& j) {
  if (j.f16)
    attend_dense_t<true>(j);
  else
    attend_dense_t<false>(j);
}

template <int BITS>
void scores_impl(const TqState& st, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
                 const float* qp, float* out) {
  TqSrc<BITS> ks(st, block, n);
  ks.transpose = true;
  alignas(64) float dots[TB];
  for (std::size_t t = t0; t < t1; t += TB) {
    const int cnt = static_cast<int>(std::min<std::size_t>(TB, t1 - t));
    ks.stage(t, cnt);
    tq_scores_block(ks, qp, 1, st.dim, dots);
    alignas(64) float tmp[TB];
    T::store(tmp, T::mul(T::load(dots), ks.norm_vec()));
    std::memcpy(out + (t - t0), tmp, sizeof(float) * static_cast<std::size_t>(cnt));
  }
}

void scores(const TqState& st, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
            const float* qp, float* out) {
  switch (st.bits) {
    case 1: scores_impl<1>(st, block, n, t0, t1, qp, out); break;
    case 2: scores_impl<2>(st, block, n, t0, t1, qp, out); break;
    case 3: scores_impl<3>(st, block, n, t0, t1, qp, out); break;
    default: scores_impl<4>(st, block, n, t0, t1, qp, out); break;
  }
}

std::uint64_t stream(const std::uint8_t* data, std::size_t bytes) { return T::stream(data, bytes); }

double fma_chains(std::uint64_t iters, float x, float y) {
  F a[kFmaChains];
  for (int j = 0; j < kFmaChains; ++j) a[j] = T::zero();
  const F xv = T::set1(x), yv = T::set1(y);
  for (std::uint64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kFmaChains; ++j) a[j] = T::fma(a[j], xv, yv);
  }
  alignas(64) float lanes[W];
  double sum = 0;
  for (int j = 0; j < kFmaChains; ++j) {
    T::store(lanes, a[j]);
    for (int l = 0; l < W; ++l) sum += lanes[l];
  }
  return sum;
}

// ---------------------------------------------------------------- generic codec-domain attention

void dots(const float* q, std::size_t qstride, int G, const float* y, int cnt, int dim, float* out) {
  const int dv = dim / W * W;
  int t0 = 0;
  if (dv == dim) {
    // Blocks of W tokens: W accumulators in registers (one q load per W FMAs), then one transpose-reduce
    // (T::reduce_tokens) gives the W sums in one vector.
    alignas(64) float part[W * W];
    for (; t0 + W <= cnt; t0 += W) {
      const float* yb = y + static_cast<std::size_t>(t0) * dim;
      for (int h = 0; h < G; ++h) {
        const float* qh = q + h * qstride;
        F a[W];
        for (int t = 0; t < W; ++t) a[t] = T::zero();
        for (int i = 0; i < dim; i += W) {
          const F qv = T::load(qh + i);
          for (int t = 0; t < W; ++t) a[t] = T::fma(qv, T::load(yb + static_cast<std::size_t>(t) * dim + i), a[t]);
        }
        for (int t = 0; t < W; ++t) T::store(part + T::slot(t) * W, a[t]);
        T::store(out + static_cast<std::size_t>(h) * cnt + t0, T::reduce_tokens(part));
      }
    }
  }
  for (int t = t0; t < cnt; ++t) {
    const float* yt = y + static_cast<std::size_t>(t) * dim;
    for (int h0 = 0; h0 < G; h0 += 4) {
      const int hc = std::min(4, G - h0);
      F a[4] = {T::zero(), T::zero(), T::zero(), T::zero()};
      for (int i = 0; i < dv; i += W) {
        const F yv = T::load(yt + i);
        for (int h = 0; h < hc; ++h) a[h] = T::fma(T::load(q + (h0 + h) * qstride + i), yv, a[h]);
      }
      for (int h = 0; h < hc; ++h) {
        float s = T::hsum(a[h]);
        for (int i = dv; i < dim; ++i) s += q[(h0 + h) * qstride + i] * yt[i];
        out[static_cast<std::size_t>(h0 + h) * cnt + t] = s;
      }
    }
  }
}

void gemm_acc(const float* w, int G, const float* y, int cnt, int dim, float* acc, std::size_t astride) {
  const int dv = dim / W * W;
  for (int h0 = 0; h0 < G; h0 += 4) {
    const int hc = std::min(4, G - h0);
    for (int i = 0; i < dv; i += W) {
      F a[4];
      for (int h = 0; h < hc; ++h) a[h] = T::load(acc + (h0 + h) * astride + i);
      for (int t = 0; t < cnt; ++t) {
        const F yv = T::load(y + static_cast<std::size_t>(t) * dim + i);
        for (int h = 0; h < hc; ++h) a[h] = T::fma(T::set1(w[(h0 + h) * static_cast<std::size_t>(cnt) + t]), yv, a[h]);
      }
      for (int h = 0; h < hc; ++h) T::store(acc + (h0 + h) * astride + i, a[h]);
    }
    for (int i = dv; i < dim; ++i)
      for (int h = 0; h < hc; ++h) {
        float s = acc[(h0 + h) * astride + i];
        for (int t = 0; t < cnt; ++t) s += w[(h0 + h) * static_cast<std::size_t>(cnt) + t] * y[static_cast<std::size_t>(t) * dim + i];
        acc[(h0 + h) * astride + i] = s;
      }
  }
}

void softmax_block(float* s, int G, int cnt, float scale, float* m, float* l, float* acc, std::size_t accn,
                   std::size_t astride) {
  const F sv = T::set1(scale);
  const int cv = cnt / W * W;
  for (int h = 0; h < G; ++h) {
    float* sh = s + static_cast<std::size_t>(h) * cnt;
    float mx = m[h];
    if (cv > 0) {
      F mv = T::set1(-INFINITY);
      for (int i = 0; i < cv; i += W) {
        const F x = T::mul(T::load(sh + i), sv);
        T::store(sh + i, x);
        mv = T::max(mv, x);
      }
      mx = std::max(mx, T::hmax(mv));
    }
    for (int i = cv; i < cnt; ++i) mx = std::max(mx, sh[i] = sh[i] * scale);
    if (mx != m[h]) {
      const float f = m[h] == -INFINITY ? 0.0f : std::exp(m[h] - mx);
      l[h] *= f;
      float* a = acc + static_cast<std::size_t>(h) * astride;
      const std::size_t av = accn / W * W;
      for (std::size_t i = 0; i < av; i += W) T::store(a + i, T::mul(T::load(a + i), T::set1(f)));
      for (std::size_t i = av; i < accn; ++i) a[i] *= f;
      m[h] = mx;
    }
    const F mv = T::set1(mx);
    F sum = T::zero();
    for (int i = 0; i < cv; i += W) {
      const F p = T::exp(T::sub(T::load(sh + i), mv));
      T::store(sh + i, p);
      sum = T::add(sum, p);
    }
    float ls = cv > 0 ? T::hsum(sum) : 0.0f;
    for (int i = cv; i < cnt; ++i) ls += (sh[i] = std::exp(sh[i] - mx));
    l[h] += ls;
  }
}

/// This ISA's kernel table (kernels.h).
const Kernels& table() {
  static const Kernels k = {W, encode, convert, decode, scores, attend, attend_dense, stream, dots, gemm_acc, softmax_block, attend_prod, attend_split, attend_rvq, attend_kivi, attend_float, fma_chains};
  return k;
}

#endif  // TURBOKV_KERNELS_SOURCES_ONLY

}  // namespace KNS
}  // namespace turbokv::cpu::detail
