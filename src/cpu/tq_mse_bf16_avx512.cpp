// Fused TurboQuant-MSE decode attention with bf16 dot products
// (AttentionPrecision::kBf16, turbokv/attention.h): AVX-512 + AVX512-BF16
// (`vdpbf16ps`, `vcvtneps2bf16`). Compiled with TURBOKV_AVX512_FLAGS plus
// -mavx512bf16 (CMakeLists.txt); attention.cpp calls it only when simd_level()
// is kAvx512 and cpu_has_avx512_bf16().
//
// Same job and outputs as Kernels::attend (kernels_simd.h): keys staged and
// scored 16 tokens at a time, online softmax in fp32, value accumulator in the
// 16-lane layout of kernels.h. Differences: the softmax update and the value
// accumulation run once per pass of 64 tokens (4 score blocks), so the
// accumulators are loaded and stored once per 64 tokens, and the inner
// products take half the multiply-add instructions:
//  - scores, tokens in lanes: lane i of a bf16-pair vector holds the centroids
//    of coordinates (2p, 2p+1) of token i; one `vpmultishiftqb` pulls both codes
//    of every token out of the transposed group dwords into 16-bit indices, one
//    `vpermw` looks them up in the 32-entry bf16 codebook, one `vdpbf16ps` per
//    head adds q[2p] c + q[2p+1] c' with the broadcast bf16 query pair;
//  - values, groups in lanes: lane g holds the centroids of coordinate 8g + s of
//    tokens (i, i + 1) (word blends and 16-bit shifts of the two tokens' group
//    dwords, then `vpermw`); one `vdpbf16ps` per head adds w_i c_i + w_{i+1}
//    c_{i+1} with the broadcast bf16 weight pair (w = softmax weight * value
//    norm). An odd last token is paired with itself at weight 0.
#include "kernels_avx512_traits.h"

namespace turbokv::cpu::detail::avx512bf16 {
using T = avx512::T;
}
#define KNS avx512bf16
#define TURBOKV_KERNELS_SOURCES_ONLY
#include "kernels_simd.h"
#undef TURBOKV_KERNELS_SOURCES_ONLY
#undef KNS

namespace turbokv::cpu::detail {
namespace avx512bf16 {
namespace {

inline __m512bh as_bh(__m512i x) { return (__m512bh)x; }
inline __m512 dp(__m512 acc, __m512i a, __m512i b) { return _mm512_dpbf16_ps(acc, as_bh(a), as_bh(b)); }

/// The codebook as 32 bf16 words: word k = bf16(c[k mod 2^bits]) (vpermw reads 5 index bits).
inline __m512i bf16_codebook(const TqState& st) {
  const __m512 c = _mm512_load_ps(st.cb16);  // cb16[i] = c[i mod 2^bits]
  return (__m512i)_mm512_cvtne2ps_pbh(c, c);
}

/// 16 fp32 -> 16 bf16 (round to nearest even), i.e. 8 pairs, stored at p.
inline void store_bf16(std::uint32_t* p, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(x));
}

// ---------------------------------------------------------------- scores

/// vpmultishiftqb control for coordinate pair (2p, 2p+1): in each qword (tokens
/// 2k, 2k+1), word 0 <- bits from BITS*2p (code 2p of token 2k), word 1 <- code
/// 2p+1 of token 2k, words 2, 3 the same for token 2k+1 (32 bits up). Only the
/// low byte of each word matters (vpermw reads 5 bits; the book repeats mod 2^BITS).
template <int BITS>
constexpr long long score_ctrl(int p) {
  const unsigned long long o0 = static_cast<unsigned long long>(2 * p * BITS), o1 = o0 + BITS;
  return static_cast<long long>(o0 | o0 << 8 | o1 << 16 | o1 << 24 | (32 + o0) << 32 | (32 + o0) << 40 |
                                (32 + o1) << 48 | (32 + o1) << 56);
}

/// out[h * 16 + i] = <bf16(q_h), bf16(c[codes of token i])> (fp32 sums, no norm) for GH heads.
/// qb: [GH][hd2] bf16 pairs of the rotated queries (natural order).
template <int GH, int BITS>
inline void score_heads(const TqSrc<BITS>& src, const std::uint32_t* qb, int hd2, __m512i book, float* out) {
  constexpr int NA = 2;  // accumulator sets (pairs p mod 2; 4 sets measured no faster for 4 heads)
  __m512 a[NA][GH];
  for (int k = 0; k < NA; ++k)
    for (int h = 0; h < GH; ++h) a[k][h] = _mm512_setzero_ps();
  const __m512i c0 = _mm512_set1_epi64(score_ctrl<BITS>(0)), c1 = _mm512_set1_epi64(score_ctrl<BITS>(1));
  const __m512i c2 = _mm512_set1_epi64(score_ctrl<BITS>(2)), c3 = _mm512_set1_epi64(score_ctrl<BITS>(3));
  for (int j = 0; j < src.ng; ++j) {
    const __m512i gt = src.trow(j);
    const std::uint32_t* qj = qb + 4 * j;
    auto step = [&](__m512i ctrl, int p, __m512* acc) {
      const __m512i c = _mm512_permutexvar_epi16(_mm512_multishift_epi64_epi8(ctrl, gt), book);
      for (int h = 0; h < GH; ++h) acc[h] = dp(acc[h], c, _mm512_set1_epi32(static_cast<int>(qj[h * hd2 + p])));
    };
    step(c0, 0, a[0]);
    step(c1, 1, a[1]);
    step(c2, 2, a[2 % NA]);
    step(c3, 3, a[3 % NA]);
  }
  for (int h = 0; h < GH; ++h) {
    __m512 s = _mm512_add_ps(a[0][h], a[1][h]);
    _mm512_storeu_ps(out + h * W, s);
  }
}

template <int BITS>
void scores_block(const TqSrc<BITS>& src, const std::uint32_t* qb, int G, int hd2, __m512i book, float* out) {
  int h0 = 0;
  for (; h0 + 8 <= G; h0 += 8) score_heads<8>(src, qb + h0 * hd2, hd2, book, out + h0 * W);
  const std::uint32_t* q = qb + h0 * hd2;
  float* o = out + h0 * W;
  switch (G - h0) {
    case 1: score_heads<1>(src, q, hd2, book, o); break;
    case 2: score_heads<2>(src, q, hd2, book, o); break;
    case 3: score_heads<3>(src, q, hd2, book, o); break;
    case 4: score_heads<4>(src, q, hd2, book, o); break;
    case 5: score_heads<5>(src, q, hd2, book, o); break;
    case 6: score_heads<6>(src, q, hd2, book, o); break;
    case 7: score_heads<7>(src, q, hd2, book, o); break;
    default: break;
  }
}

// ---------------------------------------------------------------- values

constexpr int kPassTokens = 64;  ///< tokens per value pass (4 score blocks): the accumulators are loaded once per pass

/// The value codes of one pass: group(i, v) reads token i's group vector v, in place
/// unless a group load could run past the block, then from a zero-padded copy.
template <int BITS>
struct ValueRows {
  const std::uint8_t* base = nullptr;
  std::size_t stride = 0;
  alignas(64) std::uint8_t copy[kPassTokens * (kMaxDim / 2) + 64];
  void set(const TqState& st, const std::uint8_t* block, std::size_t n, std::size_t t, int cnt) {
    constexpr int L = T::template group_bytes<BITS>();
    const int nv = (st.ng + W - 1) / W;
    stride = st.code_bytes;
    const std::size_t last = (t + cnt - 1) * st.code_bytes + static_cast<std::size_t>(nv - 1) * W * BITS + L;
    if (last <= n * (st.code_bytes + 2)) {  // within the block (codes, then norms)
      base = block + t * st.code_bytes;
    } else {
      const std::size_t bytes = static_cast<std::size_t>(cnt) * st.code_bytes;
      std::memcpy(copy, block + t * st.code_bytes, bytes);
      std::memset(copy + bytes, 0, 64);
      base = copy;
    }
  }
  __m512i group(int i, int v) const { return T::template groups<BITS>(base + i * stride + v * W * BITS); }
};

/// 16-bit indices for code s of two tokens: lane g, word 0 <- code s of group g of
/// token i (gi), word 1 <- of token i + 1 (gn), in the low BITS bits. b0 / b1: the
/// low / high 16 bits of both tokens' group dwords, word-interleaved.
template <int BITS, int S>
inline __m512i value_index(__m512i gi, __m512i gn, __m512i b0, __m512i b1) {
  constexpr int r = BITS * S;
  if constexpr (r % 16 + BITS <= 16) {  // the code lies inside one 16-bit half
    const __m512i b = r < 16 ? b0 : b1;
    if constexpr (r % 16 == 0)
      return b;
    else
      return _mm512_srli_epi16(b, r % 16);
  } else {  // straddles the halves (3-bit code 5): shift each token's dword separately
    const __m512i hi = r <= 16 ? _mm512_slli_epi32(gn, 16 - r) : _mm512_srli_epi32(gn, r - 16);
    return _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(gi, r), hi);
  }
}

/// acc[h] += w[h][i] c[code_i] + w[h][i+1] c[code_{i+1}] for codes S0 .. S0 + SC - 1 of
/// group vector v, over the pass's token pairs. pwb: [16 heads][kPassTokens / 2] bf16 weight pairs.
template <int GH, int S0, int SC, int BITS, int... S>
inline void value_chunk(const ValueRows<BITS>& src, int cnt, const std::uint32_t* pwb, float* acc, int P, int h0,
                        int v, __m512i book, std::integer_sequence<int, S...>) {
  __m512 a[GH][SC];
  float* base = acc + h0 * P + (v * 8 + S0) * W;
  for (int h = 0; h < GH; ++h) ((a[h][S] = _mm512_loadu_ps(base + h * P + S * W)), ...);
  auto pair = [&](__m512i gi, __m512i gn, int m) {
    __m512i w[GH];
    for (int h = 0; h < GH; ++h) w[h] = _mm512_set1_epi32(static_cast<int>(pwb[(h0 + h) * (kPassTokens / 2) + m]));
    const __m512i b0 = _mm512_mask_blend_epi16(0xAAAAAAAAu, gi, _mm512_slli_epi32(gn, 16));
    const __m512i b1 = _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(gi, 16), gn);
    auto step = [&](auto sc) {
      constexpr int s = decltype(sc)::value;
      const __m512i c = _mm512_permutexvar_epi16(value_index<BITS, S0 + s>(gi, gn, b0, b1), book);
      for (int h = 0; h < GH; ++h) a[h][s] = dp(a[h][s], c, w[h]);
    };
    (step(std::integral_constant<int, S>{}), ...);
  };
  int i = 0;
  for (; i + 2 <= cnt; i += 2) pair(src.group(i, v), src.group(i + 1, v), i / 2);
  if (i < cnt) {  // odd last token: paired with itself, its partner's weight is 0
    const __m512i g = src.group(i, v);
    pair(g, g, i / 2);
  }
  for (int h = 0; h < GH; ++h) ((_mm512_storeu_ps(base + h * P + S * W, a[h][S])), ...);
}

template <int GH, int BITS, int... C>
inline void value_heads(const ValueRows<BITS>& src, int nv, int cnt, const std::uint32_t* pwb, float* acc, int P,
                        int h0, __m512i book, std::integer_sequence<int, C...>) {
  constexpr int SC = T::sc(GH);
  for (int v = 0; v < nv; ++v)
    (value_chunk<GH, C * SC, SC>(src, cnt, pwb, acc, P, h0, v, book, std::make_integer_sequence<int, SC>{}), ...);
}

template <int GH, int BITS>
inline void value_group(const ValueRows<BITS>& src, int nv, int cnt, const std::uint32_t* pwb, float* acc, int P,
                        int h0, __m512i book) {
  value_heads<GH>(src, nv, cnt, pwb, acc, P, h0, book, std::make_integer_sequence<int, 8 / T::sc(GH)>{});
}

template <int BITS>
void values_pass(const ValueRows<BITS>& src, int nv, int cnt, const std::uint32_t* pwb, float* acc, int G, int P,
                 __m512i book) {
  int h0 = 0;
  for (; h0 + 4 <= G; h0 += 4) value_group<4>(src, nv, cnt, pwb, acc, P, h0, book);
  switch (G - h0) {
    case 1: value_group<1>(src, nv, cnt, pwb, acc, P, h0, book); break;
    case 2: value_group<2>(src, nv, cnt, pwb, acc, P, h0, book); break;
    case 3: value_group<3>(src, nv, cnt, pwb, acc, P, h0, book); break;
    default: break;
  }
}

// ---------------------------------------------------------------- the fused loop

/// Passes of up to 64 tokens: scores of 4 blocks of 16 (keys staged and transposed per
/// block), one online-softmax update per head for the pass, one value pass.
template <int KB, int VB>
void attend_bf16(const AttnJob& j) {
  TqSrc<KB> ks(*j.ks, j.kcodes, j.n);
  ks.transpose = true;
  const TqState& vst = *j.vs;
  ValueRows<VB> vrows;
  const int d = j.ks->dim, hd2 = d / 2, G = j.G;
  const int P = layout_floats(j.ks->ng, W), vnv = (vst.ng + W - 1) / W;
  const __m512i kbook = bf16_codebook(*j.ks), vbook = bf16_codebook(vst);
  // The rotated queries (fp32, natural order) as bf16 pairs: qb[h * hd2 + m] = (q[2m], q[2m + 1]).
  alignas(64) std::uint32_t qb[16 * kMaxDim / 2];
  for (int h = 0; h < G; ++h)
    for (int k = 0; k < d; k += W) store_bf16(qb + h * hd2 + k / 2, _mm512_loadu_ps(j.qp + h * d + k));
  alignas(64) float dots[16 * W];
  alignas(64) float sc[16 * kPassTokens];  // [head][token of the pass] logits (-inf past the end)
  alignas(64) float vn[kPassTokens];       // value norms of the pass
  alignas(64) std::uint32_t pwb[16 * kPassTokens / 2];
  alignas(64) float lv[16 * W];
  float* m = j.m;
  float* acc = j.acc;
  for (int h = 0; h < G; ++h) {
    m[h] = -INFINITY;
    _mm512_storeu_ps(lv + h * W, _mm512_setzero_ps());
  }
  std::fill(acc, acc + static_cast<std::size_t>(G) * P, 0.0f);
  const __m512 scale = _mm512_set1_ps(j.scale);
  const float softcap = j.softcap;
  const std::uint8_t* vnorms = j.vcodes + j.n * vst.code_bytes;
  for (std::size_t t = j.t0; t < j.t1; t += kPassTokens) {
    const int pcnt = static_cast<int>(std::min<std::size_t>(kPassTokens, j.t1 - t));
    const int nblk = (pcnt + TB - 1) / TB;
    for (int b = 0; b < nblk; ++b) {  // scores, 16 tokens at a time
      const int cnt = std::min(TB, pcnt - b * TB);
      const std::size_t tb = t + static_cast<std::size_t>(b) * TB;
      ks.stage(tb, cnt);
      scores_block(ks, qb, G, hd2, kbook, dots);
      const __m512 kn = _mm512_mul_ps(ks.norm_vec(), scale);
      for (int h = 0; h < G; ++h) {
        __m512 s = _mm512_mul_ps(_mm512_loadu_ps(dots + h * W), kn);
        if (softcap > 0) {
          alignas(64) float tmp[TB];
          _mm512_store_ps(tmp, s);
          for (int i = 0; i < TB; ++i) tmp[i] = softcap * std::tanh(tmp[i] / softcap);
          s = _mm512_load_ps(tmp);
        }
        if (cnt < TB) s = T::tail(s, cnt, -INFINITY);
        _mm512_store_ps(sc + h * kPassTokens + b * TB, s);
      }
      if (cnt == TB) {
        _mm512_store_ps(vn + b * TB, T::from_f16(reinterpret_cast<const std::uint16_t*>(vnorms + 2 * tb)));
      } else {
        for (int i = 0; i < TB; ++i)
          vn[b * TB + i] = i < cnt ? half_to_float(static_cast<std::uint16_t>(vnorms[2 * (tb + i)] |
                                                                             (vnorms[2 * (tb + i) + 1] << 8)))
                                   : 0.0f;
      }
    }
    for (int h = 0; h < G; ++h) {  // online softmax in fp32 over the pass
      const float* sh = sc + h * kPassTokens;
      __m512 mx = _mm512_load_ps(sh);
      for (int b = 1; b < nblk; ++b) mx = _mm512_max_ps(mx, _mm512_load_ps(sh + b * TB));
      const float bm = _mm512_reduce_max_ps(mx);
      if (bm > m[h]) {  // the running max moves: rescale this head's state
        const __m512 va = _mm512_set1_ps(std::exp(m[h] - bm));  // 0 on the first pass
        _mm512_storeu_ps(lv + h * W, _mm512_mul_ps(_mm512_loadu_ps(lv + h * W), va));
        float* a = acc + static_cast<std::size_t>(h) * P;
        for (int f = 0; f < P; f += W) _mm512_storeu_ps(a + f, _mm512_mul_ps(_mm512_loadu_ps(a + f), va));
        m[h] = bm;
      }
      const __m512 mh = _mm512_set1_ps(m[h]);
      __m512 lsum = _mm512_loadu_ps(lv + h * W);
      for (int b = 0; b < nblk; ++b) {
        __m512 p = T::exp(_mm512_sub_ps(_mm512_load_ps(sh + b * TB), mh));
        const int cnt = std::min(TB, pcnt - b * TB);
        if (cnt < TB) p = T::tail(p, cnt, 0.0f);
        lsum = _mm512_add_ps(lsum, p);
        store_bf16(pwb + h * (kPassTokens / 2) + b * (TB / 2), _mm512_mul_ps(p, _mm512_load_ps(vn + b * TB)));
      }
      _mm512_storeu_ps(lv + h * W, lsum);
    }
    vrows.set(vst, j.vcodes, j.n, t, pcnt);
    values_pass(vrows, vnv, pcnt, pwb, acc, G, P, vbook);
  }
  for (int h = 0; h < G; ++h) j.l[h] = _mm512_reduce_add_ps(_mm512_loadu_ps(lv + h * W));
}

template <int KB>
void attend_k(const AttnJob& j) {
  switch (j.vs->bits) {
    case 1: attend_bf16<KB, 1>(j); break;
    case 2: attend_bf16<KB, 2>(j); break;
    case 3: attend_bf16<KB, 3>(j); break;
    default: attend_bf16<KB, 4>(j); break;
  }
}

}  // namespace
}  // namespace avx512bf16

void avx512_bf16_attend(const AttnJob& j) {
  switch (j.ks->bits) {
    case 1: avx512bf16::attend_k<1>(j); break;
    case 2: avx512bf16::attend_k<2>(j); break;
    case 3: avx512bf16::attend_k<3>(j); break;
    default: avx512bf16::attend_k<4>(j); break;
  }
}

}  // namespace turbokv::cpu::detail
