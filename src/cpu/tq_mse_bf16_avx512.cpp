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
// avx512_bf16_attend_split does the same for the jobs of the fractional-width
// kernel (SplitAttnJob, CodecAttentionPath::kTqMseSplitFused): see "fractional
// widths" below.
#include "fused_pass_avx512.h"
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

using fused_pass::load_scalars;
using fused_pass::pass_loop;
using fused_pass::kPassTokens;
using fused_pass::prefetch_rows;
using fused_pass::ValueRows;
using fused_pass::SplitPart;
using fused_pass::split_part;
using fused_pass::as_split_key_source;

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
template <int GH, int BITS, template <int> class Src>
inline void score_heads(const Src<BITS>& src, const std::uint32_t* qb, int hd2, __m512i book, float* out) {
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

template <int BITS, template <int> class Src>
void scores_block(const Src<BITS>& src, const std::uint32_t* qb, int G, int hd2, __m512i book, float* out) {
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
  alignas(64) float vn[kPassTokens];  // value norms of the pass
  alignas(64) std::uint32_t pwb[16 * kPassTokens / 2];
  const __m512 scale = _mm512_set1_ps(j.scale);
  const std::uint8_t* vnorms = j.vcodes + j.n * vst.code_bytes;
  pass_loop(
      j, j.acc, P,
      [&](std::size_t tb, int cnt, int b, float* dots) {
        ks.stage(tb, cnt);
        scores_block(ks, qb, G, hd2, kbook, dots);
        const __m512 kn = _mm512_mul_ps(ks.norm_vec(), scale);
        for (int h = 0; h < G; ++h) _mm512_storeu_ps(dots + h * W, _mm512_mul_ps(_mm512_loadu_ps(dots + h * W), kn));
        load_scalars(vnorms, 1, 0, tb, cnt, vn + b * TB);
      },
      [&](int h, int b, __m512 p) {  // bf16 weight pairs p * ||v||
        store_bf16(pwb + h * (kPassTokens / 2) + b * (TB / 2), _mm512_mul_ps(p, _mm512_load_ps(vn + b * TB)));
      },
      [&](std::size_t t, int pcnt, int) {
        vrows.set(vst, j.vcodes, j.n, t, pcnt);
        values_pass(vrows, vnv, pcnt, pwb, j.acc, G, P, vbook);
      });
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

// ---------------------------------------------------------------- fractional widths (SplitAttnJob)
//
// The same passes for the jobs of CodecAttentionPath::kTqMseSplitFused: keys and values each either
// fractional (the outlier split, SplitHeadState: two code streams a row, each with its own codebook
// and fp16 norm) or at an integer width (TqState). Keys: every code stream staged by TqSrc and scored
// by scores_block; a fractional key's score is ||x_o|| s_o + ||x_r|| s_r (each part's bf16 dot
// products summed in fp32, then times its norm in fp32). Values: weight pairs bf16(p ||x_o||) and
// bf16(p ||x_r||); parts in separate layouts (not SplitHeadState::packed) go through values_pass one
// stream at a time; packed parts (head_dim <= 128) share each register as in the fp32 kernel
// (PackedVals: per-lane shifts, one 32-word book holding both codebooks), so one vdpbf16ps serves
// both parts. Keys and values are dispatched separately (KeySide / ValSide, one virtual call per
// block or pass), so 7 key kinds x 7 value kinds take 14 instantiations.

/// Scores of a job's keys, one block of up to 16 tokens at a time.
struct KeySide {
  virtual ~KeySide() = default;
  /// out[h * 16 + i] = score of token t + i for head h (norms applied, softmax scale not).
  virtual void score(std::size_t t, int cnt, float* out) = 0;
};

/// Integer-width keys: one code stream, as attend_bf16.
template <int KB>
struct IntKeys final : KeySide {
  TqSrc<KB> src;
  __m512i book;
  const std::uint32_t* qb;
  int G, hd2;
  IntKeys(const SplitAttnJob& j, const std::uint32_t* q, int hd2_)
      : src(*j.ks, j.kcodes, j.n), book(bf16_codebook(*j.ks)), qb(q), G(j.G), hd2(hd2_) {
    src.transpose = true;
  }
  void score(std::size_t t, int cnt, float* out) override {
    src.stage(t, cnt);
    scores_block(src, qb, G, hd2, book, out);
    const __m512 kn = src.norm_vec();
    for (int h = 0; h < G; ++h) _mm512_storeu_ps(out + h * W, _mm512_mul_ps(_mm512_loadu_ps(out + h * W), kn));
  }
};

/// A fractional key's scores from its two parts' dots (per head, W tokens in lanes):
/// out = ||x_o|| out + ||x_r|| rest, the norms n0, n1 per token (W lanes each).
inline void combine_parts(float* out, const float* rest, const float* n0, const float* n1, int G) {
  const __m512 a = _mm512_load_ps(n0), b = _mm512_load_ps(n1);
  for (int h = 0; h < G; ++h)
    _mm512_storeu_ps(out + h * W,
                     _mm512_fmadd_ps(b, _mm512_load_ps(rest + h * W), _mm512_mul_ps(a, _mm512_loadu_ps(out + h * W))));
}

/// Fractional keys: the two parts as two code streams (outlier part BL + 1 bits, the rest BL bits).
template <int BL>
struct SplitKeys final : KeySide {
  TqSrc<BL + 1> hi;
  TqSrc<BL> lo;
  __m512i book0, book1;
  const std::uint32_t* qb;
  int G, hd2, q1;
  std::size_t row;
  const std::uint8_t* scal;
  alignas(64) float rest[16 * W];
  alignas(64) float nrm[2][TB];
  SplitKeys(const SplitAttnJob& j, const std::uint32_t* q, int hd2_)
      : hi(j.kx->part[0], j.kcodes + j.kx->code_offset[0], j.n), lo(j.kx->part[1], j.kcodes + j.kx->code_offset[1], j.n),
        book0(bf16_codebook(j.kx->part[0])), book1(bf16_codebook(j.kx->part[1])), qb(q), G(j.G), hd2(hd2_),
        q1(j.kx->part[0].dim / 2), row(j.kx->row_bytes), scal(j.kcodes + j.n * j.kx->row_bytes) {
    as_split_key_source(hi, split_part(*j.kx, j.kcodes, j.n, 0));
    as_split_key_source(lo, split_part(*j.kx, j.kcodes, j.n, 1));
  }
  void score(std::size_t t, int cnt, float* out) override {
    prefetch_rows(hi.block, (t + 2 * TB) * row, std::min((t + 3 * TB) * row, hi.block_bytes));  // two blocks ahead
    hi.stage(t, cnt);
    lo.stage(t, cnt);
    load_scalars(scal, 2, 0, t, cnt, nrm[0]);
    load_scalars(scal, 2, 1, t, cnt, nrm[1]);
    scores_block(hi, qb, G, hd2, book0, out);
    scores_block(lo, qb + q1, G, hd2, book1, rest);
    combine_parts(out, rest, nrm[0], nrm[1], G);
  }
};

/// Rows of BITS-wide code groups with tokens in lanes (row j at gt + 16 j), a key source for scores_block.
template <int BITS>
struct Rows {
  const std::int32_t* gt;
  int ng;
  __m512i trow(int j) const { return _mm512_load_si512(gt + j * TB); }
};

/// Fractional keys whose parts share one register (SplitHeadState::packed, head_dim <= 128): each token's
/// groups loaded packed as in the fp32 kernel (SplitPacked), one transpose for both parts, then the
/// outlier rows [0, ng) and the rest's rows [ng, 2 ng) scored as two streams.
template <int BL>
struct PackedKeys final : KeySide {
  static constexpr int BH = BL + 1;
  const std::uint8_t* codes;
  const std::uint8_t* scal;
  std::size_t row, avail, hoff, need;
  __mmask16 rest;
  __m512i book0, book1;
  const std::uint32_t* qb;
  int G, hd2, q1;
  alignas(64) std::int32_t gt[W * TB];
  alignas(64) float out1[16 * W];
  alignas(64) float nrm[2][TB];
  Rows<BH> r0;
  Rows<BL> r1;
  PackedKeys(const SplitAttnJob& j, const std::uint32_t* q, int hd2_)
      : codes(j.kcodes), scal(j.kcodes + j.n * j.kx->row_bytes), row(j.kx->row_bytes),
        avail(j.n * (j.kx->row_bytes + 4)), book0(bf16_codebook(j.kx->part[0])), book1(bf16_codebook(j.kx->part[1])),
        qb(q), G(j.G), hd2(hd2_), q1(j.kx->part[0].dim / 2), r0{gt, j.kx->part[0].ng},
        r1{gt + j.kx->part[0].ng * TB, j.kx->part[1].ng} {
    const int ng = j.kx->part[0].ng;
    hoff = j.kx->code_offset[1] - static_cast<std::size_t>(ng) * BL;  // a BL-bit load here: the rest's group j - ng in lane j
    need = std::max<std::size_t>(T::template group_bytes<BH>(), hoff + T::template group_bytes<BL>());
    rest = static_cast<__mmask16>(0xFFFFu << ng);
  }
  void score(std::size_t t, int cnt, float* out) override {
    prefetch_rows(codes, (t + 2 * TB) * row, std::min((t + 3 * TB) * row, avail));  // two blocks ahead
    __m512i r[W];
    for (int i = 0; i < TB; ++i) {
      if (i >= cnt) {
        r[i] = _mm512_setzero_si512();
        continue;
      }
      const std::size_t o = (t + i) * row;
      const std::uint8_t* src = codes + o;
      alignas(64) std::uint8_t tmp[256];
      if (o + need > avail) {  // would read past the block: copy what is there
        std::memset(tmp, 0, sizeof tmp);
        std::memcpy(tmp, src, std::min(need, avail - o));
        src = tmp;
      }
      r[i] = _mm512_mask_blend_epi32(rest, T::template groups<BH>(src), T::template groups<BL>(src + hoff));
    }
    T::transpose(r);
    for (int k = 0; k < W; ++k) _mm512_store_si512(gt + k * TB, r[k]);
    load_scalars(scal, 2, 0, t, cnt, nrm[0]);
    load_scalars(scal, 2, 1, t, cnt, nrm[1]);
    scores_block(r0, qb, G, hd2, book0, out);
    scores_block(r1, qb + q1, G, hd2, book1, out1);
    combine_parts(out, out1, nrm[0], nrm[1], G);
  }
};

/// One value code stream: codes at `codes` (token stride `stride`, `avail` bytes readable), fp16 norms
/// `per` a token at `scal` (this stream's: `which`), accumulated at acc + off in the layout of its ng.
template <int BITS>
struct ValPart {
  ValueRows<BITS> rows;
  const std::uint8_t* codes = nullptr;
  const std::uint8_t* scal = nullptr;
  std::size_t stride = 0, avail = 0;
  int per = 1, which = 0, nv = 1, off = 0;
  __m512i book;
  void init(const TqState& st, const std::uint8_t* c, std::size_t stride_, std::size_t avail_, const std::uint8_t* sc,
            int per_, int which_, int off_) {
    codes = c, stride = stride_, avail = avail_, scal = sc, per = per_, which = which_, off = off_;
    nv = (st.ng + W - 1) / W;
    book = bf16_codebook(st);
  }
  /// p: [G][kPassTokens] softmax weights of tokens [t, t + pcnt) (0 past pcnt); pwb: scratch.
  void run(std::size_t t, int pcnt, const float* p, int G, float* acc, int AP, std::uint32_t* pwb) {
    alignas(64) float vn[kPassTokens];
    const int nblk = (pcnt + TB - 1) / TB;
    for (int b = 0; b < nblk; ++b)
      load_scalars(scal, per, which, t + static_cast<std::size_t>(b) * TB, std::min(TB, pcnt - b * TB), vn + b * TB);
    for (int h = 0; h < G; ++h)
      for (int b = 0; b < nblk; ++b)
        store_bf16(pwb + h * (kPassTokens / 2) + b * (TB / 2),
                   _mm512_mul_ps(_mm512_load_ps(p + h * kPassTokens + b * TB), _mm512_load_ps(vn + b * TB)));
    rows.set_at(codes, stride, avail, nv, t, pcnt);
    values_pass(rows, nv, pcnt, pwb, acc + off, G, AP, book);
  }
};

/// Values of a job: accumulator acc[G][AP] (j.acc, j.P; zeroed and rescaled by the loop).
struct ValSide {
  float* acc = nullptr;
  int AP = 0;
  virtual ~ValSide() = default;
  virtual void pass(std::size_t t, int pcnt, const float* p, int G, std::uint32_t* pwb) = 0;
};

template <int VB>
struct IntVals final : ValSide {
  ValPart<VB> v;
  explicit IntVals(const SplitAttnJob& j) {
    const TqState& st = *j.vs;
    v.init(st, j.vcodes, st.code_bytes, j.n * (st.code_bytes + 2), j.vcodes + j.n * st.code_bytes, 1, 0, 0);
    acc = j.acc;
    AP = j.P;
  }
  void pass(std::size_t t, int pcnt, const float* p, int G, std::uint32_t* pwb) override {
    v.run(t, pcnt, p, G, acc, AP, pwb);
  }
};

/// Fractional values whose parts do not share a register (not SplitHeadState::packed): two streams,
/// part 1 at split_acc_offset.
template <int BL>
struct SplitVals final : ValSide {
  ValPart<BL + 1> v0;
  ValPart<BL> v1;
  explicit SplitVals(const SplitAttnJob& j) {
    const SplitHeadState& x = *j.vx;
    const SplitPart p0 = split_part(x, j.vcodes, j.n, 0), p1 = split_part(x, j.vcodes, j.n, 1);
    v0.init(x.part[0], p0.codes, x.row_bytes, p0.avail, p0.scal, 2, 0, 0);
    v1.init(x.part[1], p1.codes, x.row_bytes, p1.avail, p1.scal, 2, 1, x.split_acc_offset(W));
    acc = j.acc;
    AP = j.P;
  }
  void pass(std::size_t t, int pcnt, const float* p, int G, std::uint32_t* pwb) override {
    v0.run(t, pcnt, p, G, acc, AP, pwb);
    v1.run(t, pcnt, p, G, acc, AP, pwb);
  }
};

/// 16-bit indices of code S of packed groups (SplitHeadState::packed) for two tokens: words of lanes
/// [0, ng) hold the outlier part's BL + 1-bit codes, lanes [ng, 16) the rest's BL-bit codes, so code S
/// starts at bit r = (BL + 1) S or BL S of the group dword: per-word variable shifts of the low (b0) and
/// high (b1) halves (vpsrlvw / vpsllvw give 0 for counts >= 16), only the terms some lane needs, then
/// (x & 15) | 16 * (rest lane): the 32-word book holds the outlier codebook at 0 and the rest's at 16.
template <int BL, int S>
inline __m512i packed_index(__m512i b0, __m512i b1, const __m512i* cnt, __m512i m15, __m512i off) {
  constexpr int BH = BL + 1, r0 = BH * S, r1 = BL * S;
  constexpr bool A = r0 < 16 || r1 < 16;  // some code starts in the low half
  constexpr bool B = (r0 < 16 && r0 + BH > 16) || (r1 < 16 && r1 + BL > 16);  // ... and straddles
  constexpr bool C = r0 >= 16 || r1 >= 16;  // some code lies in the high half
  __m512i x;
  if constexpr (S == 0) {
    x = b0;
  } else if constexpr (!A) {
    x = _mm512_srlv_epi16(b1, cnt[2]);
  } else {
    x = _mm512_srlv_epi16(b0, cnt[0]);
    if constexpr (B && C)
      x = _mm512_ternarylogic_epi32(x, _mm512_sllv_epi16(b1, cnt[1]), _mm512_srlv_epi16(b1, cnt[2]), 0xFE);  // a | b | c
    else if constexpr (B)
      x = _mm512_or_si512(x, _mm512_sllv_epi16(b1, cnt[1]));
    else if constexpr (C)
      x = _mm512_or_si512(x, _mm512_srlv_epi16(b1, cnt[2]));
  }
  return _mm512_ternarylogic_epi32(x, m15, off, 0xEA);  // (x & m15) | off
}

/// Packed fractional values: each token's two parts in one group vector (lanes as SplitPackedValSrc,
/// kernels_simd.h), weight pairs bf16(p ||x_o||) in the outlier lanes and bf16(p ||x_r||) in the rest,
/// accumulated straight into the packed layout.
template <int BL>
struct PackedVals final : ValSide {
  static constexpr int BH = BL + 1;
  const std::uint8_t* codes;
  const std::uint8_t* scal;
  std::size_t row, avail, hoff, need;
  int ng;
  __mmask16 rest;  // lanes >= ng
  __m512i book, m15, off;
  __m512i cnt[8][3];  // per code: counts for b0 >> r, b1 << (16 - r), b1 >> (r - 16)
  alignas(64) std::int32_t g[kPassTokens * W];  // the pass's packed group vectors [token][lane]
  alignas(64) std::uint32_t pw1[16 * kPassTokens / 2];
  __m512i wv[4 * kPassTokens / 2];  // [head of the group][pair]
  explicit PackedVals(const SplitAttnJob& j) {
    const SplitHeadState& x = *j.vx;
    codes = j.vcodes;
    row = x.row_bytes;
    avail = j.n * (x.row_bytes + 4);
    scal = j.vcodes + j.n * x.row_bytes;
    ng = x.part[0].ng;
    hoff = x.code_offset[1] - static_cast<std::size_t>(ng) * BL;  // a BL-bit load here: the rest's group j - ng in lane j
    need = std::max<std::size_t>(T::template group_bytes<BH>(), hoff + T::template group_bytes<BL>());
    rest = static_cast<__mmask16>(0xFFFFu << ng);
    book = (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(x.part[1].cb16), _mm512_load_ps(x.part[0].cb16));
    m15 = _mm512_set1_epi16(15);
    off = _mm512_mask_set1_epi32(_mm512_setzero_si512(), rest, 0x00100010);
    for (int s = 0; s < 8; ++s) {
      const int r0 = BH * s, r1 = BL * s;
      cnt[s][0] = _mm512_mask_set1_epi32(_mm512_set1_epi32(r0 * 0x10001), rest, r1 * 0x10001);
      auto w = [](int v) { return static_cast<int>(static_cast<std::uint16_t>(v) * 0x10001u); };
      cnt[s][1] = _mm512_mask_set1_epi32(_mm512_set1_epi32(w(16 - r0)), rest, w(16 - r1));
      cnt[s][2] = _mm512_mask_set1_epi32(_mm512_set1_epi32(w(r0 - 16)), rest, w(r1 - 16));
    }
    acc = j.acc;
    AP = j.P;
  }
  void stage(std::size_t t, int pcnt) {
    const __m512i zero = _mm512_setzero_si512();
    for (int i = 0; i < pcnt; ++i) {
      const std::size_t o = (t + i) * row;
      const std::uint8_t* src = codes + o;
      alignas(64) std::uint8_t tmp[256];
      if (o + need > avail) {  // would read past the block: copy what is there
        std::memset(tmp, 0, sizeof tmp);
        std::memcpy(tmp, src, std::min(need, avail - o));
        src = tmp;
      }
      _mm512_store_si512(g + i * W, _mm512_mask_blend_epi32(rest, T::template groups<BH>(src),
                                                            T::template groups<BL>(src + hoff)));
    }
    if (pcnt % 2) _mm512_store_si512(g + pcnt * W, zero);
  }
  /// acc[h0 + h] codes S0 .. S0 + SC - 1 += the pass's token pairs with the weight vectors wv. pf: codes
  /// of the next pass (or nullptr), prefetched pf_tokens tokens' worth a pair at a time (the pass's rows
  /// are staged in one go, which would otherwise wait on memory).
  template <int GH, int S0, int SC, int... S>
  void chunk(int pcnt, int h0, const std::uint8_t* pf, int pf_tokens,
             std::integer_sequence<int, S...>) {
    __m512 a[GH][SC];
    float* base = acc + h0 * AP + S0 * W;
    for (int h = 0; h < GH; ++h) ((a[h][S] = _mm512_loadu_ps(base + h * AP + S * W)), ...);
    for (int i = 0; i < pcnt; i += 2) {  // an odd last token is paired with zero codes at weight 0
      const int m = i / 2;
      if (pf && i + 2 <= pf_tokens) {
        _mm_prefetch(reinterpret_cast<const char*>(pf + i * row), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(pf + (i + 2) * row - 1), _MM_HINT_T0);
      }
      const __m512i* w = wv + m;  // head h: w[h * kPassTokens / 2]
      const __m512i gi = _mm512_load_si512(g + i * W), gn = _mm512_load_si512(g + (i + 1) * W);
      const __m512i b0 = _mm512_mask_blend_epi16(0xAAAAAAAAu, gi, _mm512_slli_epi32(gn, 16));
      const __m512i b1 = _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(gi, 16), gn);
      auto step = [&](auto sc) {
        constexpr int s = decltype(sc)::value;
        const __m512i c = _mm512_permutexvar_epi16(packed_index<BL, S0 + s>(b0, b1, cnt[S0 + s], m15, off), book);
        for (int h = 0; h < GH; ++h) a[h][s] = dp(a[h][s], c, _mm512_load_si512(w + h * (kPassTokens / 2)));
      };
      (step(std::integral_constant<int, S>{}), ...);
    }
    for (int h = 0; h < GH; ++h) ((_mm512_storeu_ps(base + h * AP + S * W, a[h][S])), ...);
  }
  template <int GH, int... C>
  void heads(int pcnt, int h0, const std::uint8_t* pf, int pf_tokens,
             std::integer_sequence<int, C...>) {
    constexpr int SC = T::sc(GH);
    (chunk<GH, C * SC, SC>(pcnt, h0, C == 0 ? pf : nullptr, pf_tokens, std::make_integer_sequence<int, SC>{}),
     ...);
  }
  template <int GH>
  void group(int pcnt, const std::uint32_t* pw0, int h0, const std::uint8_t* pf, int pf_tokens) {
    // The group's weight vectors, once for all its chunks: outlier lanes bf16(p ||x_o||), the rest bf16(p ||x_r||).
    for (int h = 0; h < GH; ++h)
      for (int m = 0; m < (pcnt + 1) / 2; ++m) {
        const int k = (h0 + h) * (kPassTokens / 2) + m;
        const __m512i w0 = _mm512_set1_epi32(static_cast<int>(pw0[k]));
        _mm512_store_si512(wv + h * (kPassTokens / 2) + m, _mm512_mask_set1_epi32(w0, rest, static_cast<int>(pw1[k])));
      }
    heads<GH>(pcnt, h0, pf, pf_tokens, std::make_integer_sequence<int, 8 / T::sc(GH)>{});
  }
  void pass(std::size_t t, int pcnt, const float* p, int G, std::uint32_t* pw0) override {
    alignas(64) float vn[2][kPassTokens];
    const int nblk = (pcnt + TB - 1) / TB;
    for (int b = 0; b < nblk; ++b)
      for (int k = 0; k < 2; ++k)
        load_scalars(scal, 2, k, t + static_cast<std::size_t>(b) * TB, std::min(TB, pcnt - b * TB), vn[k] + b * TB);
    for (int h = 0; h < G; ++h)
      for (int b = 0; b < nblk; ++b) {
        const __m512 ph = _mm512_load_ps(p + h * kPassTokens + b * TB);
        const int o = h * (kPassTokens / 2) + b * (TB / 2);
        store_bf16(pw0 + o, _mm512_mul_ps(ph, _mm512_load_ps(vn[0] + b * TB)));
        store_bf16(pw1 + o, _mm512_mul_ps(ph, _mm512_load_ps(vn[1] + b * TB)));
      }
    stage(t, pcnt);
    // The next pass's rows that lie in the block, prefetched during the first chunk of this one.
    const std::size_t nt = t + kPassTokens;
    const int pf_tokens =
        nt * row < avail ? static_cast<int>(std::min<std::size_t>(kPassTokens, (avail - nt * row) / row)) : 0;
    const std::uint8_t* pf = pf_tokens > 0 ? codes + nt * row : nullptr;
    int h0 = 0;
    for (; h0 + 4 <= G; h0 += 4) group<4>(pcnt, pw0, h0, h0 == 0 ? pf : nullptr, pf_tokens);
    switch (G - h0) {
      case 1: group<1>(pcnt, pw0, h0, h0 == 0 ? pf : nullptr, pf_tokens); break;
      case 2: group<2>(pcnt, pw0, h0, h0 == 0 ? pf : nullptr, pf_tokens); break;
      case 3: group<3>(pcnt, pw0, h0, h0 == 0 ? pf : nullptr, pf_tokens); break;
      default: break;
    }
  }
};

/// attend_bf16's passes over a split job's key and value sides.
void split_loop(const SplitAttnJob& j, KeySide& ks, ValSide& vs) {
  alignas(64) float pp[16 * kPassTokens];  // [head][token of the pass] exp(logit - m) (0 past the end)
  alignas(64) std::uint32_t pwb[16 * kPassTokens / 2];
  const __m512 scale = _mm512_set1_ps(j.scale);
  pass_loop(
      j, vs.acc, vs.AP,
      [&](std::size_t tb, int cnt, int, float* dots) {
        ks.score(tb, cnt, dots);
        for (int h = 0; h < j.G; ++h) _mm512_storeu_ps(dots + h * W, _mm512_mul_ps(_mm512_loadu_ps(dots + h * W), scale));
      },
      // the weights p to pp (each value side applies its norms)
      [&](int h, int b, __m512 p) { _mm512_store_ps(pp + h * kPassTokens + b * TB, p); },
      [&](std::size_t t, int pcnt, int) { vs.pass(t, pcnt, pp, j.G, pwb); });
}

template <int BL>
void split_vals(const SplitAttnJob& j, KeySide& ks) {
  if (j.vx->packed(W)) {
    PackedVals<BL> v(j);
    split_loop(j, ks, v);
  } else {
    SplitVals<BL> v(j);
    split_loop(j, ks, v);
  }
}

void split_values(const SplitAttnJob& j, KeySide& ks) {
  if (j.vx) {
    switch (j.vx->part[1].bits) {
      case 1: split_vals<1>(j, ks); break;
      case 2: split_vals<2>(j, ks); break;
      default: split_vals<3>(j, ks); break;
    }
  } else {
    switch (j.vs->bits) {
      case 1: { IntVals<1> v(j); split_loop(j, ks, v); } break;
      case 2: { IntVals<2> v(j); split_loop(j, ks, v); } break;
      case 3: { IntVals<3> v(j); split_loop(j, ks, v); } break;
      default: { IntVals<4> v(j); split_loop(j, ks, v); } break;
    }
  }
}

template <class K>
void split_keys(const SplitAttnJob& j, const std::uint32_t* qb, int hd2) {
  K k(j, qb, hd2);
  split_values(j, k);
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

void avx512_bf16_attend_split(const SplitAttnJob& j) {
  using namespace avx512bf16;
  const int d = j.kx ? j.kx->dim : j.ks->dim, hd2 = d / 2;
  // The prepared queries (fp32: [Pi_o q_o | Pi_r q_r] or Pi q, natural order) as bf16 pairs:
  // qb[h * hd2 + m] = (q[2m], q[2m + 1]); a part's pairs start at its first coordinate / 2.
  alignas(64) std::uint32_t qb[16 * 1024 / 2];
  for (int h = 0; h < j.G; ++h)
    for (int k = 0; k < d; k += W)
      store_bf16(qb + h * hd2 + k / 2, _mm512_loadu_ps(j.qs + static_cast<std::size_t>(h) * j.qstride + k));
  if (j.kx && j.kx->packed(W)) {
    switch (j.kx->part[1].bits) {
      case 1: split_keys<PackedKeys<1>>(j, qb, hd2); break;
      case 2: split_keys<PackedKeys<2>>(j, qb, hd2); break;
      default: split_keys<PackedKeys<3>>(j, qb, hd2); break;
    }
  } else if (j.kx) {
    switch (j.kx->part[1].bits) {
      case 1: split_keys<SplitKeys<1>>(j, qb, hd2); break;
      case 2: split_keys<SplitKeys<2>>(j, qb, hd2); break;
      default: split_keys<SplitKeys<3>>(j, qb, hd2); break;
    }
  } else {
    switch (j.ks->bits) {
      case 1: split_keys<IntKeys<1>>(j, qb, hd2); break;
      case 2: split_keys<IntKeys<2>>(j, qb, hd2); break;
      case 3: split_keys<IntKeys<3>>(j, qb, hd2); break;
      default: split_keys<IntKeys<4>>(j, qb, hd2); break;
    }
  }
}

}  // namespace turbokv::cpu::detail
