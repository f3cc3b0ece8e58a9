// Fused RVQ decode attention with int8 dot products (AttentionPrecision::kInt8, turbokv/attention.h) at the
// AVX-512 level (VNNI `vpdpbusd`, VBMI `vpmultishiftqb` / `vpermb`), keys and values at 1..3 bits a stage
// (rvq_int8_fits, kernels.h). RVQ (formats.h) holds two TurboQuant-MSE
// code streams of the rotated unit vector, x_hat = ||x|| Pi^T (c1[a] + c2[b]). Same job and outputs as
// Kernels::attend_rvq (kernels_simd.h): m, l and the value accumulator in the 16-lane layout of stage 1.
// The TurboQuant kInt8 kernel's scheme (tq_mse_int8_avx512.cpp) with the two stages summed in the integer
// operand, so each coordinate costs one multiply-add as there:
//  - keys: both codebooks on one u8 grid, c1[a] + c2[b] ~ lo + step (u1[a] + u2[b]) with step = (range1 +
//    range2) / 254 (u1 + u2 <= 255), the two look-ups added per byte; the rotated query to int8 with one
//    scale (max |q_i| / 127); integer sums with tokens in lanes, scaled in fp32, times the key norm;
//  - values: both codebooks on one s8 grid, c1 + c2 ~ cstep (s1[a] + s2[b]) with cstep = (max |c1| + max |c2|)
//    / 126 (|s1 + s2| <= 127), the weights p ||v|| per head and pass of 64 tokens to u8, four tokens a dword.
// The pass structure is fused_pass_avx512.h's.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "fused_pass_avx512.h"
#include "int8_vnni_avx512.h"
#include "kernels_avx512_traits.h"

namespace turbokv::cpu::detail::avx512r8 {
using T = avx512::T;
}
#define KNS avx512r8
#define TURBOKV_KERNELS_SOURCES_ONLY
#include "kernels_simd.h"
#undef TURBOKV_KERNELS_SOURCES_ONLY
#undef KNS

namespace turbokv::cpu::detail {
namespace avx512r8 {
namespace {

using fused_pass::kPassTokens;
using fused_pass::load_scalars;
using fused_pass::pass_loop;
using fused_pass::prefetch_rows;
using fused_pass::ValueRows;
using int8_vnni::byte_table;
using int8_vnni::code_bytes;
using int8_vnni::code_ctrl;
using int8_vnni::group_centroids;
using int8_vnni::head_runs;
using int8_vnni::quad_bytes;

constexpr int kMaxHeads = 16;            ///< query heads of one job at most (run_split)
constexpr int kMaxGroups = kMaxDim / 8;  ///< code groups (8 coordinates) a token at most
constexpr int kBlocks = kPassTokens / TB;

/// Smallest and largest of a stream's 2^bits centroids.
inline void book_range(const TqState& s, float& lo, float& hi) {
  lo = hi = s.cbx[0];
  for (int k = 1; k < (1 << s.bits); ++k) lo = std::min(lo, s.cbx[k]), hi = std::max(hi, s.cbx[k]);
}

// ---------------------------------------------------------------- keys

/// The int8 query of a job and the two stages' u8 books on one grid.
struct RvqKeyI8 {
  alignas(64) std::uint32_t qd[kMaxHeads * kMaxGroups * 2];  ///< [head][2 ng] dwords of int8 query coordinates
  float mul[kMaxHeads], add[kMaxHeads];  ///< score = mul[h] * acc + add[h] (before the key norm and softmax scale)
  __m512i book0, book1;                  ///< c1[a] + c2[b] ~ lo + step (book0[a] + book1[b])
  int hd4 = 0;

  void prepare(const RvqHeadState& ks, const float* qp, int G) {
    float lo0, hi0, lo1, hi1;
    book_range(ks.stage[0], lo0, hi0);
    book_range(ks.stage[1], lo1, hi1);
    const float range = (hi0 - lo0) + (hi1 - lo1);
    const float step = range > 0 ? range / 254.0f : 1.0f;
    auto u8 = [&](float c, float lo) { return static_cast<std::uint8_t>(std::clamp(std::nearbyint((c - lo) / step), 0.0f, 255.0f)); };
    book0 = byte_table(ks.bits, [&](int k) { return u8(ks.stage[0].cbx[k], lo0); });
    book1 = byte_table(ks.bits, [&](int k) { return u8(ks.stage[1].cbx[k], lo1); });
    hd4 = ks.stage[0].ng * 2;
    for (int h = 0; h < G; ++h) {
      int sum = 0;
      const float qs = int8_vnni::query_int8(qp + static_cast<std::size_t>(h) * ks.dim, ks.dim, ks.bits, 4 * hd4,
                                             reinterpret_cast<std::int8_t*>(qd + h * hd4), sum);
      // sum_i q_i (c1 + c2)_i ~ qs sum_i q8_i (lo + step u_i) = qs step acc + qs lo sum_i q8_i
      mul[h] = qs * step;
      add[h] = qs * (lo0 + lo1) * static_cast<float>(sum);
    }
  }
};

/// out[h] = int32 sums of (u0[a] + u1[b]) x int8 query over the block's groups for GH heads, token i in lane i.
template <int GH, int BITS, class Src>
inline void score_heads(const Src& s0, const Src& s1, const RvqKeyI8& kq, int h0, __m512i* out) {
  int8_vnni::score_heads_with<GH>(
      s0.ng,
      [&](int j, __m512i& x0, __m512i& x1) {
        __m512i y0, y1;
        group_centroids<BITS>(s0.trow(j), kq.book0, x0, x1);
        group_centroids<BITS>(s1.trow(j), kq.book1, y0, y1);
        x0 = _mm512_add_epi8(x0, y0);
        x1 = _mm512_add_epi8(x1, y1);
      },
      kq.qd + h0 * kq.hd4, kq.hd4, out);
}

// ---------------------------------------------------------------- values

/// The value side of a job: both stages' code rows of the pass (read in place, groups in lanes), their s8
/// books on one grid, the norms and the u8 weights.
template <int BITS>
struct RvqValI8 {
  ValueRows<BITS> rows0, rows1;
  const std::uint8_t* codes;
  const std::uint8_t* scal;  ///< the block's fp16 norms
  std::size_t stride, stage_bytes, avail;
  int nv;
  __m512i book0, book1, mask;
  float cstep;  ///< c1[a] + c2[b] ~ cstep (book0[a] + book1[b]) (s8)
  alignas(64) float vn[kPassTokens];
  alignas(64) std::uint8_t w8[kMaxHeads][kPassTokens];  ///< p ||v|| ~ wstep[h] * w8
  float wstep[kMaxHeads];

  RvqValI8(const RvqHeadState& x, const std::uint8_t* block, std::size_t n)
      : codes(block), scal(block + n * x.code_bytes), stride(x.code_bytes), stage_bytes(x.stage_bytes),
        avail(n * (x.code_bytes + 2)), nv((x.stage[0].ng + W - 1) / W) {
    float mx0 = 0, mx1 = 0;
    for (int k = 0; k < (1 << x.bits); ++k)
      mx0 = std::max(mx0, std::fabs(x.stage[0].cbx[k])), mx1 = std::max(mx1, std::fabs(x.stage[1].cbx[k]));
    cstep = mx0 + mx1 > 0 ? (mx0 + mx1) / 126.0f : 1.0f;
    auto s8 = [&](float c) { return static_cast<std::uint8_t>(static_cast<std::int8_t>(std::nearbyint(c / cstep))); };
    book0 = byte_table(x.bits, [&](int k) { return s8(x.stage[0].cbx[k]); });
    book1 = byte_table(x.bits, [&](int k) { return s8(x.stage[1].cbx[k]); });
    mask = _mm512_set1_epi8(static_cast<char>((1 << BITS) - 1));
  }
  void norms(int b, std::size_t tb, int cnt) { load_scalars(scal, 1, 0, tb, cnt, vn + b * TB); }

  void weights(int G, int nblk, const float* p) {
    alignas(64) float pw[kPassTokens];
    for (int h = 0; h < G; ++h) {
      for (int b = 0; b < nblk; ++b)
        _mm512_store_ps(pw + b * TB, _mm512_mul_ps(_mm512_load_ps(p + h * kPassTokens + b * TB), _mm512_load_ps(vn + b * TB)));
      wstep[h] = int8_vnni::pass_weights(pw, nblk, kBlocks, w8[h]);
    }
  }

  /// acc[h0 + h] vectors v * 8 + quad_code(hf, s) (s < 4) += the pass's int32 sums times their scales, GH heads.
  template <int GH>
  void heads(int h0, int v, int hf, int pcnt, float* acc, int P) const {
    const __m512i ctrl = _mm512_set1_epi64(code_ctrl<BITS>(hf));
    __m512i a[GH][4];
    for (int h = 0; h < GH; ++h)
      for (int r = 0; r < 4; ++r) a[h][r] = _mm512_setzero_si512();
    for (int qd = 0; 4 * qd < pcnt; ++qd) {
      __m512i m0[4], m1[4], c0[4], c1[4];
      for (int k = 0; k < 4; ++k) {
        const int i = 4 * qd + k;
        m0[k] = i >= pcnt ? _mm512_setzero_si512() : code_bytes<BITS>(rows0.group(i, v), hf, ctrl, mask);
        m1[k] = i >= pcnt ? _mm512_setzero_si512() : code_bytes<BITS>(rows1.group(i, v), hf, ctrl, mask);
      }
      quad_bytes(m0, c0);
      quad_bytes(m1, c1);
      for (int r = 0; r < 4; ++r)
        c0[r] = _mm512_add_epi8(_mm512_shuffle_epi8(book0, c0[r]), _mm512_shuffle_epi8(book1, c1[r]));
      for (int h = 0; h < GH; ++h) {
        std::uint32_t wd;
        std::memcpy(&wd, w8[h0 + h] + 4 * qd, 4);
        const __m512i w = _mm512_set1_epi32(static_cast<int>(wd));
        for (int r = 0; r < 4; ++r) a[h][r] = _mm512_dpbusd_epi32(a[h][r], w, c0[r]);
      }
    }
    for (int h = 0; h < GH; ++h)
      int8_vnni::add_quad_sums<BITS>(a[h], _mm512_set1_ps(wstep[h0 + h] * cstep), hf,
                                     acc + static_cast<std::size_t>(h0 + h) * P + v * 8 * W);
  }

  /// The pass's values (tokens [t, t + pcnt)) for G heads added to acc ([G][P], the kernels.h layout).
  void pass(std::size_t t, int pcnt, int G, float* acc, int P) {
    rows0.set_at(codes, stride, avail, nv, t, pcnt);
    rows1.set_at(codes + stage_bytes, stride, avail - stage_bytes, nv, t, pcnt);
    for (int v = 0; v < nv; ++v)
      for (int hf = 0; hf < 2; ++hf)
        head_runs<4>(G, [&](auto gh, int h0) { heads<decltype(gh)::value>(h0, v, hf, pcnt, acc, P); });
  }
};

/// Passes of up to 64 tokens (fused_pass::pass_loop): scores of 4 blocks of 16 (both stages staged and
/// transposed per block), one online-softmax update per head for the pass, one value pass.
template <int KB, int VB>
void attend_rvq_int8(const RvqAttnJob& j) {
  const RvqHeadState& kx = *j.ks;
  TqSrc<KB> s0(kx.stage[0], j.kcodes, j.n), s1(kx.stage[1], j.kcodes + kx.stage_bytes, j.n);
  s0.transpose = s1.transpose = true;
  s1.block_bytes = j.n * (kx.code_bytes + 2) - kx.stage_bytes;
  s1.scalars = false;
  RvqKeyI8 kq;
  kq.prepare(kx, j.qp, j.G);
  RvqValI8<VB> vs(*j.vs, j.vcodes, j.n);
  const int G = j.G;
  const int P = layout_floats(j.vs->stage[0].ng, W);
  alignas(64) float pp[kMaxHeads * kPassTokens];  // [head][token of the pass] exp(logit - m) (0 past the end)
  const __m512 scale = _mm512_set1_ps(j.scale);
  const std::size_t krow = kx.code_bytes, kend = j.n * krow, vrow = j.vs->code_bytes, vend = j.n * vrow;
  pass_loop(
      j, j.acc, P,
      [&](std::size_t tb, int cnt, int b, float* dots) {
        prefetch_rows(j.kcodes, (tb + 2 * TB) * krow, std::min((tb + 3 * TB) * krow, kend));
        prefetch_rows(j.vcodes, (tb + kPassTokens) * vrow, std::min((tb + kPassTokens + TB) * vrow, vend));
        vs.norms(b, tb, cnt);
        s0.stage(tb, cnt);
        s1.stage(tb, cnt);
        head_runs<8>(G, [&](auto gh, int h0) __attribute__((always_inline)) {
          constexpr int GH = decltype(gh)::value;
          __m512i v[GH];
          score_heads<GH, KB>(s0, s1, kq, h0, v);
          for (int h = 0; h < GH; ++h)
            _mm512_storeu_ps(dots + (h0 + h) * W, _mm512_fmadd_ps(_mm512_cvtepi32_ps(v[h]), _mm512_set1_ps(kq.mul[h0 + h]),
                                                                 _mm512_set1_ps(kq.add[h0 + h])));
        });
        const __m512 kn = _mm512_mul_ps(s0.norm_vec(), scale);
        for (int h = 0; h < G; ++h) _mm512_storeu_ps(dots + h * W, _mm512_mul_ps(_mm512_loadu_ps(dots + h * W), kn));
      },
      [&](int h, int b, __m512 p) { _mm512_store_ps(pp + h * kPassTokens + b * TB, p); },
      [&](std::size_t t, int pcnt, int nblk) {
        vs.weights(G, nblk, pp);
        vs.pass(t, pcnt, G, j.acc, P);
      });
}

}  // namespace
}  // namespace avx512r8

void avx512_int8_attend_rvq(const RvqAttnJob& j) {
  using namespace avx512r8;
  with_bits(j.ks->bits, [&](auto kb) {
    with_bits(j.vs->bits, [&](auto vb) { attend_rvq_int8<decltype(kb)::value, decltype(vb)::value>(j); });
  });
}

}  // namespace turbokv::cpu::detail
