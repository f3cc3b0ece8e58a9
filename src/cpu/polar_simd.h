// PolarQuant kernels (src/ref/polar.cpp; Han et al., arXiv 2502.02617) over
// the traits of rvq_simd.h; stamped out by polar_avx2.cpp and polar_avx512.cpp.
// Never include from baseline files.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "polar_internal.h"
#include "rvq_simd.h"
#include "turbokv/pack.h"

namespace turbokv::cpu::detail::vq {
namespace {

template <class V, int B1, int B2>
void polar_encode(const PolarState& st, const float* x, std::size_t count, std::uint8_t* codes,
                  std::uint8_t* radii16) {
  const int d = st.dim, k1 = 1 << B1;
  alignas(64) float y[kMaxDim];
  double r[kMaxDim / 2], next[kMaxDim / 2];
  for (std::size_t t = 0; t < count; ++t) {
    std::uint8_t* tc = codes + t * st.code_bytes;
    rotate_forward<V>(st.rot, x + t * static_cast<std::size_t>(d), y);
    // The polar transform: the reference's fp64 hypot / atan2 calls, in its order,
    // so the angle cells and radii are the reference's.
    for (int i = 0; i < d / 2; ++i) {
      const double a0 = y[2 * i], a1 = y[2 * i + 1];
      r[i] = std::hypot(a0, a1);
      double psi = std::atan2(a1, a0);
      if (psi < 0) psi += 2 * M_PI;
      int code = static_cast<int>(psi / (2 * M_PI) * k1);
      if (code >= k1) code = k1 - 1;
      put_code(tc, static_cast<std::size_t>(i), B1, static_cast<std::uint32_t>(code));
    }
    int off = 0;
    for (int l = 2; l <= 4; ++l) {
      const int cnt = d >> l;
      const ScalarCodebook& cb = *st.cb[l - 1];
      for (int i = 0; i < cnt; ++i) {
        const double a0 = r[2 * i], a1 = r[2 * i + 1];
        next[i] = std::hypot(a0, a1);
        const float psi = static_cast<float>(std::atan2(a1, a0));
        put_code(tc + st.l1_bytes, static_cast<std::size_t>(off + i), B2, cb.quantize(psi));
      }
      off += cnt;
      std::copy(next, next + cnt, r);
    }
    std::uint8_t* rad = radii16 + t * static_cast<std::size_t>(d / 16) * 2;
    for (int i = 0; i < d / 16; ++i) store_half(rad + 2 * i, static_cast<float>(r[i]));
  }
}

/// One level's step on W angles: (r cos a, r sin a) interleaved into lo, hi (the reference's fp32
/// products; cs / sn: the level's 16-entry cosine and sine tables).
template <class V>
inline void polar_pairs(typename V::F r, typename V::I a, const float* cs, const float* sn, typename V::F& lo,
                        typename V::F& hi) {
  V::interleave(V::mul(r, V::lut16(a, cs)), V::mul(r, V::lut16(a, sn)), lo, hi);
}

/// Per-call scratch of the reconstruction (padding lanes stay zero).
struct PolarScratch {
  alignas(64) std::uint8_t tc[kMaxDim + 64] = {};
  alignas(64) std::uint8_t a1[kMaxDim / 2 + 64] = {};
  alignas(64) std::uint8_t ah[kMaxDim / 2 + 64] = {};
  alignas(64) float r[kMaxDim / 2 + 32] = {};
  alignas(64) float nx[kMaxDim / 2 + 32] = {};
  alignas(64) float y[kMaxDim + 64] = {};
};

/// y_hat[d] of one token in the rotated domain, with the reference's fp32
/// products r * cos / r * sin level by level, every level in vectors of W angles:
/// two 16-entry look-ups, two products, an interleave (levels 4..2 were scalar
/// loops until session 16). A level's last vector may run past its cnt angles:
/// those lanes read the next level's codes and stale radii and write past 2 cnt
/// outputs, which no later level reads (the buffers are padded by 32 floats).
template <class V, int B1, int B2>
inline void polar_reconstruct(const PolarState& st, const std::uint8_t* tcodes, const std::uint8_t* rad,
                              PolarScratch& s) {
  constexpr int W = V::W;
  const int d = st.dim;
  std::memcpy(s.tc, tcodes, st.code_bytes);
  unpack_groups<B1>(s.tc, d / 2, s.a1);
  unpack_groups<B2>(s.tc + st.l1_bytes, st.n_hi, s.ah);
  float* r = s.r;
  float* nx = s.nx;
  for (int i = 0; i < d / 16; ++i) r[i] = norm16(rad + 2 * i);
  for (int l = 4; l >= 2; --l) {
    const int cnt = d >> l;
    int off = 0;
    for (int k = 2; k < l; ++k) off += d >> k;
    const float* cs = st.cosh[l - 1];
    const float* sn = st.sinh[l - 1];
    for (int i = 0; i < cnt; i += W) {
      const auto a = V::load_u8(s.ah + off + i);
      const auto rv = V::load(r + i);
      typename V::F lo, hi;
      polar_pairs<V>(rv, a, cs, sn, lo, hi);
      V::store(nx + 2 * i, lo);
      V::store(nx + 2 * i + W, hi);
    }
    std::swap(r, nx);
  }
  // r: the d/2 level-1 radii (zero beyond d/2: the level-1 vectors may run past it).
  for (int i = 0; i < d / 2; i += W) {
    const auto a = V::load_u8(s.a1 + i);
    const auto rv = V::load(r + i);
    typename V::F lo, hi;
    polar_pairs<V>(rv, a, st.cos1, st.sin1, lo, hi);
    V::store(s.y + 2 * i, lo);
    V::store(s.y + 2 * i + W, hi);
  }
}

/// One level of polar_reconstruct_d: the radii r (NIN vectors; with fewer than W angles, one partial
/// vector whose extra lanes only reach lanes no later level reads) times the cosines and sines of the
/// level's codes at codes[0 ..), interleaved into out (2 NIN vectors).
template <class V, int NIN>
inline void polar_level(const typename V::F* r, const std::uint8_t* codes, const float* cs, const float* sn,
                        typename V::F* out) {
  for (int i = 0; i < NIN; ++i) polar_pairs<V>(r[i], V::load_u8(codes + i * V::W), cs, sn, out[2 * i], out[2 * i + 1]);
}

/// polar_reconstruct for a head_dim D of 64, 128 or 256 known at compile time, into y[D]: the same
/// products (bit-exact), with every level's radii in registers (no scratch round trip between levels),
/// the code bytes copied by a fixed-size memcpy (no library call) and the level-4 radii converted by
/// F16C (exact, like half_to_float) instead of one software conversion each. polar_decode_domain, the
/// codec-domain path's reconstruction (about 80% of PolarQuant's decode attention by a perf profile,
/// session 17), takes it.
template <class V, int B1, int B2, int D>
inline void polar_reconstruct_d(const PolarState& st, const std::uint8_t* tcodes, const std::uint8_t* rad,
                                PolarScratch& s, float* y) {
  using F = typename V::F;
  constexpr int W = V::W;
  constexpr int kL1 = D / 2 * B1 / 8;  // packed_bytes(D / 2, B1): D / 2 B1 is a multiple of 8
  constexpr int kNhi = 7 * D / 16;
  constexpr int kBytes = kL1 + (kNhi * B2 + 7) / 8;
  static_assert(D % 64 == 0 && D <= kMaxDim, "head_dim");
  auto nin = [](int cnt) { return cnt < W ? 1 : cnt / W; };
  std::memcpy(s.tc, tcodes, kBytes);
  unpack_groups<B1>(s.tc, D / 2, s.a1);
  unpack_groups<B2>(s.tc + kL1, kNhi, s.ah);
  for (int i = 0; i < D / 16; i += 4)
    _mm_store_ps(s.r + i, _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rad + 2 * i))));
  // Level l reads nin(D >> l) vectors of the level above's 2 nin(D >> (l + 1)) outputs.
  F r4[nin(D >> 4)], r3[2 * nin(D >> 4)], r2[2 * nin(D >> 3)], r1[2 * nin(D >> 2)];
  for (int i = 0; i < nin(D >> 4); ++i) r4[i] = V::load(s.r + i * W);
  polar_level<V, nin(D >> 4)>(r4, s.ah + D / 4 + D / 8, st.cosh[3], st.sinh[3], r3);
  polar_level<V, nin(D >> 3)>(r3, s.ah + D / 4, st.cosh[2], st.sinh[2], r2);
  polar_level<V, nin(D >> 2)>(r2, s.ah, st.cosh[1], st.sinh[1], r1);
  F out[2 * (D / 2 / W)];
  polar_level<V, D / 2 / W>(r1, s.a1, st.cos1, st.sin1, out);
  for (int k = 0; k < D / W; ++k) V::store(y + k * W, out[k]);
}

/// Token t's y_hat into y[d] (y may be s.y): polar_reconstruct_d where head_dim is 64, 128 or 256,
/// else polar_reconstruct (and a copy unless y is s.y). The same floats either way.
template <class V, int B1, int B2>
inline void polar_token(const PolarState& st, const std::uint8_t* tcodes, const std::uint8_t* rad, PolarScratch& s,
                        float* y) {
  switch (st.dim) {
    case 64: return polar_reconstruct_d<V, B1, B2, 64>(st, tcodes, rad, s, y);
    case 128: return polar_reconstruct_d<V, B1, B2, 128>(st, tcodes, rad, s, y);
    case 256: return polar_reconstruct_d<V, B1, B2, 256>(st, tcodes, rad, s, y);
    default:
      polar_reconstruct<V, B1, B2>(st, tcodes, rad, s);
      if (y != s.y) std::memcpy(y, s.y, sizeof(float) * static_cast<std::size_t>(st.dim));
  }
}

template <class V, int B1, int B2>
void polar_decode(const PolarState& st, const std::uint8_t* codes, const std::uint8_t* radii16, std::size_t count,
                  float* out) {
  const int d = st.dim;
  PolarScratch s;
  for (std::size_t t = 0; t < count; ++t) {
    polar_token<V, B1, B2>(st, codes + t * st.code_bytes, radii16 + t * static_cast<std::size_t>(d / 16) * 2, s, s.y);
    rotate_inverse<V>(st.rot, s.y, out + t * static_cast<std::size_t>(d));
  }
}

template <class V, int B1, int B2>
void polar_scores(const PolarState& st, const float* qr, const std::uint8_t* codes, const std::uint8_t* radii16,
                  std::size_t count, float* out) {
  constexpr int W = V::W;
  const int d = st.dim;
  PolarScratch s;
  for (std::size_t t = 0; t < count; ++t) {
    polar_token<V, B1, B2>(st, codes + t * st.code_bytes, radii16 + t * static_cast<std::size_t>(d / 16) * 2, s, s.y);
    auto acc = V::zero();
    for (int k = 0; k < d; k += W) acc = V::fma(V::load(qr + k), V::load(s.y + k), acc);
    out[t] = V::hsum(acc);
  }
}

template <class V, int B1, int B2>
void polar_accumulate(const PolarState& st, const std::uint8_t* codes, const std::uint8_t* radii16, std::size_t count,
                      const float* w, float* acc) {
  constexpr int W = V::W;
  const int d = st.dim;
  PolarScratch s;
  for (std::size_t t = 0; t < count; ++t) {
    if (w[t] == 0.0f) continue;
    polar_token<V, B1, B2>(st, codes + t * st.code_bytes, radii16 + t * static_cast<std::size_t>(d / 16) * 2, s, s.y);
    const auto wv = V::set1(w[t]);
    for (int k = 0; k < d; k += W) V::store(acc + k, V::fma(wv, V::load(s.y + k), V::load(acc + k)));
  }
}

template <class V, int B1, int B2>
void polar_decode_domain(const PolarState& st, const std::uint8_t* codes, const std::uint8_t* radii16,
                         std::size_t count, float* y) {
  const int d = st.dim;
  PolarScratch s;
  for (std::size_t t = 0; t < count; ++t)
    polar_token<V, B1, B2>(st, codes + t * st.code_bytes, radii16 + t * static_cast<std::size_t>(d / 16) * 2, s,
                           y + t * static_cast<std::size_t>(d));
}

/// b1 -> b2 = max(1, b1 - 2): 2 -> 1, 3 -> 1, 4 -> 2.
template <class V>
PolarKernels polar_table(int b1) {
  switch (b1) {
    case 2: return {polar_encode<V, 2, 1>, polar_decode<V, 2, 1>, polar_scores<V, 2, 1>, polar_accumulate<V, 2, 1>,
                   polar_decode_domain<V, 2, 1>};
    case 3: return {polar_encode<V, 3, 1>, polar_decode<V, 3, 1>, polar_scores<V, 3, 1>, polar_accumulate<V, 3, 1>,
                   polar_decode_domain<V, 3, 1>};
    default: return {polar_encode<V, 4, 2>, polar_decode<V, 4, 2>, polar_scores<V, 4, 2>, polar_accumulate<V, 4, 2>,
                   polar_decode_domain<V, 4, 2>};
  }
}

}  // namespace
}  // namespace turbokv::cpu::detail::vq
