// PolarQuant kernels (src/ref/polar.cpp; Han et al., arXiv 2502.02617) over
// the traits of rvq_simd.h; stamped out by polar_avx2.cpp and polar_avx512.cpp.
// Never include from baseline files.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>

#include "polar_internal.h"
#include "rvq_simd.h"
#include "turbokv/pack.h"

namespace turbokv::cpu::detail::vq {
namespace {

/// fp64 lanes for the polar transform (formats.h polar_radius / polar_cell1 / polar_cell_hi, vectorised):
/// DW pairs at a time, masks as bit sets (bit i: lane i). AVX2: 4 lanes; AVX-512: 8.
template <class V>
struct PolarDv;
template <>
struct PolarDv<VAvx2> {
  static constexpr int DW = 4;
  using D = __m256d;
  static D set1(double x) { return _mm256_set1_pd(x); }
  /// Pairs (y[2i], y[2i + 1]) of 8 fp32 values, widened exactly.
  static void pairs(const float* y, D& a0, D& a1) {
    const __m256 f = _mm256_permutevar8x32_ps(_mm256_loadu_ps(y), _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
    a0 = _mm256_cvtps_pd(_mm256_castps256_ps128(f));
    a1 = _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1));
  }
  /// Pairs (r[2i], r[2i + 1]) of 8 fp64 values.
  static void pairs(const double* r, D& a0, D& a1) {
    const D x = _mm256_loadu_pd(r), y = _mm256_loadu_pd(r + 4);  // x: r0 r1 r2 r3, y: r4 r5 r6 r7
    const D lo = _mm256_permute2f128_pd(x, y, 0x20), hi = _mm256_permute2f128_pd(x, y, 0x31);  // r0 r1 r4 r5, r2 r3 r6 r7
    a0 = _mm256_unpacklo_pd(lo, hi);  // r0 r2 r4 r6
    a1 = _mm256_unpackhi_pd(lo, hi);  // r1 r3 r5 r7
  }
  static void store(double* p, D v) { _mm256_storeu_pd(p, v); }
  static D radius(D a0, D a1) {
    return _mm256_sqrt_pd(_mm256_add_pd(_mm256_mul_pd(a0, a0), _mm256_mul_pd(a1, a1)));
  }
  static D mul(D a, D b) { return _mm256_mul_pd(a, b); }
  static D abs(D a) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), a); }
  template <int P>
  static unsigned cmp(D a, D b) { return static_cast<unsigned>(_mm256_movemask_pd(_mm256_cmp_pd(a, b, P))); }
  static unsigned sign(D a) { return static_cast<unsigned>(_mm256_movemask_pd(a)); }
  /// Lane i: bit i of m ? b : a.
  static D blend(unsigned m, D a, D b) {
    const __m256i bits = _mm256_and_si256(_mm256_set1_epi64x(m), _mm256_setr_epi64x(1, 2, 4, 8));
    return _mm256_blendv_pd(a, b, _mm256_castsi256_pd(_mm256_cmpeq_epi64(bits, _mm256_setr_epi64x(1, 2, 4, 8))));
  }
};
#ifdef __AVX512F__
template <>
struct PolarDv<VAvx512> {
  static constexpr int DW = 8;
  using D = __m512d;
  static D set1(double x) { return _mm512_set1_pd(x); }
  static void pairs(const float* y, D& a0, D& a1) {
    const __m512 f =
        _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15), _mm512_loadu_ps(y));
    a0 = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
    a1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
  }
  static void pairs(const double* r, D& a0, D& a1) {
    const D x = _mm512_loadu_pd(r), y = _mm512_loadu_pd(r + 8);
    a0 = _mm512_permutex2var_pd(x, _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), y);
    a1 = _mm512_permutex2var_pd(x, _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15), y);
  }
  static void store(double* p, D v) { _mm512_storeu_pd(p, v); }
  static D radius(D a0, D a1) {
    return _mm512_sqrt_pd(_mm512_add_pd(_mm512_mul_pd(a0, a0), _mm512_mul_pd(a1, a1)));
  }
  static D mul(D a, D b) { return _mm512_mul_pd(a, b); }
  static D abs(D a) { return _mm512_abs_pd(a); }
  template <int P>
  static unsigned cmp(D a, D b) { return _mm512_cmp_pd_mask(a, b, P); }
  static unsigned sign(D a) { return _mm512_movepi64_mask(_mm512_castpd_si512(a)); }
  static D blend(unsigned m, D a, D b) { return _mm512_mask_blend_pd(static_cast<__mmask8>(m), a, b); }
};
#endif

/// Code bit planes (bit j of plane k: bit k of lane j's code) -> one code byte per lane, n lanes.
template <int NP>
inline void polar_plane_bytes(const unsigned (&plane)[NP], int n, std::uint8_t* out) {
  std::uint64_t v = 0;
  for (int k = 0; k < NP; ++k) v |= _pdep_u64(plane[k], kByteMask[1] << k);
  std::memcpy(out, &v, static_cast<std::size_t>(n));
}

/// The level-1 codes of DW pairs (formats.h polar_cell1, the same compares on fp64 lanes) as bytes.
template <class DV, int B1>
inline void polar_cells1(typename DV::D a0, typename DV::D a1, std::uint8_t* out) {
  using D = typename DV::D;
  constexpr unsigned kAll = (1u << DV::DW) - 1u;
  const D zero = DV::set1(0.0);
  const unsigned up = DV::template cmp<_CMP_GT_OQ>(a1, zero), dn = DV::template cmp<_CMP_LT_OQ>(a1, zero);
  const unsigned z1 = kAll & ~(up | dn);  // on the x axis (finite inputs)
  const unsigned p0 = DV::template cmp<_CMP_GT_OQ>(a0, zero), n0 = DV::template cmp<_CMP_LT_OQ>(a0, zero);
  const unsigned qodd = (up & ~p0) | (dn & ~n0);      // quadrants 1, 3
  const unsigned qhi = dn | (z1 & DV::sign(a0));      // quadrants 2, 3 (the axis at pi: a0 < 0 or -0)
  if constexpr (B1 == 2) {
    const unsigned pl[2] = {qodd, qhi};
    polar_plane_bytes(pl, DV::DW, out);
  } else {
    const D ax = DV::abs(a0), ay = DV::abs(a1);
    const D u = DV::blend(qodd, ax, ay), v = DV::blend(qodd, ay, ax);  // the pair turned into quadrant 0
    if constexpr (B1 == 3) {
      const unsigned pl[3] = {DV::template cmp<_CMP_GE_OQ>(v, u) & ~z1, qodd, qhi};
      polar_plane_bytes(pl, DV::DW, out);
    } else {
      const D t = DV::set1(kPolarTanPi8);
      const unsigned lo = DV::template cmp<_CMP_LT_OQ>(v, u);  // the lower octant
      const unsigned s_lo = DV::template cmp<_CMP_GE_OQ>(v, DV::mul(t, u));
      const unsigned s_hi = DV::template cmp<_CMP_LE_OQ>(u, DV::mul(t, v));
      const unsigned pl[4] = {((lo & s_lo) | (~lo & s_hi)) & ~z1, ~lo & ~z1 & kAll, qodd, qhi};
      polar_plane_bytes(pl, DV::DW, out);
    }
  }
}

/// The level 2..4 codes of DW radius pairs (formats.h polar_cell_hi: #{k : a1 > tan_k a0}) as bytes.
template <class DV, int B2>
inline void polar_cells_hi(typename DV::D a0, typename DV::D a1, const double* tk, std::uint8_t* out) {
  if constexpr (B2 == 1) {
    const unsigned pl[1] = {DV::template cmp<_CMP_GT_OQ>(a1, DV::mul(DV::set1(tk[0]), a0))};
    polar_plane_bytes(pl, DV::DW, out);
  } else {
    static_assert(B2 == 2, "level 2..4 widths 1, 2");
    const unsigned m0 = DV::template cmp<_CMP_GT_OQ>(a1, DV::mul(DV::set1(tk[0]), a0));
    const unsigned m1 = DV::template cmp<_CMP_GT_OQ>(a1, DV::mul(DV::set1(tk[1]), a0));
    const unsigned m2 = DV::template cmp<_CMP_GT_OQ>(a1, DV::mul(DV::set1(tk[2]), a0));
    const unsigned pl[2] = {m0 ^ m1 ^ m2, (m0 & m1) | (m0 & m2) | (m1 & m2)};  // m0 + m1 + m2
    polar_plane_bytes(pl, DV::DW, out);
  }
}

/// Encode: the rotation (SIMD fp32, the reference's operations), then the polar transform in fp64
/// lanes by formats.h's arithmetic: radii by correctly rounded products, sums and square roots,
/// angle cells by compares (the reference's values, so the same bytes), codes packed by byte groups.
template <class V, int B1, int B2>
void polar_encode(const PolarState& st, const float* x, std::size_t count, std::uint8_t* codes,
                  std::uint8_t* radii16) {
  using DV = PolarDv<V>;
  constexpr int DW = DV::DW;
  const int d = st.dim;
  alignas(64) float y[kMaxDim];
  alignas(64) double r[kMaxDim / 2], next[kMaxDim / 2];
  alignas(64) std::uint8_t c1[kMaxDim / 2 + 8], ch[kMaxDim / 2 + 8];
  alignas(8) std::uint8_t packed[kMaxDim / 2];  // the level 2..4 stream, whole groups of 8 codes
  const std::size_t hi_bytes = st.code_bytes - st.l1_bytes;
  for (std::size_t t = 0; t < count; ++t) {
    std::uint8_t* tc = codes + t * st.code_bytes;
    rotate_forward<V>(st.rot, x + t * static_cast<std::size_t>(d), y);
    for (int i = 0; i < d / 2; i += DW) {  // d / 2: a multiple of 8
      typename DV::D a0, a1;
      DV::pairs(y + 2 * i, a0, a1);
      DV::store(r + i, DV::radius(a0, a1));
      polar_cells1<DV, B1>(a0, a1, c1 + i);
    }
    pack_groups<B1>(c1, d / 2, tc);
    int off = 0;
    for (int l = 2; l <= 4; ++l) {
      const int cnt = d >> l;
      const double* tk = st.tanh[l - 1];
      int i = 0;
      for (; i + DW <= cnt; i += DW) {
        typename DV::D a0, a1;
        DV::pairs(r + 2 * i, a0, a1);
        DV::store(next + i, DV::radius(a0, a1));
        polar_cells_hi<DV, B2>(a0, a1, tk, ch + off + i);
      }
      for (; i < cnt; ++i) {  // head_dim 64's levels 3, 4 on AVX-512, and so on
        next[i] = polar_radius(r[2 * i], r[2 * i + 1]);
        ch[off + i] = static_cast<std::uint8_t>(polar_cell_hi(r[2 * i], r[2 * i + 1], tk, (1 << B2) - 1));
      }
      off += cnt;
      std::copy(next, next + cnt, r);
    }
    std::memset(ch + off, 0, 8);  // the last group's unused codes
    pack_groups<B2>(ch, (off + 7) & ~7, packed);
    std::memcpy(tc + st.l1_bytes, packed, hi_bytes);
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

/// Eight codes from bit BIT of a B-bit LSB-first stream of SB bytes, one per byte of the result (codes
/// past the stream's end: zero), loaded straight into registers and reading no byte past the stream.
template <int B, int BIT, int SB>
inline std::uint64_t codes8_at(const std::uint8_t* stream) {
  constexpr int byte0 = BIT / 8, sh = BIT % 8, need = (sh + 8 * B + 7) / 8, avail = SB - byte0;
  constexpr int nb = need < avail ? need : avail;
  static_assert(nb >= 1 && nb <= 8, "codes8_at");
  return _pdep_u64(load_le<nb>(stream + byte0) >> sh, kByteMask[B]);
}

/// Codes [K, K + N) (N <= V::W) of a B-bit LSB-first stream of SB bytes (one token's packed row part) as
/// 32-bit lanes, unpacked in registers as stream_codes does (a 16-byte reload of 8-byte stores would
/// miss store forwarding) at any code offset, reading no byte past the stream. Lanes past N: the
/// stream's next codes or zero.
template <class V, int B, int K, int N, int SB>
inline typename V::I codes_at(const std::uint8_t* stream) {
  static_assert(N >= 1 && N <= V::W && K * B < 8 * SB, "codes_at");
  const std::uint64_t lo = codes8_at<B, K * B, SB>(stream);
  std::uint64_t hi = 0;
  if constexpr (N > 8) hi = codes8_at<B, (K + 8) * B, SB>(stream);
  return V::u8_to_i(_mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)));
}

/// The NB (<= 16) bytes at p in the low bytes of an xmm register (the rest zero), no byte past them read.
template <int NB>
inline __m128i bytes_at(const std::uint8_t* p) {
  if constexpr (NB == 16) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  } else {
    const std::uint64_t lo = load_le<(NB < 8 ? NB : 8)>(p);
    std::uint64_t hi = 0;
    if constexpr (NB > 8) hi = load_le<NB - 8>(p + 8);
    return _mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo));
  }
}

/// Radii [P W, P W + W) of the NR fp16 radii at rad as lanes (lanes past NR: zero), converted by F16C
/// (exact, like half_to_float); no byte past the NR radii read.
template <class V, int NR, int P>
inline typename V::F radii_at(const std::uint8_t* rad) {
  constexpr int W = V::W, n = NR - P * W < W ? NR - P * W : W;
  const std::uint8_t* p = rad + 2 * P * W;
  static_assert(n >= 1, "radii_at");
  if constexpr (W == 16) {
    if constexpr (n == 16) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    else if constexpr (n <= 8) return _mm512_zextps256_ps512(_mm256_cvtph_ps(bytes_at<2 * n>(p)));
    else return _mm512_cvtph_ps(_mm256_set_m128i(bytes_at<2 * n - 16>(p + 16), bytes_at<16>(p)));
  } else {
    return _mm256_cvtph_ps(bytes_at<2 * n>(p));
  }
}

/// One level of polar_reconstruct_d: the radii r (ceil(CNT / W) vectors; lanes past CNT only reach lanes
/// no later level reads) times the cosines and sines of the level's CNT codes, codes K .. K + CNT - 1 of
/// the B-bit stream of SB bytes at `stream`, interleaved into out (2 ceil(CNT / W) vectors).
template <class V, int B, int K, int CNT, int SB>
inline void polar_level(const typename V::F* r, const std::uint8_t* stream, const float* cs, const float* sn,
                        typename V::F* out) {
  constexpr int W = V::W, NIN = (CNT + W - 1) / W;
  [&]<int... I>(std::integer_sequence<int, I...>) {
    (polar_pairs<V>(r[I], codes_at<V, B, K + I * W, (CNT - I * W < W ? CNT - I * W : W), SB>(stream), cs, sn,
                    out[2 * I], out[2 * I + 1]),
     ...);
  }(std::make_integer_sequence<int, NIN>{});
}

/// polar_reconstruct for a head_dim D (a multiple of 16 in 64..256) known at compile time, into y[D]:
/// the same products (bit-exact), with every level's codes and radii in registers, straight from the
/// token's row. Session 45's profile put ~40% of the reconstruction's samples on store-forwarding stalls
/// of the byte buffers it used (codes unpacked by 8-byte stores and reloaded 16 at a time, radii stored
/// one by one and reloaded as a vector); polar_decode_domain, the codec-domain path's reconstruction, is
/// ~60% of PolarQuant's decode attention by the same profile.
template <class V, int B1, int B2, int D>
[[gnu::always_inline]] inline void polar_reconstruct_d(const PolarState& st, const std::uint8_t* tcodes,
                                                       const std::uint8_t* rad, float* y) {
  using F = typename V::F;
  constexpr int W = V::W;
  constexpr int kL1 = D / 2 * B1 / 8;  // packed_bytes(D / 2, B1): D / 2 B1 is a multiple of 8
  constexpr int kHi = (7 * D / 16 * B2 + 7) / 8;
  static_assert(D % 16 == 0 && D >= 64 && D <= 256, "head_dim");
  constexpr auto nv = [](int cnt) { return (cnt + W - 1) / W; };
  F r4[nv(D / 16)], r3[2 * nv(D / 16)], r2[2 * nv(D / 8)], r1[2 * nv(D / 4)], out[2 * nv(D / 2)];
  r4[0] = radii_at<V, D / 16, 0>(rad);
  if constexpr (D / 16 > W) r4[1] = radii_at<V, D / 16, 1>(rad);
  const std::uint8_t* hi = tcodes + kL1;
  polar_level<V, B2, D / 4 + D / 8, D / 16, kHi>(r4, hi, st.cosh[3], st.sinh[3], r3);
  polar_level<V, B2, D / 4, D / 8, kHi>(r3, hi, st.cosh[2], st.sinh[2], r2);
  polar_level<V, B2, 0, D / 4, kHi>(r2, hi, st.cosh[1], st.sinh[1], r1);
  polar_level<V, B1, 0, D / 2, kL1>(r1, tcodes, st.cos1, st.sin1, out);
  for (int k = 0; k < D / W; ++k) V::store(y + k * W, out[k]);
}

/// One token's reconstruction y_hat into y[d]: polar_reconstruct_d at head_dim d.
using PolarRecon = void (*)(const PolarState&, const std::uint8_t* tcodes, const std::uint8_t* rad, float* y);

/// polar_reconstruct_d's instance for head_dim d (a multiple of 16 in 64..256), else nullptr (the
/// kernels then take polar_reconstruct: the same floats). Chosen once per kernel call.
template <class V, int B1, int B2>
PolarRecon polar_recon_for(int d) {
  PolarRecon f = nullptr;
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((d == 64 + 16 * I ? (f = &polar_reconstruct_d<V, B1, B2, 64 + 16 * I>, 0) : 0), ...);
  }(std::make_integer_sequence<int, 13>{});
  return f;
}

/// One kernel call's per-token state: f = polar_recon_for's choice, and the run-time path's scratch, built (and
/// zero-filled, ~11 KB) only where f is null; y() is where a token's y_hat goes when the caller needs a buffer.
struct PolarTokens {
  explicit PolarTokens(PolarRecon fn) : f(fn) {
    if (!f) s.emplace();
  }
  float* y() { return f ? yb : s->y; }
  PolarRecon f;
  std::optional<PolarScratch> s;
  alignas(64) float yb[kMaxDim];  // f's output (every float written before it is read)
};

/// polar_reconstruct_d over count tokens (code rows st.code_bytes apart, D / 16 fp16 radii each) into
/// y[count][D], inlined in one loop: the codec-domain blocks of the attention, without an indirect call (and its
/// vzeroupper) per token.
template <class V, int B1, int B2, int D>
void polar_reconstruct_block_d(const PolarState& st, const std::uint8_t* codes, const std::uint8_t* rad,
                               std::size_t count, float* y) {
  for (std::size_t t = 0; t < count; ++t)
    polar_reconstruct_d<V, B1, B2, D>(st, codes + t * st.code_bytes, rad + t * (D / 16) * 2, y + t * D);
}
using PolarReconBlock = void (*)(const PolarState&, const std::uint8_t* codes, const std::uint8_t* rad,
                                 std::size_t count, float* y);
/// polar_reconstruct_block_d's instance for head_dim d, else nullptr (as polar_recon_for).
template <class V, int B1, int B2>
PolarReconBlock polar_recon_block_for(int d) {
  PolarReconBlock f = nullptr;
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((d == 64 + 16 * I ? (f = &polar_reconstruct_block_d<V, B1, B2, 64 + 16 * I>, 0) : 0), ...);
  }(std::make_integer_sequence<int, 13>{});
  return f;
}

/// Token t's y_hat into y[d] (y may be p.y()): p.f where it is not null, else polar_reconstruct (and a copy unless
/// y is the scratch's). The same floats either way.
template <class V, int B1, int B2>
inline void polar_token(PolarTokens& p, const PolarState& st, const std::uint8_t* tcodes, const std::uint8_t* rad,
                        float* y) {
  if (p.f) return p.f(st, tcodes, rad, y);
  polar_reconstruct<V, B1, B2>(st, tcodes, rad, *p.s);
  if (y != p.s->y) std::memcpy(y, p.s->y, sizeof(float) * static_cast<std::size_t>(st.dim));
}

template <class V, int B1, int B2>
void polar_decode(const PolarState& st, const std::uint8_t* codes, const std::uint8_t* radii16, std::size_t count,
                  float* out) {
  const int d = st.dim;
  PolarTokens p(polar_recon_for<V, B1, B2>(d));
  float* y = p.y();
  for (std::size_t t = 0; t < count; ++t) {
    polar_token<V, B1, B2>(p, st, codes + t * st.code_bytes, radii16 + t * static_cast<std::size_t>(d / 16) * 2, y);
    rotate_inverse<V>(st.rot, y, out + t * static_cast<std::size_t>(d));
  }
}

template <class V, int B1, int B2>
void polar_scores(const PolarState& st, const float* qr, const std::uint8_t* codes, const std::uint8_t* radii16,
                  std::size_t count, float* out) {
  constexpr int W = V::W;
  const int d = st.dim;
  PolarTokens p(polar_recon_for<V, B1, B2>(d));
  float* y = p.y();
  for (std::size_t t = 0; t < count; ++t) {
    polar_token<V, B1, B2>(p, st, codes + t * st.code_bytes, radii16 + t * static_cast<std::size_t>(d / 16) * 2, y);
    auto acc = V::zero();
    for (int k = 0; k < d; k += W) acc = V::fma(V::load(qr + k), V::load(y + k), acc);
    out[t] = V::hsum(acc);
  }
}

template <class V, int B1, int B2>
void polar_accumulate(const PolarState& st, const std::uint8_t* codes, const std::uint8_t* radii16, std::size_t count,
                      const float* w, float* acc) {
  constexpr int W = V::W;
  const int d = st.dim;
  PolarTokens p(polar_recon_for<V, B1, B2>(d));
  float* y = p.y();
  for (std::size_t t = 0; t < count; ++t) {
    if (w[t] == 0.0f) continue;
    polar_token<V, B1, B2>(p, st, codes + t * st.code_bytes, radii16 + t * static_cast<std::size_t>(d / 16) * 2, y);
    const auto wv = V::set1(w[t]);
    for (int k = 0; k < d; k += W) V::store(acc + k, V::fma(wv, V::load(y + k), V::load(acc + k)));
  }
}

template <class V, int B1, int B2>
void polar_decode_domain(const PolarState& st, const std::uint8_t* codes, const std::uint8_t* radii16,
                         std::size_t count, float* y) {
  const int d = st.dim;
  if (const PolarReconBlock fb = polar_recon_block_for<V, B1, B2>(d)) return fb(st, codes, radii16, count, y);
  PolarTokens p(nullptr);
  for (std::size_t t = 0; t < count; ++t)
    polar_token<V, B1, B2>(p, st, codes + t * st.code_bytes, radii16 + t * static_cast<std::size_t>(d / 16) * 2,
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
