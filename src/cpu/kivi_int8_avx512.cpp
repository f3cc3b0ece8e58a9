// Fused KIVI decode attention with int8 dot products (AttentionPrecision::kInt8, turbokv/attention.h) at
// the AVX-512 level (VNNI `vpdpbusd`, VBMI `vpmultishiftqb`): KIVI keys and values at 1..4 bits whose value
// groups are a multiple of 32 channels (kivi_int8_fits, kernels.h). Same job and outputs as
// Kernels::attend_kivi (kernels_simd.h): m, l and the value accumulator in the 16-lane layout of the value
// codes. KIVI (Liu et al., arXiv 2402.02750) stores x_hat = min + scale * code with integer codes, so the
// key codes are the u8 operands themselves (no look-up; int8_vnni_avx512.h, IDENT):
//  - keys (per channel, groups of `group` tokens): <q, x_hat_t> = <q * scale_g, code_t> + <q, min_g> for the
//    token's group g. Per key group the scaled query q * scale_g is rounded to 15 bits with one scale per
//    head, max |q_i scale_i| / 16256, held as two int8 digits (KIVI keeps outlier channels: one digit left the
//    others too few levels); the integer sums (tokens in lanes, as the TurboQuant kInt8 kernel's) are exact,
//    then times that scale plus <q, min_g> in fp32 and times the softmax scale. A 16-token block that
//    straddles key groups is summed once per group, each group's lanes kept.
//  - values (per token, groups of `group` channels): x_hat = mid + (scale / 2) (2 code - (2^b - 1)) with mid =
//    min + scale (2^b - 1) / 2, so sum_t p_t x_hat_t = sum_t (p_t scale_t,g / 2) c_t + sum_t p_t mid_t,g with
//    centred codes c (s8, symmetric about 0: the int8 sums do not carry every token's offset). The first term
//    in int8: the weights p scale / 2 per head, channel group and pass of 64 tokens rounded to u8 (the pass's
//    largest / 255), four tokens a dword (the TurboQuant kernel's value quads; each 128-bit lane of a value
//    group vector is 32 channels of one KIVI group, so its weight dwords are that group's). The second in fp32
//    on the unrounded weights.
// The pass structure (scores of 4 blocks of 16 tokens, one fp32 online-softmax update per head and pass, the
// pass's values) is fused_pass_avx512.h's.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "fused_pass_avx512.h"
#include "int8_vnni_avx512.h"
#include "kernels_avx512_traits.h"

namespace turbokv::cpu::detail::avx512k8 {
using T = avx512::T;
}
#define KNS avx512k8
#define TURBOKV_KERNELS_SOURCES_ONLY
#include "kernels_simd.h"
#undef TURBOKV_KERNELS_SOURCES_ONLY
#undef KNS

namespace turbokv::cpu::detail {
namespace avx512k8 {
namespace {

using fused_pass::kPassTokens;
using fused_pass::pass_loop;
using fused_pass::prefetch_rows;
using fused_pass::ValueRows;
using int8_vnni::code_ctrl;
using int8_vnni::head_runs;
using int8_vnni::quad_bytes;
using int8_vnni::quad_sums;

constexpr int kMaxHeads = 16;              ///< query heads of one job at most (run_split)
constexpr int kMaxGroups = kMaxDim / 8;    ///< code groups (8 coordinates) a token at most
constexpr int kMaxPairs = 8;               ///< KIVI value groups a token at most (as_kivi: head_dim / group <= 8)

/// A token group's fp16 (min, scale) pairs, 16 channels (or tokens) at a time: 32 fp16 at p -> mn, sc.
[[gnu::always_inline]] inline void min_scale16(const std::uint8_t* p, __m512& mn, __m512& sc) {
  const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  mn = _mm512_permutex2var_ps(a, even, b);
  sc = _mm512_permutex2var_ps(a, _mm512_add_epi32(even, _mm512_set1_epi32(1)), b);
}

// ---------------------------------------------------------------- keys

/// The integer query of one key group (the group whose scalars it was made from: gcur): q * scale_g rounded to
/// 15 bits, max |q_i scale_i| / 16256 a step, as two int8 digits q15 = 128 hi + lo (hi in [-127, 127], lo in
/// [-64, 63]; int8_vnni::score_heads2 sums them): KIVI keys keep outlier channels (per-channel scales), and one int8 digit gave the other channels
/// too few levels (relative L2 error 2.7e-2 on average, 0.23 at worst, over the sweep of test_cpu_kivi_fused.cpp).
template <int BITS>
struct KiviKeyI8 {
  alignas(64) std::uint32_t qd[2][kMaxHeads * kMaxGroups * 2];  ///< [digit hi, lo][head][2 ng] dwords of int8
  alignas(64) float qf[kMaxDim];                               ///< one head's q * scale_g (fp32)
  float mul[kMaxHeads];  ///< score = mul[h] * (128 acc_hi + acc_lo) + add[h] (before the softmax scale)
  float add[kMaxHeads];  ///< <q_h, min_g>
  int hd4 = 0;           ///< dwords a head
  std::size_t gcur = static_cast<std::size_t>(-1);

  /// Group g's scaled query for the G heads q ([G][d]) from the group's fp16 (min, scale) channel pairs.
  void prepare(const KiviHeadState& kx, const std::uint8_t* block, std::size_t n, std::size_t g, const float* q,
               int G) {
    gcur = g;
    const int d = kx.dim;
    hd4 = kx.codes.ng * 2;
    const std::size_t gbytes = static_cast<std::size_t>(d) * 4;
    const std::uint8_t* pr = block + n * kx.row_bytes + g * gbytes;
    // The next group's scalars (they follow every token's codes: no key-row prefetch brings them).
    if ((g + 1) * static_cast<std::size_t>(kx.group) < n) prefetch_rows(pr, gbytes, 2 * gbytes);
    alignas(64) float mn[kMaxDim], sc[kMaxDim];
    for (int k = 0; k < d; k += W) {
      __m512 a, b;
      min_scale16(pr + 4 * k, a, b);
      _mm512_store_ps(mn + k, a);
      _mm512_store_ps(sc + k, b);
    }
    // At 4 bits a code group's dwords hold coordinates 8j + 0, 2, 4, 6 then 8j + 1, 3, 5, 7 (nibble order).
    const __m128i order = BITS == 4 ? _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15)
                                    : _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    constexpr float kTop = 127.0f * 128.0f;
    for (int h = 0; h < G; ++h) {
      const float* qh = q + static_cast<std::size_t>(h) * d;
      __m512 mx = _mm512_setzero_ps(), c = _mm512_setzero_ps();
      for (int k = 0; k < d; k += W) {
        const __m512 qv = _mm512_loadu_ps(qh + k), f = _mm512_mul_ps(qv, _mm512_load_ps(sc + k));
        _mm512_store_ps(qf + k, f);
        mx = _mm512_max_ps(mx, _mm512_abs_ps(f));
        c = _mm512_fmadd_ps(qv, _mm512_load_ps(mn + k), c);
      }
      const float m = _mm512_reduce_max_ps(mx);
      // A range below ~4.8e-35 would make kTop / m infinite: that head's scaled query counts as zero.
      const bool some = m > 0 && std::isfinite(kTop / m);
      const __m512 inv = _mm512_set1_ps(some ? kTop / m : 0.0f);
      mul[h] = some ? m / kTop : 0.0f;
      add[h] = _mm512_reduce_add_ps(c);
      auto* hb = reinterpret_cast<std::uint8_t*>(qd[0] + h * hd4);
      auto* lb = reinterpret_cast<std::uint8_t*>(qd[1] + h * hd4);
      for (int k = 0; k < d; k += W) {
        const __m512i q15 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(qf + k), inv));  // nearest, |q15| <= kTop
        const __m512i hi = _mm512_srai_epi32(_mm512_add_epi32(q15, _mm512_set1_epi32(64)), 7);  // floor((q15 + 64) / 128)
        const __m512i lo = _mm512_sub_epi32(q15, _mm512_slli_epi32(hi, 7));                    // in [-64, 63]
        _mm_storeu_si128(reinterpret_cast<__m128i*>(hb + k), _mm_shuffle_epi8(_mm512_cvtsepi32_epi8(hi), order));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(lb + k), _mm_shuffle_epi8(_mm512_cvtsepi32_epi8(lo), order));
      }
    }
  }
};

/// out[h * 16 + i] = <q_h, x_hat of token tb + i> for the G heads (src staged at tb, cnt tokens): each key
/// group the block touches scored with its own integer query, its lanes kept.
template <int BITS, class Src>
void kivi_scores(const Src& src, KiviKeyI8<BITS>& kq, const KiviHeadState& kx, const std::uint8_t* block,
                 std::size_t n, std::size_t tb, int cnt, const float* q, int G, float* out) {
  const std::size_t gs = static_cast<std::size_t>(kx.group);
  const std::size_t g0 = tb / gs, g1 = (tb + cnt - 1) / gs;
  for (std::size_t g = g0; g <= g1; ++g) {
    if (g != kq.gcur) kq.prepare(kx, block, n, g, q, G);
    const int a = g == g0 ? 0 : static_cast<int>(g * gs - tb);
    const int e = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(cnt), (g + 1) * gs - tb));
    const __mmask16 keep = static_cast<__mmask16>(((1u << e) - 1) & ~((1u << a) - 1));
    head_runs<4>(G, [&](auto gh, int h0) __attribute__((always_inline)) {
      constexpr int GH = decltype(gh)::value;
      __m512i v[GH];
      int8_vnni::score_heads2<GH>(
          src.ng, [&](int j, __m512i& x0, __m512i& x1) {
            int8_vnni::group_centroids<BITS, true>(src.trow(j), _mm512_setzero_si512(), x0, x1);
          },
          kq.qd[0] + h0 * kq.hd4, kq.qd[1] + h0 * kq.hd4, kq.hd4, v);
      for (int h = 0; h < GH; ++h)
        _mm512_mask_storeu_ps(out + (h0 + h) * W, keep,
                              _mm512_fmadd_ps(_mm512_cvtepi32_ps(v[h]), _mm512_set1_ps(kq.mul[h0 + h]),
                                              _mm512_set1_ps(kq.add[h0 + h])));
    });
  }
}

// ---------------------------------------------------------------- values

/// The value side of a job: the pass's code rows (read in place, groups in lanes), per-token (min, scale)
/// of every channel group, and the u8 weights p * scale per head and channel group.
template <int BITS>
struct KiviValI8 {
  ValueRows<BITS> rows;
  const std::uint8_t* codes;
  const std::uint8_t* scal;  ///< the block's fp16 (min, scale) pairs, [token][group]
  std::size_t stride, avail;
  int nv, npairs;
  int lg[kMaxDim / 128 + 1][4];                              ///< value group of 128-bit lane L of group vector v
  alignas(64) float vmid[kMaxPairs][kPassTokens];            ///< the pass's group midpoints min + scale (2^b - 1) / 2
  alignas(64) float vsc[kMaxPairs][kPassTokens];             ///< the pass's half scales scale / 2, per group
  __m512i book;                                              ///< s8 centered codes: 2 code - (2^b - 1)
  alignas(64) std::uint8_t w8[kMaxHeads][kMaxPairs][kPassTokens];  ///< p scale ~ wstep[h][g] * w8
  float wstep[kMaxHeads][kMaxPairs];
  float msum[kMaxHeads][kMaxPairs];                          ///< sum over the pass of p * midpoint
  __m512 wsv[kMaxHeads];                                     ///< wstep[h] spread over group vector v's lanes
  alignas(64) std::uint32_t wv[kMaxHeads][kPassTokens / 4][16];  ///< weight dwords of one group vector, per quad

  KiviValI8(const KiviHeadState& x, const std::uint8_t* block, std::size_t n)
      : codes(block), scal(block + n * x.row_bytes), stride(x.row_bytes), avail(n * x.row_bytes),
        nv((x.codes.ng + W - 1) / W), npairs(x.dim / x.group) {
    for (int v = 0; v < nv; ++v)
      for (int L = 0; L < 4; ++L) lg[v][L] = std::min((128 * v + 32 * L) / x.group, npairs - 1);  // padding: the last
    book = int8_vnni::byte_table(BITS, [](int c) { return static_cast<std::uint8_t>(2 * c - ((1 << BITS) - 1)); });
  }

  /// The (min, scale) pairs of block b of the pass (tokens [tb, tb + cnt); 0 past cnt) as vmid / vsc: x_hat =
  /// min + scale code = mid + (scale / 2) (2 code - (2^b - 1)). Centred codes keep the int8 sums from carrying
  /// every token's offset: with codes 0..2^b - 1 the output (a weighted mean of values around zero) was the
  /// small difference of two large sums (mean relative error 1.2e-2 in the sweep of test_cpu_kivi_fused.cpp).
  void scalars(int b, std::size_t tb, int cnt) {
    const int per = 2 * npairs;  // fp16 a token
    const __mmask16 m = static_cast<__mmask16>((1u << per) - 1);
    __m512i r[16];  // token i's pairs as floats, then (T::transpose) r[2 g] / r[2 g + 1] = group g's mins / scales
    for (int i = 0; i < TB; ++i)
      r[i] = i < cnt ? _mm512_castps_si512(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, scal + (tb + i) * per * 2)))
                     : _mm512_setzero_si512();
    T::transpose(r);
    const __m512 half = _mm512_set1_ps(0.5f), top = _mm512_set1_ps(static_cast<float>((1 << BITS) - 1));
    for (int g = 0; g < npairs; ++g) {
      const __m512 hs = _mm512_mul_ps(half, _mm512_castsi512_ps(r[2 * g + 1]));
      _mm512_store_ps(vsc[g] + b * TB, hs);
      _mm512_store_ps(vmid[g] + b * TB, _mm512_fmadd_ps(hs, top, _mm512_castsi512_ps(r[2 * g])));
    }
  }

  /// The pass's weights, p: [G][kPassTokens] softmax weights (0 past the end): per head and group, w8 from
  /// p * scale / 2 rounded to u8 over the pass's largest (int8_vnni::pass_weights), and msum.
  void weights(int G, int nblk, const float* p) {
    for (int h = 0; h < G; ++h)
      for (int g = 0; g < npairs; ++g) {
        alignas(64) float pw[kPassTokens];
        __m512 ms = _mm512_setzero_ps();
        for (int b = 0; b < nblk; ++b) {
          const __m512 pb = _mm512_load_ps(p + h * kPassTokens + b * TB);
          // >= 0 for the codec's own bytes (scale >= 0); a negative fp16 scale (foreign bytes) counts as 0.
          _mm512_store_ps(pw + b * TB, _mm512_max_ps(_mm512_mul_ps(pb, _mm512_load_ps(vsc[g] + b * TB)), _mm512_setzero_ps()));
          ms = _mm512_fmadd_ps(pb, _mm512_load_ps(vmid[g] + b * TB), ms);
        }
        msum[h][g] = _mm512_reduce_add_ps(ms);
        wstep[h][g] = int8_vnni::pass_weights(pw, nblk, kPassTokens / TB, w8[h][g]);
      }
  }

  /// wv[h][qd]: 128-bit lane L holds, four times, the u8 weights of tokens 4 qd .. 4 qd + 3 of group lg[v][L].
  void weight_vectors(int v, int G) {
    for (int h = 0; h < G; ++h) {
      const __m512i r[4] = {_mm512_load_si512(w8[h][lg[v][0]]), _mm512_load_si512(w8[h][lg[v][1]]),
                            _mm512_load_si512(w8[h][lg[v][2]]), _mm512_load_si512(w8[h][lg[v][3]])};
      __m512i z[4];  // z[k] lane c = dword 4 c + k of r[0..3]
      quad_sums(r, z);
      for (int c = 0; c < 4; ++c) {
        const __m512i idx = _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                             _mm512_set1_epi32(4 * c));
        for (int k = 0; k < 4; ++k) _mm512_store_si512(wv[h][4 * c + k], _mm512_permutexvar_epi32(idx, z[k]));
      }
    }
  }

  /// acc[h0 + h] vectors v * 8 + quad_code(hf, s) (s < 4) += the pass's int32 sums times their scales, GH heads.
  template <int GH>
  void heads(int h0, int v, int hf, int pcnt, float* acc, int P) const {
    const __m512i ctrl = _mm512_set1_epi64(code_ctrl<BITS>(hf));
    const __m512i mask = _mm512_set1_epi8(static_cast<char>((1 << BITS) - 1));
    __m512i a[GH][4];
    for (int h = 0; h < GH; ++h)
      for (int r = 0; r < 4; ++r) a[h][r] = _mm512_setzero_si512();
    for (int qd = 0; 4 * qd < pcnt; ++qd) {
      __m512i m[4], c[4];
      for (int k = 0; k < 4; ++k) {
        const int i = 4 * qd + k;
        m[k] = i >= pcnt ? _mm512_setzero_si512() : int8_vnni::code_bytes<BITS>(rows.group(i, v), hf, ctrl, mask);
      }
      quad_bytes(m, c);
      for (int r = 0; r < 4; ++r) c[r] = _mm512_shuffle_epi8(book, c[r]);
      for (int h = 0; h < GH; ++h) {
        const __m512i w = _mm512_load_si512(wv[h0 + h][qd]);
        for (int r = 0; r < 4; ++r) a[h][r] = _mm512_dpbusd_epi32(a[h][r], w, c[r]);
      }
    }
    for (int h = 0; h < GH; ++h)
      int8_vnni::add_quad_sums<BITS>(a[h], wsv[h0 + h], hf,
                                     acc + static_cast<std::size_t>(h0 + h) * P + v * 8 * W);
  }

  /// Lane 4 L + r = x[lg[v][L]] (a per-group value spread over group vector v's lanes).
  __m512 lane_values(const float* x, int v) const {
    return _mm512_setr_ps(x[lg[v][0]], x[lg[v][0]], x[lg[v][0]], x[lg[v][0]], x[lg[v][1]], x[lg[v][1]], x[lg[v][1]],
                          x[lg[v][1]], x[lg[v][2]], x[lg[v][2]], x[lg[v][2]], x[lg[v][2]], x[lg[v][3]], x[lg[v][3]],
                          x[lg[v][3]], x[lg[v][3]]);
  }

  /// The pass's values (tokens [t, t + pcnt)) for G heads added to acc ([G][P], the kernels.h layout).
  void pass(std::size_t t, int pcnt, int G, float* acc, int P) {
    rows.set_at(codes, stride, avail, nv, t, pcnt);
    for (int v = 0; v < nv; ++v) {
      weight_vectors(v, G);
      for (int h = 0; h < G; ++h) wsv[h] = lane_values(wstep[h], v);  // both halves' sum scales
      for (int hf = 0; hf < 2; ++hf)
        head_runs<4>(G, [&](auto gh, int h0) { heads<decltype(gh)::value>(h0, v, hf, pcnt, acc, P); });
      for (int h = 0; h < G; ++h) {  // + sum_t p_t min_t,g on every coordinate of group g
        const __m512 mv = lane_values(msum[h], v);
        float* f = acc + static_cast<std::size_t>(h) * P + v * 8 * W;
        for (int k = 0; k < 8; ++k) _mm512_storeu_ps(f + k * W, _mm512_add_ps(_mm512_loadu_ps(f + k * W), mv));
      }
    }
  }
};

/// Passes of up to 64 tokens (fused_pass::pass_loop): scores of 4 blocks of 16 (keys staged and transposed
/// per block), one online-softmax update per head for the pass, one value pass (value codes read in place).
template <int KB, int VB>
void attend_kivi_int8(const KiviAttnJob& j) {
  TqSrc<KB> ks(j.ks->codes, j.kcodes, j.n);
  ks.block_bytes = j.n * j.ks->row_bytes;  // loads stay inside the codes
  ks.transpose = true;
  ks.scalars = false;
  KiviKeyI8<KB> kq;
  KiviValI8<VB> vs(*j.vs, j.vcodes, j.n);
  const int G = j.G;
  const int P = layout_floats(j.vs->codes.ng, W);
  alignas(64) float pp[kMaxHeads * kPassTokens];  // [head][token of the pass] exp(logit - m) (0 past the end)
  const __m512 scale = _mm512_set1_ps(j.scale);
  const std::size_t krow = j.ks->row_bytes, kend = j.n * krow, vrow = j.vs->row_bytes, vend = j.n * vrow;
  const std::size_t vsrow = static_cast<std::size_t>(vs.npairs) * 4, vsend = j.n * vsrow;
  pass_loop(
      j, j.acc, P,
      [&](std::size_t tb, int cnt, int b, float* dots) {
        // Key rows two blocks ahead, value rows one pass ahead (the value pass reads them in place).
        prefetch_rows(j.kcodes, (tb + 2 * TB) * krow, std::min((tb + 3 * TB) * krow, kend));
        prefetch_rows(j.vcodes, (tb + kPassTokens) * vrow, std::min((tb + kPassTokens + TB) * vrow, vend));
        prefetch_rows(vs.scal, (tb + kPassTokens) * vsrow, std::min((tb + kPassTokens + TB) * vsrow, vsend));  // their pairs
        vs.scalars(b, tb, cnt);
        ks.stage(tb, cnt);
        kivi_scores<KB>(ks, kq, *j.ks, j.kcodes, j.n, tb, cnt, j.q, G, dots);
        for (int h = 0; h < G; ++h) _mm512_storeu_ps(dots + h * W, _mm512_mul_ps(_mm512_loadu_ps(dots + h * W), scale));
      },
      [&](int h, int b, __m512 p) { _mm512_store_ps(pp + h * kPassTokens + b * TB, p); },
      [&](std::size_t t, int pcnt, int nblk) {
        vs.weights(G, nblk, pp);
        vs.pass(t, pcnt, G, j.acc, P);
      });
}

}  // namespace
}  // namespace avx512k8

void avx512_int8_attend_kivi(const KiviAttnJob& j) {
  using namespace avx512k8;
  with_bits(j.ks->bits, [&](auto kb) {
    with_bits(j.vs->bits, [&](auto vb) { attend_kivi_int8<decltype(kb)::value, decltype(vb)::value>(j); });
  });
}

}  // namespace turbokv::cpu::detail
