// The pass structure shared by the low-precision fused TurboQuant-MSE decode attentions at the
// AVX-512 level (tq_mse_bf16_avx512.cpp: AttentionPrecision::kBf16; tq_mse_int8_avx512.cpp: kInt8):
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

namespace turbokv::cpu::detail::fused_pass {

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

}  // namespace turbokv::cpu::detail::fused_pass
