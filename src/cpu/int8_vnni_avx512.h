// The int8 dot-product pieces shared by the AttentionPrecision::kInt8 fused decode attentions at the
// AVX-512 level (tq_mse_int8_avx512.cpp: TurboQuant-MSE; kivi_int8_avx512.cpp: KIVI; rvq_int8_avx512.cpp:
// RVQ): code bytes out of
// the 8-code groups of turbokv/pack.h (32-bit group dwords, LSB-first), key sums with tokens in lanes, and
// the value quads (four tokens of one code in a dword) with the transpose of their int32 sums back to the
// kernels.h lane order. `vpdpbusd` (VNNI) adds 4 u8 x s8 products per int32 lane; `vpmultishiftqb` (VBMI)
// pulls codes into bytes. A code stream whose codes are their own integers (KIVI: the identity codebook)
// skips the look-ups (IDENT). Include only from files compiled with the AVX-512 flags.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace turbokv::cpu::detail::int8_vnni {
// Internal linkage: the including files are built with different flags (as fused_pass_avx512.h).
namespace {

/// vpmultishiftqb control for codes 4 h .. 4 h + 3 of a group (h = 0, 1): in each qword (the group
/// dwords of tokens 2k, 2k + 1), byte s <- the 8 bits from code 4 h + s of token 2k, byte 4 + s <- the
/// same code of token 2k + 1. A code's BITS bits are the low bits of its byte (the rest belongs to the
/// next codes: the look-up tables repeat every 2^BITS entries; IDENT streams mask them off).
template <int BITS>
constexpr long long code_ctrl(int h) {
  unsigned long long c = 0;
  for (int s = 0; s < 4; ++s) {
    const unsigned long long o = static_cast<unsigned long long>(BITS * (4 * h + s));
    c |= (o & 63) << (8 * s);
    c |= ((32 + o) & 63) << (8 * (s + 4));
  }
  return static_cast<long long>(c);
}

/// A 64-entry vpermb table: entry e = f(e mod 2^bits).
template <class Fn>
inline __m512i byte_table(int bits, Fn&& f) {
  alignas(64) std::uint8_t b[64];
  for (int e = 0; e < 64; ++e) b[e] = f(e % (1 << bits));
  return _mm512_load_si512(b);
}

/// q[0..d) rounded to int8 with one scale, max |q_i| / 127 (round-to-nearest), written as nbytes >= d bytes
/// (zeros past d) in the byte order group_centroids gives the codes: within each 8 coordinates, at 4 bits
/// (nibbles) 0, 2, 4, 6, 1, 3, 5, 7, else ascending. Returns the scale; sum = the sum of the int8 values.
inline float query_int8(const float* q, int d, int bits, int nbytes, std::int8_t* out, int& sum) {
  float mx = 0;
  for (int i = 0; i < d; ++i) mx = std::max(mx, std::fabs(q[i]));
  const float inv = mx > 0 ? 127.0f / mx : 0.0f;
  sum = 0;
  for (int i = 0; i < nbytes; ++i) {
    const int v = i < d ? static_cast<int>(std::nearbyint(q[i] * inv)) : 0;
    const int k = i % 8;
    out[bits == 4 ? i - k + (k % 2) * 4 + k / 2 : i] = static_cast<std::int8_t>(v);
    sum += v;
  }
  return mx / 127.0f;
}

/// One head's value weights over a pass of nblk blocks of 16 (pw: fp32, >= 0, 0 past the pass's tokens) to
/// u8: w8[0 .. 16 nblks) = round(pw / wstep) with wstep = max pw / 255, zeros for blocks nblk .. nblks - 1. A
/// pass whose largest weight is below ~7.5e-37 (exp's floor, 83+ nats under the running max) would make
/// 255 / max infinite: it is taken as all-zero (wstep 0).
inline float pass_weights(const float* pw, int nblk, int nblks, std::uint8_t* w8) {
  __m512 mx = _mm512_setzero_ps();
  for (int b = 0; b < nblk; ++b) mx = _mm512_max_ps(mx, _mm512_load_ps(pw + b * 16));
  const float m = _mm512_reduce_max_ps(mx);
  const bool some = m > 0 && std::isfinite(255.0f / m);
  const __m512 inv = _mm512_set1_ps(some ? 255.0f / m : 0.0f);
  for (int b = 0; b < nblks; ++b) {
    const __m512i q = b < nblk ? _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(pw + b * 16), inv))  // nearest
                               : _mm512_setzero_si512();
    _mm_store_si128(reinterpret_cast<__m128i*>(w8 + b * 16), _mm512_cvtusepi32_epi8(q));
  }
  return some ? m / 255.0f : 0.0f;
}

/// The u8 centroids of one code group of every token of a block (gt: token i's group dword in lane i): x0
/// holds its codes 0..3 (at 4 bits the even ones), x1 codes 4..7 (the odd ones), four a dword, token i in
/// dword i. IDENT: the codes themselves (book unused).
template <int BITS, bool IDENT = false>
[[gnu::always_inline]] inline void group_centroids(__m512i gt, __m512i book, __m512i& x0, __m512i& x1) {
  if constexpr (BITS == 4) {  // nibbles: even codes (low) and odd codes (high) of each byte, in-lane look-ups
    const __m512i m = _mm512_set1_epi8(15);
    x0 = _mm512_and_si512(gt, m);
    x1 = _mm512_and_si512(_mm512_srli_epi32(gt, 4), m);
    if constexpr (!IDENT) {
      x0 = _mm512_shuffle_epi8(book, x0);
      x1 = _mm512_shuffle_epi8(book, x1);
    }
  } else if constexpr (IDENT) {
    const __m512i m = _mm512_set1_epi8(static_cast<char>((1 << BITS) - 1));
    x0 = _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(code_ctrl<BITS>(0)), gt), m);
    x1 = _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(code_ctrl<BITS>(1)), gt), m);
  } else {
    x0 = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(code_ctrl<BITS>(0)), gt), book);
    x1 = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(code_ctrl<BITS>(1)), gt), book);
  }
}

/// out[h] = int32 sums of u8 centroid x int8 query over the block's ng code groups for GH heads, token i in lane
/// i, the centroids of group j made by centroids(j, x0, x1) (group_centroids' x0 / x1 for code group j of every
/// token of the block). qd: [head][hd4] dwords of int8 query coordinates, two a code group (group_centroids'
/// byte order: at 4 bits coordinates 8j + 0, 2, 4, 6 then 8j + 1, 3, 5, 7; else 8j + 0..3 then 8j + 4..7).
template <int GH, class Centroids>
inline void score_heads_with(int ng, Centroids&& centroids, const std::uint32_t* qd, int hd4, __m512i* out) {
  __m512i a[2][GH];
  for (int k = 0; k < 2; ++k)
    for (int h = 0; h < GH; ++h) a[k][h] = _mm512_setzero_si512();
  for (int j = 0; j < ng; ++j) {
    const std::uint32_t* qj = qd + 2 * j;
    __m512i x0, x1;
    centroids(j, x0, x1);
    for (int h = 0; h < GH; ++h) {
      a[0][h] = _mm512_dpbusd_epi32(a[0][h], x0, _mm512_set1_epi32(static_cast<int>(qj[h * hd4])));
      a[1][h] = _mm512_dpbusd_epi32(a[1][h], x1, _mm512_set1_epi32(static_cast<int>(qj[h * hd4 + 1])));
    }
  }
  for (int h = 0; h < GH; ++h) out[h] = _mm512_add_epi32(a[0][h], a[1][h]);
}

/// score_heads_with for one code stream src (ng, trow(j): token i's group dword j in lane i) and its book.
template <int GH, int BITS, bool IDENT = false, class Src>
inline void score_heads(const Src& src, const std::uint32_t* qd, int hd4, __m512i book, __m512i* out) {
  score_heads_with<GH>(
      src.ng, [&](int j, __m512i& x0, __m512i& x1) { group_centroids<BITS, IDENT>(src.trow(j), book, x0, x1); }, qd,
      hd4, out);
}

/// score_heads_with for a two-digit query (15 bits, q15 = 128 hi + lo: hi in [-127, 127], lo in [-64, 63], for
/// code streams whose per-coordinate scales differ widely, e.g. KIVI keys' outlier channels): out[h] = 128 * (sums against the hi digits) + (sums
/// against the lo digits), the codes of each group made once by centroids(j, x0, x1) (group_centroids' x0 /
/// x1 for code group j of every token of the block).
template <int GH, class Centroids>
inline void score_heads2(int ng, Centroids&& centroids, const std::uint32_t* qh, const std::uint32_t* ql, int hd4,
                         __m512i* out) {
  // One accumulator per head and digit (2 GH chains; two per head and digit spilled under GCC).
  __m512i a[GH], b[GH];
  for (int h = 0; h < GH; ++h) a[h] = b[h] = _mm512_setzero_si512();
  for (int j = 0; j < ng; ++j) {
    __m512i x0, x1;
    centroids(j, x0, x1);
    for (int h = 0; h < GH; ++h) {
      const int o = h * hd4 + 2 * j;
      a[h] = _mm512_dpbusd_epi32(a[h], x0, _mm512_set1_epi32(static_cast<int>(qh[o])));
      b[h] = _mm512_dpbusd_epi32(b[h], x0, _mm512_set1_epi32(static_cast<int>(ql[o])));
      a[h] = _mm512_dpbusd_epi32(a[h], x1, _mm512_set1_epi32(static_cast<int>(qh[o + 1])));
      b[h] = _mm512_dpbusd_epi32(b[h], x1, _mm512_set1_epi32(static_cast<int>(ql[o + 1])));
    }
  }
  for (int h = 0; h < GH; ++h) out[h] = _mm512_add_epi32(_mm512_slli_epi32(a[h], 7), b[h]);
}

/// fn(integral_constant<GH>, h0) over the G heads of a job in runs of at most MAX (GH = MAX while it fits,
/// then the rest: every GH a compile-time count). Callers whose fn holds the sums themselves mark it
/// __attribute__((always_inline)), so each GH is inlined into the caller as the switch it replaced was.
template <int MAX, class Fn>
[[gnu::always_inline]] inline void head_runs(int G, Fn&& fn) {
  static_assert(MAX >= 1 && MAX <= 8, "the rest runs cover 1..7 heads");
  int h0 = 0;
  for (; h0 + MAX <= G; h0 += MAX) fn(std::integral_constant<int, MAX>{}, h0);
  auto rest = [&](auto gh) { fn(gh, h0); };
  switch (G - h0) {
    case 1: rest(std::integral_constant<int, 1>{}); break;
    case 2: if constexpr (MAX > 2) rest(std::integral_constant<int, 2>{}); break;
    case 3: if constexpr (MAX > 3) rest(std::integral_constant<int, 3>{}); break;
    case 4: if constexpr (MAX > 4) rest(std::integral_constant<int, 4>{}); break;
    case 5: if constexpr (MAX > 5) rest(std::integral_constant<int, 5>{}); break;
    case 6: if constexpr (MAX > 6) rest(std::integral_constant<int, 6>{}); break;
    case 7: if constexpr (MAX > 7) rest(std::integral_constant<int, 7>{}); break;
    default: break;
  }
}

/// The code of a group held by byte s of half hf of a value quad: 4 hf + s (multishift), or 2 s + hf at 4
/// bits (nibbles).
template <int BITS>
constexpr int quad_code(int hf, int s) { return BITS == 4 ? 2 * s + hf : 4 * hf + s; }

/// Half hf of the codes of one token's group vector g (its 16 group dwords in lanes) as bytes: byte s of a
/// group dword = code quad_code(hf, s) (its low BITS bits; the rest masked off). ctrl: the multishift control
/// of hf (code_ctrl), mask: 2^BITS - 1 bytes.
template <int BITS>
[[gnu::always_inline]] inline __m512i code_bytes(__m512i g, int hf, __m512i ctrl, __m512i mask) {
  if constexpr (BITS == 4)  // nibbles: half 0 the even codes, half 1 the odd ones
    return _mm512_and_si512(hf ? _mm512_srli_epi32(g, 4) : g, mask);
  else
    return _mm512_and_si512(_mm512_multishift_epi64_epi8(ctrl, g), mask);
}

/// Four tokens' code_bytes m[k] (k = 0..3; zero for tokens past the pass) interleaved, four tokens a dword,
/// lanes in the order of the in-lane byte and word unpacks: out[r], 128-bit lane L, dword s = code
/// quad_code(hf, s) of group 4 L + r of the vector, byte k = token k's. (Cross-lane byte permutes compete
/// with vpdpbusd for the same pipes on Zen 4; the unpacks do not.)
[[gnu::always_inline]] inline void quad_bytes(const __m512i* m, __m512i* out) {
  const __m512i a = _mm512_unpacklo_epi8(m[0], m[1]), b = _mm512_unpackhi_epi8(m[0], m[1]);
  const __m512i c = _mm512_unpacklo_epi8(m[2], m[3]), d = _mm512_unpackhi_epi8(m[2], m[3]);
  out[0] = _mm512_unpacklo_epi16(a, c);
  out[1] = _mm512_unpackhi_epi16(a, c);
  out[2] = _mm512_unpacklo_epi16(b, d);
  out[3] = _mm512_unpackhi_epi16(b, d);
}

/// The int32 sums a[r] of quads (lanes as quad_bytes' out[r]) in the kernels.h lane order: a 4 x 4 dword
/// transpose in every 128-bit lane, z[s] lane 4 L + r = a[r] lane L dword s (group 4 L + r of the vector,
/// code quad_code(hf, s)).
[[gnu::always_inline]] inline void quad_sums(const __m512i* a, __m512i* z) {
  const __m512i t0 = _mm512_unpacklo_epi32(a[0], a[1]), t1 = _mm512_unpackhi_epi32(a[0], a[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(a[2], a[3]), t3 = _mm512_unpackhi_epi32(a[2], a[3]);
  z[0] = _mm512_unpacklo_epi64(t0, t2);
  z[1] = _mm512_unpackhi_epi64(t0, t2);
  z[2] = _mm512_unpacklo_epi64(t1, t3);
  z[3] = _mm512_unpackhi_epi64(t1, t3);
}

/// Adds a value quad's int32 sums a[r] (lanes as quad_bytes' out[r], half hf) times sc to the fp32
/// accumulator vectors of its group vector (f: the vector's 8 accumulator rows of 16 floats, the kernels.h
/// lane order): row quad_code(hf, s) += z[s] * sc.
template <int BITS>
[[gnu::always_inline]] inline void add_quad_sums(const __m512i* a, __m512 sc, int hf, float* f) {
  __m512i z[4];
  quad_sums(a, z);
  for (int s = 0; s < 4; ++s) {
    float* fs = f + quad_code<BITS>(hf, s) * 16;
    _mm512_storeu_ps(fs, _mm512_fmadd_ps(_mm512_cvtepi32_ps(z[s]), sc, _mm512_loadu_ps(fs)));
  }
}

}  // namespace
}  // namespace turbokv::cpu::detail::int8_vnni
