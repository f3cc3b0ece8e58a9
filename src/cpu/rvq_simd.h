// SIMD building blocks shared by the RVQ, PVQ and PolarQuant kernels, written
// once over a vector-traits class and stamped out per ISA: the ISA files
// (src/cpu/{rvq,pvq,polar}_{avx2,avx512}.cpp) include this header under their
// own compile flags. Never include it from baseline files. Everything is in
// an unnamed namespace so that no inline function compiled with AVX-512 flags
// can be picked by the linker for an AVX2 caller.
//
// Traits V (VAvx2: W = 8, VAvx512: W = 16): F/I vector types, load/store,
// add/sub/mul (the format's separately rounded ops) and fma (scores and
// accumulation only), lut16 (16-entry table look-up by 32-bit index), quantize_b<B>
// (number of the 2^B - 1 fp32 boundaries strictly below the value), u8 <-> 32-bit code
// conversion, fwht_lane (a Hadamard butterfly stage inside one register),
// gather, hsum.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "byte_groups.h"
#include "rvq_internal.h"
#include "turbokv/formats.h"
#include "turbokv/half.h"

namespace turbokv::cpu::detail::vq {
namespace {

struct VAvx2 {
  static constexpr int W = 8;
  using F = __m256;
  using I = __m256i;
  static F zero() { return _mm256_setzero_ps(); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static float hsum(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
  }
  static float hmin(F v) {
    __m128 s = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_min_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_min_ss(s, _mm_shuffle_ps(s, s, 1)));
  }
  /// Bit i set when lane i of a equals b.
  static unsigned eq_mask(F a, F b) {
    return static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_EQ_OQ)));
  }
  /// W codes from W bytes.
  static I load_u8(const std::uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  /// W codes from the low W bytes of b.
  static I u8_to_i(__m128i b) { return _mm256_cvtepu8_epi32(b); }
  static void store_u8(std::uint8_t* p, I c) {
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(w, w));
  }
  static I addi(I a, I b) { return _mm256_add_epi32(a, b); }
  static I loadi(const std::int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  /// tab[idx] for idx in 0..15 (tab: 16 floats).
  static F lut16(I idx, const float* tab) {
    const F a = _mm256_permutevar8x32_ps(_mm256_loadu_ps(tab), idx);
    const F b = _mm256_permutevar8x32_ps(_mm256_loadu_ps(tab + 8), idx);
    const __m256 hi = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28));  // bit 3 -> sign bit
    return _mm256_blendv_ps(a, b, hi);
  }
  /// Number of bnd[0..nb) strictly below each lane.
  static I quantize(F v, const float* bnd, int nb) {
    I c = _mm256_setzero_si256();
    for (int j = 0; j < nb; ++j)
      c = _mm256_sub_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(v, _mm256_set1_ps(bnd[j]), _CMP_GT_OQ)));
    return c;
  }
  /// quantize at width B (nb = 2^B - 1 sorted boundaries).
  template <int B>
  static I quantize_b(F v, const float* bnd) { return quantize(v, bnd, (1 << B) - 1); }
  static F gather(const float* base, I idx) { return _mm256_i32gather_ps(base, idx, 4); }
  /// One butterfly stage of distance h < W inside the register: lanes without bit h get a + b, with it a - b.
  static F fwht_lane(F v, int h) {
    F p;
    switch (h) {
      case 1: p = _mm256_permute_ps(v, 0xB1); return _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xAA);
      case 2: p = _mm256_permute_ps(v, 0x4E); return _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xCC);
      default: p = _mm256_permute2f128_ps(v, v, 1); return _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xF0);
    }
  }
  /// (a0 b0 a1 b1 ...) from a and b: lo gets lanes 0..W/2-1, hi the rest.
  static void interleave(F a, F b, F& lo, F& hi) {
    const F t0 = _mm256_unpacklo_ps(a, b), t1 = _mm256_unpackhi_ps(a, b);
    lo = _mm256_permute2f128_ps(t0, t1, 0x20);
    hi = _mm256_permute2f128_ps(t0, t1, 0x31);
  }
};

#ifdef __AVX512F__
struct VAvx512 {
  static constexpr int W = 16;
  using F = __m512;
  using I = __m512i;
  static F zero() { return _mm512_setzero_ps(); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static float hsum(F v) { return _mm512_reduce_add_ps(v); }
  static float hmin(F v) { return _mm512_reduce_min_ps(v); }
  static unsigned eq_mask(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static I load_u8(const std::uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I u8_to_i(__m128i b) { return _mm512_cvtepu8_epi32(b); }
  static void store_u8(std::uint8_t* p, I c) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(c)); }
  static I addi(I a, I b) { return _mm512_add_epi32(a, b); }
  static I loadi(const std::int32_t* p) { return _mm512_loadu_si512(p); }
  static F lut16(I idx, const float* tab) { return _mm512_permutexvar_ps(idx, _mm512_loadu_ps(tab)); }
  /// The number of the nb = 2^B - 1 sorted boundaries bnd[0..nb) strictly below each lane (bnd: 16
  /// floats), by binary search: B compare steps with the boundary picked in-register (vpermps) instead
  /// of 2^B - 1 compares (session 15).
  template <int B>
  static I quantize_b(F v, const float* bnd) {
    const F b = _mm512_loadu_ps(bnd);
    I c = _mm512_setzero_si512();
    for (int step = 1 << (B - 1); step >= 1; step >>= 1) {
      const F bv = _mm512_permutexvar_ps(_mm512_add_epi32(c, _mm512_set1_epi32(step - 1)), b);
      c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(v, bv, _CMP_GT_OQ), c, _mm512_set1_epi32(step));
    }
    return c;
  }
  static F gather(const float* base, I idx) { return _mm512_i32gather_ps(idx, base, 4); }
  static F fwht_lane(F v, int h) {
    F p;
    __mmask16 m;
    switch (h) {
      case 1: p = _mm512_permute_ps(v, 0xB1); m = 0xAAAA; break;
      case 2: p = _mm512_permute_ps(v, 0x4E); m = 0xCCCC; break;
      case 4: p = _mm512_shuffle_f32x4(v, v, 0xB1); m = 0xF0F0; break;
      default: p = _mm512_shuffle_f32x4(v, v, 0x4E); m = 0xFF00; break;
    }
    return _mm512_mask_blend_ps(m, _mm512_add_ps(v, p), _mm512_sub_ps(p, v));
  }
  static void interleave(F a, F b, F& lo, F& hi) {
    const I il = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const I ih = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    lo = _mm512_permutex2var_ps(a, il, b);
    hi = _mm512_permutex2var_ps(a, ih, b);
  }
};
#endif

/// The format's sum of squares (turbokv/formats.h: 8 interleaved lanes, then
/// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))); n a multiple of 8.
inline float sumsq8(const float* x, int n) {
  __m256 a = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    a = _mm256_add_ps(a, _mm256_mul_ps(v, v));
  }
  alignas(32) float l[8];
  _mm256_store_ps(l, a);
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

template <class V>
inline void fwht(float* y, int d) {
  constexpr int W = V::W;
  for (int h = 1; h < d; h <<= 1) {
    if (h < W) {
      for (int k = 0; k < d; k += W) V::store(y + k, V::fwht_lane(V::load(y + k), h));
    } else {
      for (int i = 0; i < d; i += 2 * h)
        for (int j = i; j < i + h; j += W) {
          const auto a = V::load(y + j), b = V::load(y + j + h);
          V::store(y + j, V::add(a, b));
          V::store(y + j + h, V::sub(a, b));
        }
    }
  }
}

/// y = Pi x (fp32, bit-exact to Rotation::forward). x, y: [d], no aliasing.
template <class V>
inline void rotate_forward(const RotPlan& r, const float* x, float* y) {
  constexpr int W = V::W;
  const int d = r.dim;
  if (r.kind == RotationKind::kHadamard) {
    for (int k = 0; k < d; k += W) V::store(y + k, V::mul(V::load(x + k), V::load(r.signs.data() + k)));
    fwht<V>(y, d);
    const auto sc = V::set1(r.scale);
    for (int k = 0; k < d; k += W) V::store(y + k, V::mul(V::load(y + k), sc));
  } else if (r.kind == RotationKind::kHaar) {
    for (int k = 0; k < d; k += W) V::store(y + k, V::zero());
    for (int j = 0; j < d; ++j) {
      const float* col = r.mat_t.data() + static_cast<std::size_t>(j) * d;
      const auto xj = V::set1(x[j]);
      for (int k = 0; k < d; k += W) V::store(y + k, V::add(V::load(y + k), V::mul(V::load(col + k), xj)));
    }
  } else {
    std::memcpy(y, x, sizeof(float) * static_cast<std::size_t>(d));
  }
}

/// x = Pi^T y (fp32, bit-exact to Rotation::inverse); y is clobbered (Hadamard works in place).
template <class V>
inline void rotate_inverse(const RotPlan& r, float* y, float* x) {
  constexpr int W = V::W;
  const int d = r.dim;
  if (r.kind == RotationKind::kHadamard) {
    fwht<V>(y, d);
    for (int k = 0; k < d; k += W) V::store(x + k, V::mul(V::load(y + k), V::load(r.inv_scale.data() + k)));
  } else if (r.kind == RotationKind::kHaar) {
    for (int k = 0; k < d; k += W) V::store(x + k, V::zero());
    for (int i = 0; i < d; ++i) {
      const float* row = r.mat.data() + static_cast<std::size_t>(i) * d;
      const auto yi = V::set1(y[i]);
      for (int k = 0; k < d; k += W) V::store(x + k, V::add(V::load(x + k), V::mul(V::load(row + k), yi)));
    }
  } else {
    std::memcpy(x, y, sizeof(float) * static_cast<std::size_t>(d));
  }
}

inline float norm16(const std::uint8_t* p) { return half_to_float(static_cast<std::uint16_t>(p[0] | (p[1] << 8))); }

// ---------------------------------------------------------------- RVQ kernels

/// Codes k .. k + W - 1 (k a multiple of W) of a B-bit LSB-first stream, as
/// 32-bit lanes, unpacked in registers (no byte buffer: a 16-byte reload of two
/// 8-byte stores would miss store forwarding).
template <class V, int B>
inline typename V::I stream_codes(const std::uint8_t* packed, int k) {
  const std::uint8_t* p = packed + k / 8 * B;
  const std::uint64_t lo = _pdep_u64(load_le<B>(p), kByteMask[B]);
  if constexpr (V::W == 16) {
    const std::uint64_t hi = _pdep_u64(load_le<B>(p + B), kByteMask[B]);
    return V::u8_to_i(_mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)));
  } else {
    return V::u8_to_i(_mm_cvtsi64_si128(static_cast<long long>(lo)));
  }
}

/// Both stages' codes of one token -> one byte each (cb1, cb2: [d]).
template <int B>
inline void rvq_unpack(const RvqState& st, const std::uint8_t* tc, std::uint8_t* cb1, std::uint8_t* cb2) {
  unpack_groups<B>(tc, st.dim, cb1);
  unpack_groups<B>(tc + st.stage_bytes, st.dim, cb2);
}

template <class V, int B>
void rvq_encode(const RvqState& st, const float* x, std::size_t count, std::uint8_t* codes, float* norms) {
  constexpr int W = V::W;
  const int d = st.dim;
  alignas(64) float y[kMaxDim];
  alignas(64) std::uint8_t cb1[kMaxDim + 16], cb2[kMaxDim + 16];
  for (std::size_t t = 0; t < count; ++t) {
    const float* xt = x + t * static_cast<std::size_t>(d);
    rotate_forward<V>(st.rot, xt, y);
    const float norm = std::sqrt(sumsq8(xt, d));
    const auto inv = V::set1(norm > 0 ? 1.0f / norm : 0.0f);
    for (int k = 0; k < d; k += W) {
      const auto u = V::mul(V::load(y + k), inv);
      const auto c1 = V::template quantize_b<B>(u, st.bnd1);
      const auto r = V::sub(u, V::lut16(c1, st.c1));
      V::store_u8(cb1 + k, c1);
      V::store_u8(cb2 + k, V::template quantize_b<B>(r, st.bnd2));
    }
    std::uint8_t* out = codes + t * st.code_bytes;
    pack_groups<B>(cb1, d, out);
    pack_groups<B>(cb2, d, out + st.stage_bytes);
    norms[t] = norm;
  }
}

template <class V, int B>
void rvq_decode(const RvqState& st, const std::uint8_t* codes, const std::uint8_t* norms16, std::size_t count,
                float* out) {
  constexpr int W = V::W;
  const int d = st.dim;
  alignas(64) float y[kMaxDim], xr[kMaxDim];
  alignas(64) std::uint8_t cb1[kMaxDim + 16], cb2[kMaxDim + 16];
  for (std::size_t t = 0; t < count; ++t) {
    rvq_unpack<B>(st, codes + t * st.code_bytes, cb1, cb2);
    for (int k = 0; k < d; k += W)
      V::store(y + k, V::add(V::lut16(V::load_u8(cb1 + k), st.c1), V::lut16(V::load_u8(cb2 + k), st.c2)));
    rotate_inverse<V>(st.rot, y, xr);
    const auto nv = V::set1(norm16(norms16 + 2 * t));
    float* o = out + t * static_cast<std::size_t>(d);
    for (int k = 0; k < d; k += W) V::store(o + k, V::mul(nv, V::load(xr + k)));
  }
}

template <class V, int B>
void rvq_scores(const RvqState& st, const float* qr, const std::uint8_t* codes, const std::uint8_t* norms16,
                std::size_t count, float* out) {
  constexpr int W = V::W;
  const int d = st.dim;
  for (std::size_t t = 0; t < count; ++t) {
    const std::uint8_t* s1 = codes + t * st.code_bytes;
    const std::uint8_t* s2 = s1 + st.stage_bytes;
    auto acc = V::zero();
    for (int k = 0; k < d; k += W) {
      const auto c = V::add(V::lut16(stream_codes<V, B>(s1, k), st.c1), V::lut16(stream_codes<V, B>(s2, k), st.c2));
      acc = V::fma(V::load(qr + k), c, acc);
    }
    out[t] = V::hsum(acc) * norm16(norms16 + 2 * t);
  }
}

template <class V, int B>
void rvq_accumulate(const RvqState& st, const std::uint8_t* codes, const std::uint8_t* norms16, std::size_t count,
                    const float* w, float* acc) {
  constexpr int W = V::W;
  const int d = st.dim;
  for (std::size_t t = 0; t < count; ++t) {
    const std::uint8_t* s1 = codes + t * st.code_bytes;
    const std::uint8_t* s2 = s1 + st.stage_bytes;
    const auto wn = V::set1(w[t] * norm16(norms16 + 2 * t));
    for (int k = 0; k < d; k += W) {
      const auto c = V::add(V::lut16(stream_codes<V, B>(s1, k), st.c1), V::lut16(stream_codes<V, B>(s2, k), st.c2));
      V::store(acc + k, V::fma(wn, c, V::load(acc + k)));
    }
  }
}

template <class V, int B>
void rvq_decode_domain(const RvqState& st, const std::uint8_t* codes, const std::uint8_t* norms16, std::size_t count,
                       float* y) {
  constexpr int W = V::W;
  const int d = st.dim;
  for (std::size_t t = 0; t < count; ++t) {
    const std::uint8_t* s1 = codes + t * st.code_bytes;
    const std::uint8_t* s2 = s1 + st.stage_bytes;
    const auto nv = V::set1(norm16(norms16 + 2 * t));
    float* yt = y + t * static_cast<std::size_t>(d);
    for (int k = 0; k < d; k += W)
      V::store(yt + k, V::mul(nv, V::add(V::lut16(stream_codes<V, B>(s1, k), st.c1),
                                         V::lut16(stream_codes<V, B>(s2, k), st.c2))));
  }
}

/// The RVQ kernel table for traits V, dispatched on the bit width.
template <class V>
RvqKernels rvq_table(int bits) {
  switch (bits) {
#define TKV_RVQ_CASE(B) \
  case B: return {rvq_encode<V, B>, rvq_decode<V, B>, rvq_scores<V, B>, rvq_accumulate<V, B>, rvq_decode_domain<V, B>};
    TKV_RVQ_CASE(1)
    TKV_RVQ_CASE(2)
    TKV_RVQ_CASE(3)
#undef TKV_RVQ_CASE
    default: return {rvq_encode<V, 4>, rvq_decode<V, 4>, rvq_scores<V, 4>, rvq_accumulate<V, 4>, rvq_decode_domain<V, 4>};
  }
}

}  // namespace
}  // namespace turbokv::cpu::detail::vq
