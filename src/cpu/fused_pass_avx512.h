// The pass structure shared by the low-precision fused decode attentions at the AVX-512 level
// (tq_mse_bf16_avx512.cpp: AttentionPrecision::kBf16; tq_mse_int8_avx512.cpp, kivi_int8_avx512.cpp,
// rvq_int8_avx512.cpp: kInt8):
// keys scored 16 tokens (one block) at a time into a pass of up to kPassTokens logits per head, one
// online-softmax update per head and pass (fp32), then the pass's values. Include only from files
// compiled with the AVX-512 flags (TURBOKV_AVX512_FLAGS).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels_avx512_traits.h"
#include "kernels.h"
#include "turbokv/half.h"

namespace turbokv::cpu::detail::fused_pass {
// Internal linkage: the files that include this are built with different flags (the bf16 one adds
// -mavx512bf16), so no function here may be merged across them (as kernels_avx512_traits.h).
namespace {

using T = avx512::T;
constexpr int kPassTokens = 64;    ///< tokens per value pass (4 score blocks): the accumulators are loaded once per pass

constexpr int kMaxRowBytes = 512;  ///< token stride of a value code stream at most (split rows: <= 448 bytes)

/// The value codes of one pass: group(i, v) reads token i's group vector v, in place
/// unless a group load could run past the block, then from a zero-padded copy.
template <int BITS>
struct ValueRows {
  const std::uint8_t* base = nullptr;
  std::size_t stride = 0;
  alignas(64) std::uint8_t copy[kPassTokens * kMaxRowBytes + 256];
  void set(const TqState& st, const std::uint8_t* block, std::size_t n, std::size_t t, int cnt) {
    set_at(block, st.code_bytes, n * (st.code_bytes + 2), (st.ng + T::W - 1) / T::W, t, cnt);
  }
  /// Tokens [t, t + cnt) of a code stream at `codes` (token stride stride_, nv group vectors a token;
  /// `avail` bytes readable from `codes`).
  void set_at(const std::uint8_t* codes, std::size_t stride_, std::size_t avail, int nv, std::size_t t, int cnt) {
    constexpr int L = T::template group_bytes<BITS>();
    stride = stride_;
    // Bytes the group loads of the pass reach from its first token's codes.
    const std::size_t reach = (cnt - 1) * stride + static_cast<std::size_t>(nv - 1) * T::W * BITS + L;
    if (t * stride + reach <= avail) {
      base = codes + t * stride;
    } else {
      const std::size_t have = std::min(reach, avail - t * stride);
      std::memcpy(copy, codes + t * stride, have);
      std::memset(copy + have, 0, reach - have);
      base = copy;
    }
  }
  __m512i group(int i, int v) const { return T::template groups<BITS>(base + i * stride + v * T::W * BITS); }
};

/// Prefetches bytes [a, b) of p into L1 (the codes of a later block, while this one is computed).
inline void prefetch_rows(const std::uint8_t* p, std::size_t a, std::size_t b) {
  for (std::size_t o = a; o < b; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T0);
}

/// Finishes one head's 16 logits of a score block: softcap * tanh(s / softcap) when softcap > 0,
/// -inf past cnt, stored at out (the pass's logit row of the head).
inline void finish_scores(__m512 s, float softcap, int cnt, float* out) {
  if (softcap > 0) {
    alignas(64) float tmp[T::W];
    _mm512_store_ps(tmp, s);
    for (int i = 0; i < T::W; ++i) tmp[i] = softcap * std::tanh(tmp[i] / softcap);
    s = _mm512_load_ps(tmp);
  }
  if (cnt < T::W) s = T::tail(s, cnt, -INFINITY);
  _mm512_store_ps(out, s);
}

/// The online softmax (fp32) of one pass of pcnt tokens (nblk blocks of T::W) for G heads: sc [head]
/// [kPassTokens] logits; m, lv (T::W lanes of partial sums per head) and the accumulators acc
/// ([head][AP] floats) are the running state, rescaled when a head's max moves. emit(h, b, p) takes
/// the weights p = exp(logit - m) of block b of head h (0 past the end).
template <class Emit>
inline void pass_softmax(const float* sc, int G, int nblk, int pcnt, float* m, float* lv, float* acc, int AP,
                         Emit&& emit) {
  for (int h = 0; h < G; ++h) {
    const float* sh = sc + h * kPassTokens;
    __m512 mx = _mm512_load_ps(sh);
    for (int b = 1; b < nblk; ++b) mx = _mm512_max_ps(mx, _mm512_load_ps(sh + b * T::W));
    const float bm = _mm512_reduce_max_ps(mx);
    if (bm > m[h]) {  // the running max moves: rescale this head's state
      const __m512 va = _mm512_set1_ps(std::exp(m[h] - bm));  // 0 on the first pass
      _mm512_storeu_ps(lv + h * T::W, _mm512_mul_ps(_mm512_loadu_ps(lv + h * T::W), va));
      float* a = acc + static_cast<std::size_t>(h) * AP;
      for (int f = 0; f < AP; f += T::W) _mm512_storeu_ps(a + f, _mm512_mul_ps(_mm512_loadu_ps(a + f), va));
      m[h] = bm;
    }
    const __m512 mh = _mm512_set1_ps(m[h]);
    __m512 lsum = _mm512_loadu_ps(lv + h * T::W);
    for (int b = 0; b < nblk; ++b) {
      __m512 p = T::exp(_mm512_sub_ps(_mm512_load_ps(sh + b * T::W), mh));
      const int cnt = std::min(T::W, pcnt - b * T::W);
      if (cnt < T::W) p = T::tail(p, cnt, 0.0f);
      lsum = _mm512_add_ps(lsum, p);
      emit(h, b, p);
    }
    _mm512_storeu_ps(lv + h * T::W, lsum);
  }
}

/// Always inlined: an out-of-line call in the block loop makes the caller save and restore its zmm registers
/// (all caller-saved): the bf16 kernel was 7-8% slower with it (one thread, 4-bit, 8,192 tokens).
/// fp16 scalars of tokens [t, t + cnt) (0 for i >= cnt) -> out[16]: `per` scalars a token at sc (the block's
/// fp16 scalars after its codes), this one `which` (a TurboQuant-MSE block: per = 1, its norms; a fractional
/// block: per = 2, the two parts' norms).
[[gnu::always_inline]] inline void load_scalars(const std::uint8_t* sc, int per, int which, std::size_t t, int cnt,
                                             float* out) {
  const std::uint8_t* p = sc + 2 * per * t;
  if (cnt == T::W && per == 1) {
    _mm512_storeu_ps(out, T::from_f16(reinterpret_cast<const std::uint16_t*>(p)));
  } else if (cnt == T::W) {  // per == 2: pairs, deinterleaved
    const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
    const __m512i idx = _mm512_add_epi32(_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30),
                                         _mm512_set1_epi32(which));
    _mm512_storeu_ps(out, _mm512_permutex2var_ps(a, idx, b));
  } else {
    for (int i = 0; i < T::W; ++i) {
      const std::uint8_t* h = p + 2 * (per * i + which);
      out[i] = i < cnt ? half_to_float(static_cast<std::uint16_t>(h[0] | (h[1] << 8))) : 0.0f;
    }
  }
}

/// Part p of a fractional head's n-token block at `block` (SplitHeadState x, kernels.h): a code stream of
/// x.part[p] whose token stride is the row (x.row_bytes), readable to the block's end, and the block's fp16
/// scalar pairs (||x_o||, ||x_r||: part p's at index p).
struct SplitPart {
  const std::uint8_t* codes;  ///< the part's codes of token 0
  std::size_t avail;          ///< bytes readable from codes (to the block's end, the scalars included)
  const std::uint8_t* scal;   ///< the block's fp16 scalar pairs
};
inline SplitPart split_part(const SplitHeadState& x, const std::uint8_t* block, std::size_t n, int p) {
  return {block + x.code_offset[p], n * (x.row_bytes + 4) - x.code_offset[p], block + n * x.row_bytes};
}

/// Makes a key source over a SplitPart (TqSrc of the including file, built on sp.codes) stage transposed
/// rows only: reads stop at the block's end, the owner loads the norms (load_scalars, per = 2).
template <class Src>
void as_split_key_source(Src& src, const SplitPart& sp) {
  src.block_bytes = sp.avail;
  src.transpose = true;
  src.scalars = false;
}

/// The passes of one fused low-precision attention piece j over its tokens [t0, t1), value accumulator acc
/// ([G][AP] floats): sets j.m, j.l and acc from zero, then per pass of up to kPassTokens tokens (starting at
/// t, pcnt tokens, nblk blocks of 16):
///  - score(tb, cnt, b, dots) for each block b of cnt tokens from tb: dots[h * 16 + i] = the logit of token
///    tb + i for head h before soft-capping (softmax scale applied); finish_scores soft-caps and masks it;
///  - pass_softmax(..., emit): emit(h, b, p) takes the fp32 weights of block b of head h;
///  - values(t, pcnt, nblk): the pass's value terms into acc.
template <class Score, class Emit, class Values>
void pass_loop(const AttnPiece& j, float* acc, int AP, Score&& score, Emit&& emit, Values&& values) {
  constexpr int W = T::W;
  const int G = j.G;
  alignas(64) float dots[16 * W];
  alignas(64) float sc[16 * kPassTokens];  // [head][token of the pass] logits (-inf past the end)
  alignas(64) float lv[16 * W];
  float* m = j.m;
  for (int h = 0; h < G; ++h) {
    m[h] = -INFINITY;
    _mm512_storeu_ps(lv + h * W, _mm512_setzero_ps());
  }
  std::fill(acc, acc + static_cast<std::size_t>(G) * AP, 0.0f);
  for (std::size_t t = j.t0; t < j.t1; t += kPassTokens) {
    const int pcnt = static_cast<int>(std::min<std::size_t>(kPassTokens, j.t1 - t));
    const int nblk = (pcnt + W - 1) / W;
    for (int b = 0; b < nblk; ++b) {  // scores, 16 tokens at a time
      const int cnt = std::min(W, pcnt - b * W);
      score(t + static_cast<std::size_t>(b) * W, cnt, b, dots);
      for (int h = 0; h < G; ++h)
        finish_scores(_mm512_loadu_ps(dots + h * W), j.softcap, cnt, sc + h * kPassTokens + b * W);
    }
    pass_softmax(sc, G, nblk, pcnt, m, lv, acc, AP, emit);
    values(t, pcnt, nblk);
  }
  for (int h = 0; h < G; ++h) j.l[h] = _mm512_reduce_add_ps(_mm512_loadu_ps(lv + h * W));
}

}  // namespace
}  // namespace turbokv::cpu::detail::fused_pass
