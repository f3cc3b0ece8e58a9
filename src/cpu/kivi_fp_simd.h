// The SIMD kernels of KIVI, fp8, fp16 and fractional TurboQuant-MSE, written
// once over a vector-traits struct V and stamped out per ISA: a per-ISA file
// defines TURBOKV_LB_AVX512 or TURBOKV_LB_AVX2, includes this header and
// exports the kernel table of its method. Everything here has internal linkage
// (anonymous namespace) and calls no shared inline helpers, so code compiled
// with ISA flags never leaks into baseline callers. Never include it from
// baseline files.
//
// Bit-exactness (formats.h): encode/decode use the reference's operations in
// its order: separate fp32 multiply and add (no FMA), IEEE division, round
// half to even, the reference's fp64 steps done in fp64 lanes; fp16 rounding
// toward -inf / +inf (float_to_half_down / _up) is the F16C conversion with
// that rounding mode. Min/max over KIVI key groups run token by token in
// lanes exactly as std::min/std::max do (MINPS(x, m) == std::min(m, x),
// including signed zeros); value groups are reduced in a tree and recomputed
// in order when the result is a zero (the only case where order matters).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kivi_fp.h"

namespace turbokv::cpu::detail {
namespace {

inline constexpr std::uint64_t kLbByteMask[5] = {0, 0x0101010101010101ull, 0x0303030303030303ull,
                                                 0x0707070707070707ull, 0x0f0f0f0f0f0f0f0full};

#if defined(TURBOKV_LB_AVX512)

struct V {
  static constexpr int W = 16;
  using F = __m512;
  using I = __m512i;
  using M = __mmask16;
  using H = __m256i;  // W fp16 values
  static M mask(int c) { return c >= 16 ? static_cast<M>(0xffff) : static_cast<M>((1u << c) - 1u); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F load(const float* p, int c) { return _mm512_maskz_loadu_ps(mask(c), p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static void store(float* p, F v, int c) { _mm512_mask_storeu_ps(p, mask(c), v); }
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }  // (a < b) ? a : b
  static F max(F a, F b) { return _mm512_max_ps(a, b); }  // (a > b) ? a : b
  static F abs(F a) { return _mm512_abs_ps(a); }
  static float hsum(F v) { return _mm512_reduce_add_ps(v); }
  static float hmax(F v) { return _mm512_reduce_max_ps(v); }
  static float hmin(F v) { return _mm512_reduce_min_ps(v); }
  static F rne(F v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  /// v where s > 0, else 0.
  static F where_pos(F s, F v) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(s, zero(), _CMP_GT_OQ), v); }
  static I cvtt(F v) { return _mm512_cvttps_epi32(v); }
  static F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  template <int R>
  static H to_half(F v) { return _mm512_cvtps_ph(v, R | _MM_FROUND_NO_EXC); }
  static F from_half(H h) { return _mm512_cvtph_ps(h); }
  /// float((double(b) - double(a)) / L), in fp64 lanes.
  static F diff_div(F b, F a, double L) {
    const __m512d l = _mm512_set1_pd(L);
    const __m512d lo = _mm512_div_pd(_mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(b)),
                                                   _mm512_cvtps_pd(_mm512_castps512_ps256(a))), l);
    const __m512d hi = _mm512_div_pd(_mm512_sub_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(b, 1)),
                                                   _mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 1))), l);
    const __m256 flo = _mm512_cvt_roundpd_ps(lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 fhi = _mm512_cvt_roundpd_ps(hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_insertf32x8(_mm512_castps256_ps512(flo), fhi, 1);
  }
  /// Stores W (lo, hi) fp16 pairs (4 bytes each) to p.
  static void store_pairs(std::uint32_t* p, H lo, H hi) {
    const __m256i a = _mm256_unpacklo_epi16(lo, hi), b = _mm256_unpackhi_epi16(lo, hi);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute2x128_si256(a, b, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 8), _mm256_permute2x128_si256(a, b, 0x31));
  }
  /// W (lo, hi) fp16 pairs from p -> floats.
  static void load_pairs(const std::uint32_t* p, F& lo, F& hi) {
    const __m512i x = _mm512_loadu_si512(p);
    lo = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(x));
    hi = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(x, 16)));
  }
  // fp16 rows
  static F load_h(const std::uint8_t* p, int c) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask(c), p)); }
  static void store_h(std::uint8_t* p, F v, int c) {
    _mm256_mask_storeu_epi16(p, mask(c), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  /// c e4m3 bytes -> their values / 256 (exact; codes 0x7f/0xff -> NaN of the code's sign).
  static F e4m3_div256(const std::uint8_t* p, int c) {
    const __m128i b = _mm_maskz_loadu_epi8(mask(c), p);
    __m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7);
    h = _mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0xbfff)));
    F v = _mm512_cvtph_ps(h);
    const M nan = _mm_cmpeq_epi8_mask(_mm_and_si128(b, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f));
    if (nan) {
      const I sgn = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(0x80000000u)));
      v = _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(_mm512_or_si512(sgn, _mm512_set1_epi32(0x7fc00000))));
    }
    return v;
  }
  /// OCP e4m3 of each lane (float_to_e4m3, half.h), as 32-bit lanes.
  static I to_e4m3(F v) {
    const I u = _mm512_castps_si512(v);
    const I sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
    const I ax = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    const I ms = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(ax), _mm512_set1_ps(512.0f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    I r = _mm512_sub_epi32(ax, _mm512_set1_epi32(0x3c000000));
    r = _mm512_add_epi32(r, _mm512_add_epi32(_mm512_set1_epi32(0x7ffff),
                                             _mm512_and_si512(_mm512_srli_epi32(r, 20), _mm512_set1_epi32(1))));
    I o = _mm512_min_epi32(_mm512_srli_epi32(r, 20), _mm512_set1_epi32(0x7e));
    o = _mm512_mask_mov_epi32(o, _mm512_cmplt_epi32_mask(ax, _mm512_set1_epi32(0x3c800000)), ms);
    o = _mm512_mask_mov_epi32(o, _mm512_cmpge_epi32_mask(ax, _mm512_set1_epi32(0x43e00000)), _mm512_set1_epi32(0x7e));
    return _mm512_or_si512(o, sign);
  }
  static void store_u8(std::uint8_t* p, I v, int c) { _mm_mask_storeu_epi8(p, mask(c), _mm512_cvtepi32_epi8(v)); }

  /// c (W or 8) BITS-wide packed codes starting at byte p (code 0 at bit 0) -> 32-bit lanes.
  template <int BITS>
  static I codes(const std::uint8_t* p, int c) {
    if constexpr (BITS == 8) {
      return _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask(c), p));
    } else {
      alignas(64) static constexpr auto tables = [] {
        struct { std::uint8_t idx[64]; std::uint32_t sh[16]; } t{};
        for (int i = 0; i < 16; ++i) {
          const int b0 = (i * BITS) / 8;
          t.idx[4 * i] = static_cast<std::uint8_t>(b0);
          for (int j = 1; j < 4; ++j) t.idx[4 * i + j] = static_cast<std::uint8_t>(b0 + 1);
          t.sh[i] = static_cast<std::uint32_t>((i * BITS) % 8);
        }
        return t;
      }();
      const int nb = c * BITS / 8;
      const __m128i b = _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << nb) - 1u), p);
      I x = _mm512_permutexvar_epi8(_mm512_load_si512(tables.idx), _mm512_castsi128_si512(b));
      x = _mm512_srlv_epi32(x, _mm512_load_si512(tables.sh));
      return _mm512_and_si512(x, _mm512_set1_epi32((1 << BITS) - 1));
    }
  }
  /// Packs c (W or 8) codes (lanes < 2^BITS) at byte p (whole bytes written).
  template <int BITS>
  static void put_codes(std::uint8_t* p, I v, int c) {
    const __m128i b = _mm512_cvtepi32_epi8(v);
    if constexpr (BITS == 8) {
      _mm_mask_storeu_epi8(p, mask(c), b);
    } else {
      const std::uint64_t lo = _pext_u64(static_cast<std::uint64_t>(_mm_cvtsi128_si64(b)), kLbByteMask[BITS]);
      std::memcpy(p, &lo, BITS);
      if (c > 8) {
        const std::uint64_t hi = _pext_u64(static_cast<std::uint64_t>(_mm_extract_epi64(b, 1)), kLbByteMask[BITS]);
        std::memcpy(p + BITS, &hi, BITS);
      }
    }
  }
  /// Centroid look-up: cb[idx] (16 entries).
  static F lut16(I idx, const float* cb) { return _mm512_permutexvar_ps(idx, _mm512_load_ps(cb)); }
};

#elif defined(TURBOKV_LB_AVX2)

struct V {
  static constexpr int W = 8;
  using F = __m256;
  using I = __m256i;
  using H = __m128i;
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static F load(const float* p, int) { return _mm256_loadu_ps(p); }  // head_dim % 8 == 0: always full
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static void store(float* p, F v, int) { _mm256_storeu_ps(p, v); }
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F abs(F a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static float hsum(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmax(F v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmin(F v) {
    __m128 s = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_min_ps(s, _mm_movehl_ps(s, s));
    s = _mm_min_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static F rne(F v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static F where_pos(F s, F v) { return _mm256_and_ps(_mm256_cmp_ps(s, zero(), _CMP_GT_OQ), v); }
  static I cvtt(F v) { return _mm256_cvttps_epi32(v); }
  static F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  template <int R>
  static H to_half(F v) { return _mm256_cvtps_ph(v, R); }
  static F from_half(H h) { return _mm256_cvtph_ps(h); }
  static F diff_div(F b, F a, double L) {
    const __m256d l = _mm256_set1_pd(L);
    const __m256d lo = _mm256_div_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(b)),
                                                   _mm256_cvtps_pd(_mm256_castps256_ps128(a))), l);
    const __m256d hi = _mm256_div_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(b, 1)),
                                                   _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1))), l);
    return _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));  // MXCSR: round to nearest even
  }
  static void store_pairs(std::uint32_t* p, H lo, H hi) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm_unpacklo_epi16(lo, hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 4), _mm_unpackhi_epi16(lo, hi));
  }
  static void load_pairs(const std::uint32_t* p, F& lo, F& hi) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i m = _mm256_set1_epi32(0xffff);
    // packus keeps 128-bit lanes: [lo0-3 hi0-3 | lo4-7 hi4-7] -> reorder quads.
    const __m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi32(_mm256_and_si256(x, m), _mm256_srli_epi32(x, 16)), 0xd8);
    lo = _mm256_cvtph_ps(_mm256_castsi256_si128(pk));
    hi = _mm256_cvtph_ps(_mm256_extracti128_si256(pk, 1));
  }
  static F load_h(const std::uint8_t* p, int) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store_h(std::uint8_t* p, F v, int) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static F e4m3_div256(const std::uint8_t* p, int) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    __m128i h = _mm_slli_epi16(_mm_cvtepi8_epi16(b), 7);
    h = _mm_and_si128(h, _mm_set1_epi16(static_cast<short>(0xbfff)));
    F v = _mm256_cvtph_ps(h);
    const __m128i nanb = _mm_cmpeq_epi8(_mm_and_si128(b, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f));
    if (_mm_movemask_epi8(nanb) & 0xff) {
      const __m256 nanl = _mm256_castsi256_ps(_mm256_cvtepi8_epi32(nanb));
      const __m256 q = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)),
                                    _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
      v = _mm256_blendv_ps(v, q, nanl);
    }
    return v;
  }
  static I to_e4m3(F v) {
    const I u = _mm256_castps_si256(v);
    const I sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
    const I ax = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const I ms = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_castsi256_ps(ax), _mm256_set1_ps(512.0f)),
                                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    I r = _mm256_sub_epi32(ax, _mm256_set1_epi32(0x3c000000));
    r = _mm256_add_epi32(r, _mm256_add_epi32(_mm256_set1_epi32(0x7ffff),
                                             _mm256_and_si256(_mm256_srli_epi32(r, 20), _mm256_set1_epi32(1))));
    I o = _mm256_min_epi32(_mm256_srli_epi32(r, 20), _mm256_set1_epi32(0x7e));
    o = _mm256_blendv_epi8(o, ms, _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3c800000), ax));
    o = _mm256_blendv_epi8(o, _mm256_set1_epi32(0x7e), _mm256_cmpgt_epi32(ax, _mm256_set1_epi32(0x43dfffff)));
    return _mm256_or_si256(o, sign);
  }
  static std::uint64_t bytes8(I v) {
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return static_cast<std::uint64_t>(_mm_cvtsi128_si64(_mm_packus_epi16(w, w)));
  }
  static void store_u8(std::uint8_t* p, I v, int) {
    const std::uint64_t b = bytes8(v);
    std::memcpy(p, &b, 8);
  }
  template <int BITS>
  static I codes(const std::uint8_t* p, int) {
    if constexpr (BITS == 8) {
      return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    } else {
      std::uint32_t w = 0;
      std::memcpy(&w, p, BITS);
      const I sh = _mm256_setr_epi32(0, BITS, 2 * BITS, 3 * BITS, 4 * BITS, 5 * BITS, 6 * BITS, 7 * BITS);
      return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)), sh),
                              _mm256_set1_epi32((1 << BITS) - 1));
    }
  }
  template <int BITS>
  static void put_codes(std::uint8_t* p, I v, int) {
    const std::uint64_t b = bytes8(v);
    if constexpr (BITS == 8) {
      std::memcpy(p, &b, 8);
    } else {
      const std::uint64_t x = _pext_u64(b, kLbByteMask[BITS]);
      std::memcpy(p, &x, BITS);
    }
  }
  static F lut16(I idx, const float* cb) {
    const F lo = _mm256_permutevar8x32_ps(_mm256_load_ps(cb), idx);
    const F hi = _mm256_permutevar8x32_ps(_mm256_load_ps(cb + 8), idx);
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
  }
};

#else
#error "define TURBOKV_LB_AVX512 or TURBOKV_LB_AVX2 before including kivi_fp_simd.h"
#endif

using F = V::F;
using I = V::I;
constexpr int W = V::W;
constexpr int kPad = kLowbitMaxDim + 16;

inline int lanes_at(int d, int k) { return d - k < W ? d - k : W; }

inline std::uint16_t load_u16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
inline float half_bits_to_float(std::uint16_t h) { return _cvtsh_ss(h); }

// ---------------------------------------------------------------- KIVI (Liu et al., arXiv 2402.02750)

/// Converts group ranges to the stored pairs (formats.h: [min, scale] fp16):
/// mn16 = fp16 at or below mn, sc16 = fp16 at or above float((double(mx) - mn16) / L).
/// mn, mx, mnf, scf: padded arrays (>= count rounded up to W); pairs: count * 4 bytes.
inline void kivi_params(const float* mn, const float* mx, int count, double L, float* mnf, float* scf,
                        std::uint8_t* pairs) {
  alignas(64) std::uint32_t tmp[kPad];
  for (int k = 0; k < count; k += W) {
    const V::H hm = V::to_half<_MM_FROUND_TO_NEG_INF>(V::load(mn + k));
    const F m16 = V::from_half(hm);
    const V::H hs = V::to_half<_MM_FROUND_TO_POS_INF>(V::diff_div(V::load(mx + k), m16, L));
    V::store(mnf + k, m16);
    V::store(scf + k, V::from_half(hs));
    V::store_pairs(tmp + k, hm, hs);
  }
  std::memcpy(pairs, tmp, 4 * static_cast<std::size_t>(count));
}

/// Reads count stored pairs into padded float arrays.
inline void kivi_load_params(const std::uint8_t* pairs, int count, float* mnf, float* scf) {
  alignas(64) std::uint32_t tmp[kPad];
  std::memcpy(tmp, pairs, 4 * static_cast<std::size_t>(count));
  const int padded = (count + W - 1) / W * W;
  for (int i = count; i < padded; ++i) tmp[i] = 0;
  for (int k = 0; k < count; k += W) {
    F a, b;
    V::load_pairs(tmp + k, a, b);
    V::store(mnf + k, a);
    V::store(scf + k, b);
  }
}

/// Value groups: per-group parameters repeated over their G channels.
inline void kivi_expand(const float* mnf, const float* scf, int ng, int G, float* mnr, float* scr) {
  for (int g = 0; g < ng; ++g) {
    const float a = mnf[g], b = scf[g];
    for (int j = 0; j < G; ++j) mnr[g * G + j] = a, scr[g * G + j] = b;
  }
}

template <int BITS>
struct Kivi {
  static constexpr double kLevels = (1 << BITS) - 1;

  /// code = clamp(rne((x - mn16) / sc16), 0, L), 0 where sc16 == 0; packed into row.
  static void quant_row(const float* x, int d, const float* mnr, const float* scr, std::uint8_t* row) {
    const F L = V::set1(static_cast<float>(kLevels)), Z = V::zero();
    for (int k = 0; k < d; k += W) {
      const int c = lanes_at(d, k);
      const F sc = V::load(scr + k);
      F r = V::rne(V::div(V::sub(V::load(x + k, c), V::load(mnr + k)), sc));
      r = V::min(V::max(r, Z), L);
      V::template put_codes<BITS>(row + k * BITS / 8, V::cvtt(V::where_pos(sc, r)), c);
    }
  }
  static void decode_row(const std::uint8_t* row, int d, const float* mnr, const float* scr, float* out) {
    for (int k = 0; k < d; k += W) {
      const int c = lanes_at(d, k);
      const F code = V::cvt(V::template codes<BITS>(row + k * BITS / 8, c));
      V::store(out + k, V::add(V::load(mnr + k), V::mul(V::load(scr + k), code)), c);
    }
  }
  /// sum_j a[j] * code_j (a padded).
  static float dot_codes(const float* a, const std::uint8_t* row, int d) {
    F s0 = V::zero(), s1 = V::zero();
    int k = 0;
    for (; k + 2 * W <= d; k += 2 * W) {
      s0 = V::fma(V::load(a + k), V::cvt(V::template codes<BITS>(row + k * BITS / 8, W)), s0);
      s1 = V::fma(V::load(a + k + W), V::cvt(V::template codes<BITS>(row + (k + W) * BITS / 8, W)), s1);
    }
    for (; k < d; k += W)
      s0 = V::fma(V::load(a + k), V::cvt(V::template codes<BITS>(row + k * BITS / 8, lanes_at(d, k))), s0);
    return V::hsum(V::add(s0, s1));
  }
  /// sum_j q[j] * (mn_j + sc_j * code_j).
  static float dot_row(const float* q, const std::uint8_t* row, int d, const float* mnr, const float* scr) {
    F s = V::zero();
    for (int k = 0; k < d; k += W) {
      const int c = lanes_at(d, k);
      const F code = V::cvt(V::template codes<BITS>(row + k * BITS / 8, c));
      s = V::fma(V::load(q + k, c), V::add(V::load(mnr + k), V::mul(V::load(scr + k), code)), s);
    }
    return V::hsum(s);
  }
  static void acc_row(float w, const std::uint8_t* row, int d, const float* mnr, const float* scr, float* acc) {
    const F wv = V::set1(w);
    for (int k = 0; k < d; k += W) {
      const int c = lanes_at(d, k);
      const F code = V::cvt(V::template codes<BITS>(row + k * BITS / 8, c));
      const F x = V::add(V::load(mnr + k), V::mul(V::load(scr + k), code));
      V::store(acc + k, V::fma(wv, x, V::load(acc + k, c)), c);
    }
  }

  static void encode(const LowbitParams& p, const float* x, std::size_t n, std::size_t t0, std::size_t t1,
                     std::uint8_t* block) {
    const int d = p.d, G = p.group;
    const std::size_t ud = static_cast<std::size_t>(d);
    alignas(64) float mn[kPad] = {}, mx[kPad] = {}, mnf[kPad], scf[kPad];
    std::uint8_t* params = block + n * p.row_bytes;
    if (p.key) {
      for (std::size_t g0 = t0; g0 < t1; g0 += static_cast<std::size_t>(G)) {
        const std::size_t cnt = n - g0 < static_cast<std::size_t>(G) ? n - g0 : static_cast<std::size_t>(G);
        const float* xg = x + g0 * ud;
        for (int k = 0; k < d; k += W) {
          const int c = lanes_at(d, k);
          F a = V::load(xg + k, c), b = a;
          for (std::size_t i = 1; i < cnt; ++i) {
            const F v = V::load(xg + i * ud + k, c);
            a = V::min(v, a);  // std::min(a, v)
            b = V::max(v, b);  // std::max(b, v)
          }
          V::store(mn + k, a);
          V::store(mx + k, b);
        }
        kivi_params(mn, mx, d, kLevels, mnf, scf, params + 4 * (g0 / static_cast<std::size_t>(G)) * ud);
        for (std::size_t i = 0; i < cnt; ++i) quant_row(xg + i * ud, d, mnf, scf, block + (g0 + i) * p.row_bytes);
      }
      return;
    }
    const int ng = d / G;
    alignas(64) float mnr[kPad], scr[kPad];
    for (std::size_t t = t0; t < t1; ++t) {
      const float* row = x + t * ud;
      for (int g = 0; g < ng; ++g) {
        const float* s = row + g * G;
        float a = 0, b = 0;
        bool ordered = G % W != 0;
        if (!ordered) {
          F va = V::load(s), vb = va;
          for (int j = W; j < G; j += W) {
            const F v = V::load(s + j);
            va = V::min(v, va);
            vb = V::max(v, vb);
          }
          a = V::hmin(va);
          b = V::hmax(vb);
          ordered = a == 0.0f || b == 0.0f;  // signed zeros: the reference keeps the first one met
        }
        if (ordered) {
          a = b = s[0];
          for (int j = 1; j < G; ++j) {
            a = s[j] < a ? s[j] : a;
            b = b < s[j] ? s[j] : b;
          }
        }
        mn[g] = a;
        mx[g] = b;
      }
      kivi_params(mn, mx, ng, kLevels, mnf, scf, params + 4 * t * static_cast<std::size_t>(ng));
      kivi_expand(mnf, scf, ng, G, mnr, scr);
      quant_row(row, d, mnr, scr, block + t * p.row_bytes);
    }
  }

  /// Walks tokens [t0, t1), handing fn(t, row codes, mn row, sc row) the per-channel parameters.
  template <class Fn>
  static void walk(const LowbitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
                   Fn& fn) {
    const int d = p.d, G = p.group;
    const std::uint8_t* params = block + n * p.row_bytes;
    alignas(64) float mnf[kPad], scf[kPad], mnr[kPad], scr[kPad];
    if (p.key) {
      std::size_t cur = static_cast<std::size_t>(-1);
      for (std::size_t t = t0; t < t1; ++t) {
        const std::size_t g = t / static_cast<std::size_t>(G);
        if (g != cur) {
          kivi_load_params(params + 4 * g * static_cast<std::size_t>(d), d, mnf, scf);
          cur = g;
          fn.group(mnf, scf);
        }
        fn(t, block + t * p.row_bytes, mnf, scf);
      }
      return;
    }
    const int ng = d / G;
    for (std::size_t t = t0; t < t1; ++t) {
      kivi_load_params(params + 4 * t * static_cast<std::size_t>(ng), ng, mnf, scf);
      kivi_expand(mnf, scf, ng, G, mnr, scr);
      fn(t, block + t * p.row_bytes, mnr, scr);
    }
  }

  static void decode(const LowbitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0,
                     std::size_t t1, float* out) {
    struct {
      int d;
      float* out;
      void group(const float*, const float*) {}
      void operator()(std::size_t t, const std::uint8_t* row, const float* mnr, const float* scr) {
        decode_row(row, d, mnr, scr, out + t * static_cast<std::size_t>(d));
      }
    } fn{p.d, out};
    walk(p, block, n, t0, t1, fn);
  }

  /// The codec domain: decode's floats, row t - t0 = token t. Values whose groups are whole
  /// vectors broadcast each group's (min, scale) instead of expanding them per channel.
  static void decode_domain(const LowbitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0,
                            std::size_t t1, float* y) {
    const int d = p.d, G = p.group;
    const std::size_t ud = static_cast<std::size_t>(d);
    if (!p.key && G % W == 0) {
      const int ng = d / G;
      const std::uint8_t* params = block + n * p.row_bytes;
      for (std::size_t t = t0; t < t1; ++t) {
        const std::uint8_t* pr = params + 4 * t * static_cast<std::size_t>(ng);
        const std::uint8_t* row = block + t * p.row_bytes;
        float* o = y + (t - t0) * ud;
        for (int g = 0; g < ng; ++g) {
          const F mv = V::set1(half_bits_to_float(load_u16(pr + 4 * g)));
          const F sv = V::set1(half_bits_to_float(load_u16(pr + 4 * g + 2)));
          for (int k = g * G; k < (g + 1) * G; k += W)
            V::store(o + k, V::add(mv, V::mul(sv, V::cvt(V::template codes<BITS>(row + k * BITS / 8, W)))));
        }
      }
      return;
    }
    struct {
      int d;
      std::size_t t0;
      float* y;
      void group(const float*, const float*) {}
      void operator()(std::size_t t, const std::uint8_t* row, const float* mnr, const float* scr) {
        decode_row(row, d, mnr, scr, y + (t - t0) * static_cast<std::size_t>(d));
      }
    } fn{d, t0, y};
    walk(p, block, n, t0, t1, fn);
  }

  static void scores(const LowbitParams& p, const float* q, const std::uint8_t* block, std::size_t n,
                     std::size_t t0, std::size_t t1, float* out) {
    if (p.key) {
      // Keys: sum_j q_j (mn_j + sc_j c_j) = <q, mn> + <q * sc, c>, folded once per group.
      struct {
        int d = 0;
        const float* q = nullptr;
        float* out = nullptr;
        std::size_t t0 = 0;
        float c0 = 0;
        alignas(64) float qs[kPad];
        void group(const float* mnf, const float* scf) {
          F s = V::zero();
          for (int k = 0; k < d; k += W) {
            const int c = lanes_at(d, k);
            const F qv = V::load(q + k, c);
            V::store(qs + k, V::mul(qv, V::load(scf + k)));
            s = V::fma(qv, V::load(mnf + k), s);
          }
          c0 = V::hsum(s);
        }
        void operator()(std::size_t t, const std::uint8_t* row, const float*, const float*) {
          out[t - t0] = c0 + dot_codes(qs, row, d);
        }
      } fn;
      fn.d = p.d, fn.q = q, fn.out = out, fn.t0 = t0;
      walk(p, block, n, t0, t1, fn);
      return;
    }
    struct {
      int d;
      const float* q;
      float* out;
      std::size_t t0;
      void group(const float*, const float*) {}
      void operator()(std::size_t t, const std::uint8_t* row, const float* mnr, const float* scr) {
        out[t - t0] = dot_row(q, row, d, mnr, scr);
      }
    } fn{p.d, q, out, t0};
    walk(p, block, n, t0, t1, fn);
  }

  static void accumulate(const LowbitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0,
                         std::size_t t1, const float* w, float* acc) {
    struct {
      int d;
      const float* w;
      float* acc;
      std::size_t t0;
      void group(const float*, const float*) {}
      void operator()(std::size_t t, const std::uint8_t* row, const float* mnr, const float* scr) {
        acc_row(w[t - t0], row, d, mnr, scr, acc);
      }
    } fn{p.d, w, acc, t0};
    walk(p, block, n, t0, t1, fn);
  }
};

template <int BITS>
constexpr LowbitKernels kivi_table() {
  return {&Kivi<BITS>::encode, &Kivi<BITS>::decode, &Kivi<BITS>::scores, &Kivi<BITS>::accumulate,
          &Kivi<BITS>::decode_domain};
}

// ---------------------------------------------------------------- fp8 e4m3, per-token scale

struct Fp8 {
  static void encode(const LowbitParams& p, const float* x, std::size_t n, std::size_t t0, std::size_t t1,
                     std::uint8_t* block) {
    const int d = p.d;
    for (std::size_t t = t0; t < t1; ++t) {
      const float* r = x + t * static_cast<std::size_t>(d);
      F m = V::zero();
      for (int k = 0; k < d; k += W) m = V::max(m, V::abs(V::load(r + k, lanes_at(d, k))));
      const float mx = V::hmax(m);
      std::uint16_t h = 0;
      if (mx > 0) {
        float s = mx / 448.0f;
        s = s < 5.9604644775390625e-08f ? 5.9604644775390625e-08f : s;
        h = _cvtss_sh(s, _MM_FROUND_TO_POS_INF);  // float_to_half_up
      }
      std::uint8_t* sp = block + n * p.row_bytes + 2 * t;
      sp[0] = static_cast<std::uint8_t>(h & 0xff);
      sp[1] = static_cast<std::uint8_t>(h >> 8);
      const float sc = half_bits_to_float(h);
      std::uint8_t* c = block + t * p.row_bytes;
      if (!(sc > 0)) {
        std::memset(c, 0, static_cast<std::size_t>(d));
        continue;
      }
      const F sv = V::set1(sc);
      for (int k = 0; k < d; k += W) {
        const int cnt = lanes_at(d, k);
        V::store_u8(c + k, V::to_e4m3(V::div(V::load(r + k, cnt), sv)), cnt);
      }
    }
  }
  static float scale(const std::uint8_t* block, std::size_t n, const LowbitParams& p, std::size_t t) {
    return half_bits_to_float(load_u16(block + n * p.row_bytes + 2 * t));
  }
  static void decode(const LowbitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0,
                     std::size_t t1, float* out) {
    const int d = p.d;
    for (std::size_t t = t0; t < t1; ++t) {
      // e4m3 * sc == (e4m3 / 256) * (sc * 256): both factors exact, one rounding.
      const F sv = V::set1(scale(block, n, p, t) * 256.0f);
      const std::uint8_t* c = block + t * p.row_bytes;
      float* o = out + t * static_cast<std::size_t>(d);
      for (int k = 0; k < d; k += W) {
        const int cnt = lanes_at(d, k);
        V::store(o + k, V::mul(V::e4m3_div256(c + k, cnt), sv), cnt);
      }
    }
  }
  /// The codec domain: decode's floats, row t - t0 = token t.
  static void decode_domain(const LowbitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0,
                            std::size_t t1, float* y) {
    const int d = p.d;
    for (std::size_t t = t0; t < t1; ++t) {
      const F sv = V::set1(scale(block, n, p, t) * 256.0f);
      const std::uint8_t* c = block + t * p.row_bytes;
      float* o = y + (t - t0) * static_cast<std::size_t>(d);
      for (int k = 0; k < d; k += W) {
        const int cnt = lanes_at(d, k);
        V::store(o + k, V::mul(V::e4m3_div256(c + k, cnt), sv), cnt);
      }
    }
  }
  static void scores(const LowbitParams& p, const float* q, const std::uint8_t* block, std::size_t n,
                     std::size_t t0, std::size_t t1, float* out) {
    const int d = p.d;
    for (std::size_t t = t0; t < t1; ++t) {
      const std::uint8_t* c = block + t * p.row_bytes;
      F s0 = V::zero(), s1 = V::zero();
      int k = 0;
      for (; k + 2 * W <= d; k += 2 * W) {
        s0 = V::fma(V::load(q + k), V::e4m3_div256(c + k, W), s0);
        s1 = V::fma(V::load(q + k + W), V::e4m3_div256(c + k + W, W), s1);
      }
      for (; k < d; k += W) {
        const int cnt = lanes_at(d, k);
        s0 = V::fma(V::load(q + k, cnt), V::e4m3_div256(c + k, cnt), s0);
      }
      out[t - t0] = V::hsum(V::add(s0, s1)) * (scale(block, n, p, t) * 256.0f);
    }
  }
  static void accumulate(const LowbitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0,
                         std::size_t t1, const float* w, float* acc) {
    const int d = p.d;
    for (std::size_t t = t0; t < t1; ++t) {
      const F wv = V::set1(w[t - t0] * (scale(block, n, p, t) * 256.0f));
      const std::uint8_t* c = block + t * p.row_bytes;
      for (int k = 0; k < d; k += W) {
        const int cnt = lanes_at(d, k);
        V::store(acc + k, V::fma(wv, V::e4m3_div256(c + k, cnt), V::load(acc + k, cnt)), cnt);
      }
    }
  }
};

// ---------------------------------------------------------------- fp16 passthrough

struct Fp16 {
  static void encode(const LowbitParams& p, const float* x, std::size_t, std::size_t t0, std::size_t t1,
                     std::uint8_t* block) {
    const int d = p.d;
    for (std::size_t t = t0; t < t1; ++t) {
      const float* r = x + t * static_cast<std::size_t>(d);
      std::uint8_t* o = block + t * p.row_bytes;
      for (int k = 0; k < d; k += W) {
        const int c = lanes_at(d, k);
        V::store_h(o + 2 * k, V::load(r + k, c), c);
      }
    }
  }
  static void decode(const LowbitParams& p, const std::uint8_t* block, std::size_t, std::size_t t0, std::size_t t1,
                     float* out) {
    const int d = p.d;
    for (std::size_t t = t0; t < t1; ++t) {
      const std::uint8_t* r = block + t * p.row_bytes;
      float* o = out + t * static_cast<std::size_t>(d);
      for (int k = 0; k < d; k += W) {
        const int c = lanes_at(d, k);
        V::store(o + k, V::load_h(r + 2 * k, c), c);
      }
    }
  }
  /// The codec domain: decode's floats, row t - t0 = token t.
  static void decode_domain(const LowbitParams& p, const std::uint8_t* block, std::size_t, std::size_t t0,
                            std::size_t t1, float* y) {
    const int d = p.d;
    for (std::size_t t = t0; t < t1; ++t) {
      const std::uint8_t* r = block + t * p.row_bytes;
      float* o = y + (t - t0) * static_cast<std::size_t>(d);
      for (int k = 0; k < d; k += W) {
        const int c = lanes_at(d, k);
        V::store(o + k, V::load_h(r + 2 * k, c), c);
      }
    }
  }
  static void scores(const LowbitParams& p, const float* q, const std::uint8_t* block, std::size_t,
                     std::size_t t0, std::size_t t1, float* out) {
    const int d = p.d;
    for (std::size_t t = t0; t < t1; ++t) {
      const std::uint8_t* r = block + t * p.row_bytes;
      F s0 = V::zero(), s1 = V::zero();
      int k = 0;
      for (; k + 2 * W <= d; k += 2 * W) {
        s0 = V::fma(V::load(q + k), V::load_h(r + 2 * k, W), s0);
        s1 = V::fma(V::load(q + k + W), V::load_h(r + 2 * (k + W), W), s1);
      }
      for (; k < d; k += W) {
        const int c = lanes_at(d, k);
        s0 = V::fma(V::load(q + k, c), V::load_h(r + 2 * k, c), s0);
      }
      out[t - t0] = V::hsum(V::add(s0, s1));
    }
  }
  static void accumulate(const LowbitParams& p, const std::uint8_t* block, std::size_t, std::size_t t0,
                         std::size_t t1, const float* w, float* acc) {
    const int d = p.d;
    for (std::size_t t = t0; t < t1; ++t) {
      const F wv = V::set1(w[t - t0]);
      const std::uint8_t* r = block + t * p.row_bytes;
      for (int k = 0; k < d; k += W) {
        const int c = lanes_at(d, k);
        V::store(acc + k, V::fma(wv, V::load_h(r + 2 * k, c), V::load(acc + k, c)), c);
      }
    }
  }
};

// ---------------------------------------------------------------- fractional TurboQuant-MSE

template <int BITS>
float split_dot(const SplitPart& part, const float* qp, const std::uint8_t* codes) {
  F s0 = V::zero(), s1 = V::zero();
  int k = 0;
  for (; k + 2 * W <= part.dim; k += 2 * W) {
    s0 = V::fma(V::load(qp + k), V::lut16(V::template codes<BITS>(codes + k * BITS / 8, W), part.cb), s0);
    s1 = V::fma(V::load(qp + k + W), V::lut16(V::template codes<BITS>(codes + (k + W) * BITS / 8, W), part.cb), s1);
  }
  if (k < part.dim)  // dim % 16 == 0: at most one vector left
    s0 = V::fma(V::load(qp + k), V::lut16(V::template codes<BITS>(codes + k * BITS / 8, W), part.cb), s0);
  return V::hsum(V::add(s0, s1));
}

template <int BITS>
void split_acc(const SplitPart& part, float w, const std::uint8_t* codes, float* acc) {
  const F wv = V::set1(w);
  for (int k = 0; k < part.dim; k += W)
    V::store(acc + k, V::fma(wv, V::lut16(V::template codes<BITS>(codes + k * BITS / 8, W), part.cb), V::load(acc + k)));
}

template <int BH, int BL>
void split_scores_t(const SplitParams& p, const float* qp, const std::uint8_t* block, std::size_t n, std::size_t t0,
                    std::size_t t1, float* out) {
  const SplitPart &a = p.part[0], &b = p.part[1];
  const std::uint8_t* sc = block + n * p.row_bytes;
  for (std::size_t t = t0; t < t1; ++t) {
    const std::uint8_t* row = block + t * p.row_bytes;
    const float na = half_bits_to_float(load_u16(sc + 4 * t)), nb = half_bits_to_float(load_u16(sc + 4 * t + 2));
    out[t - t0] = na * split_dot<BH>(a, qp + a.state_offset, row + a.code_offset) +
                  nb * split_dot<BL>(b, qp + b.state_offset, row + b.code_offset);
  }
}

template <int BH, int BL>
void split_acc_t(const SplitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
                 const float* w, float* acc) {
  const SplitPart &a = p.part[0], &b = p.part[1];
  const std::uint8_t* sc = block + n * p.row_bytes;
  for (std::size_t t = t0; t < t1; ++t) {
    const std::uint8_t* row = block + t * p.row_bytes;
    const float wt = w[t - t0];
    split_acc<BH>(a, wt * half_bits_to_float(load_u16(sc + 4 * t)), row + a.code_offset, acc + a.state_offset);
    split_acc<BL>(b, wt * half_bits_to_float(load_u16(sc + 4 * t + 2)), row + b.code_offset, acc + b.state_offset);
  }
}

inline void split_scores(const SplitParams& p, const float* qp, const std::uint8_t* block, std::size_t n, std::size_t t0,
                  std::size_t t1, float* out) {
  switch (p.part[1].bits) {
    case 1: split_scores_t<2, 1>(p, qp, block, n, t0, t1, out); break;
    case 2: split_scores_t<3, 2>(p, qp, block, n, t0, t1, out); break;
    default: split_scores_t<4, 3>(p, qp, block, n, t0, t1, out); break;
  }
}

inline void split_accumulate(const SplitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
                      const float* w, float* acc) {
  switch (p.part[1].bits) {
    case 1: split_acc_t<2, 1>(p, block, n, t0, t1, w, acc); break;
    case 2: split_acc_t<3, 2>(p, block, n, t0, t1, w, acc); break;
    default: split_acc_t<4, 3>(p, block, n, t0, t1, w, acc); break;
  }
}

}  // namespace
}  // namespace turbokv::cpu::detail
