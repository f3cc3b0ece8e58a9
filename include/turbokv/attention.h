// turbokv — decode-step attention: on compressed keys/values, and exact in fp64.
//
// One query token per sequence attends over num_tokens cached tokens.
// GQA: num_heads query heads share num_kv_heads KV heads; query head h reads
// KV head h / (num_heads / num_kv_heads) (num_heads must be a multiple).
//   logit_t = softmax_scale * <q_h, k_t>;  with soft-capping c > 0: c * tanh(logit_t / c)
//   sliding window w > 0: only the last w tokens, t >= num_tokens - w (the query is
//   the newest token, so the window includes it)
//   out_h = sum_t softmax(logit)_t * v_t
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "turbokv/codec.h"

namespace turbokv {

/**
 * Arithmetic of the CPU fused TurboQuant-MSE decode attention
 * (cpu::attention_tq_mse, cpu::attention_tq_mse_batched, and
 * cpu::attention_codec / _batched when every head is TurboQuant-MSE, at
 * integer or fractional widths, which is when they take the fused kernels:
 * CodecAttentionPath::kTqMseFused, kTqMseSplitFused), and kInt8 also of the
 * fused KIVI and RVQ attentions (cpu::attention_codec / _batched when every head
 * is KIVI or every head RVQ: CodecAttentionPath::kKiviFused, kRvqFused; see
 * kInt8). Every other attention (the references here, the other CPU codecs, the
 * CUDA kernels) ignores it and computes as it always does.
 */
enum class AttentionPrecision {
  /// Default: fp32 products and sums, within 1e-5 relative of attention_compressed
  /// (turbokv/cpu.h); bit-identical to the results from before this field existed.
  kFp32 = 0,
  /**
   * Opt-in, faster on AMD Zen 4 (1.4-1.7x kFp32, docs/RESULTS.md) but slower
   * on the Intel Xeon (AMX-class) measured in session 35: 1.1-1.9x kFp32's
   * time there (kInt8 was 1.4-2.1x faster than kFp32 on both machines): bf16
   * dot products with fp32 accumulation (AVX512-BF16
   * `vdpbf16ps`, two products per fp32 lane per instruction). Rounded to bf16
   * (round-to-nearest-even, unit roundoff u = 2^-8; fp32 denormals become 0):
   *   - scores: the rotated query Pi q (computed in fp64, rounded to fp32 as in
   *     kFp32, then to bf16) and the key centroids c[code]; the products (exact
   *     in fp32) are summed in fp32, then times the fp16 key norm and the
   *     softmax scale in fp32;
   *   - values: the softmax weight times the fp16 value norm, exp(logit - m) *
   *     norm, per token, and the value centroids c[code]; summed in fp32 over
   *     pairs of tokens.
   *   Fractional widths (the outlier split): each part as above with its own
   *   query part, codebook and norm; a key's two part sums are combined in fp32
   *   (||x_o|| s_o + ||x_r|| s_r), a value's weights are rounded per part
   *   (exp(logit - m) * ||x_o||, exp(logit - m) * ||x_r||).
   * Everything else is as kFp32: the online softmax (max, exp, sum of weights,
   * rescaling; updated per 64 tokens instead of 16) uses the unrounded fp32
   * weights, the split-K merge and the rotation back are unchanged. vdpbf16ps flushes denormal inputs and
   * results to zero. Measured error (tests/test_cpu_low_precision.cpp: Gaussian
   * data with an outlier channel, head_dim 16..512, every key/value width
   * pair 1..4, GQA 1..16, 1..5563 tokens, window, soft-capping): relative L2
   * error per head against the fp64 reference attention_compressed 3.7e-3 on
   * average (~u) and at most 1.1e-2 over 1338 random heads (the test's
   * tolerance: 2e-2 per head, 5e-3 on average); kFp32 stays within 1e-5.
   * Fractional widths (tests/test_cpu_split_fused.cpp, CpuSplitFusedBf16: two
   * outlier channels, head_dim 64..1024, 1.5/2.5/3.5 bits mixed with integer
   * widths, GQA 1..16, 1..4583 tokens, window, soft-capping, same tolerance):
   * 2.0e-3 on average over 524 random heads, at most 1.8e-2 over all 4028
   * head checks (the largest with softmax scale 0.3 over a 37-token window, or
   * head_dim 64).
   * Needs simd_level() == SimdLevel::kAvx512 and cpu_has_avx512_bf16()
   * (turbokv/simd.h); otherwise the call runs the kFp32 kernels and returns
   * exactly their result. Source: src/cpu/tq_mse_bf16_avx512.cpp.
   */
  kBf16 = 1,
  /**
   * Opt-in, fastest: int8 dot products with int32 accumulation (AVX-512 VNNI
   * `vpdpbusd`, four products per int32 lane per instruction); integer and
   * fractional widths. Rounded (round-to-nearest):
   *   - scores: each head's rotated query Pi q (fp32, as kFp32) to int8 with one
   *     scale, max |q_i| / 127; the key codebook to 8 bits over its range,
   *     c ~ c_min + (c_max - c_min) / 255 * u; the integer sums are exact, then
   *     scaled in fp32 and times the fp16 key norm and the softmax scale;
   *   - values: the softmax weights times the fp16 value norm, exp(logit - m) *
   *     norm, to u8 with one scale per head and pass of 64 tokens (the pass's
   *     largest weight / 255: weights below 1/510 of it become 0); the value
   *     codebook to int8 with one scale, max |c| / 127; integer sums per pass,
   *     added in fp32.
   * Everything else is as kBf16 (online softmax in fp32 per 64 tokens on the
   * unrounded weights, split-K merge, rotation back). Measured error
   * (tests/test_cpu_low_precision.cpp, the kBf16 cases above at int8):
   * relative L2 error per head against attention_compressed 1.2e-2 on average
   * and at most 3.4e-2 over 1338 random heads with softmax scale
   * 1/sqrt(head_dim); the query's rounding dominates, so the error grows with
   * the logits' spread: up to 7.7e-2 with softmax scale 0.3 over a 37-token
   * window (tests/test_cpu_split_fused.cpp; tolerance 1e-1 per head, 1.5e-2
   * on average) -- about 3-4x kBf16's, and small beside the quantization itself
   * on real caches (`turbokv eval --precision int8` reports both:
   * docs/RESULTS.md).
   * Fractional widths: each part as above with its own query part, codebooks
   * and norms (a key's two part scores combined in fp32, a value's weights
   * rounded per part); a fractional head whose two parts share one AVX-512
   * register (SplitHeadState::packed: equal halves at head_dim <= 128, e.g.
   * 64 + 64) runs the kBf16 kernel instead (kFp32 without AVX512-BF16): int8
   * has no packed kernel and two half-empty int8 streams were slower.
   * With Intel AMX (int8_uses_amx(), turbokv/simd.h: GQA groups of 5..16
   * query heads at head_dim <= 128 by default, TURBOKV_AMX=0 / 1 to force) the
   * same integer sums are AMX tile products (`tdpbsud` for scores, `tdpbusd`
   * for values): the output is bit-identical to the `vpdpbusd` path's; on the
   * Intel Xeon of docs/RESULTS.md "Session 35" 1.04-1.41x faster at one thread
   * and 0.96-1.15x at two (GQA 5 and 8, head_dim 128, 32k tokens).
   * Needs simd_level() == SimdLevel::kAvx512 (which includes VNNI and VBMI);
   * below it the call runs the kFp32 kernels and returns exactly their result.
   * Source: src/cpu/tq_mse_int8_avx512.cpp.
   *
   * KIVI (Liu et al., arXiv 2402.02750; x_hat = min + scale * code): where every
   * key and value head of the call is KIVI at 1..4 bits and every value group is
   * a multiple of 32 channels, int8 dot products on the integer codes themselves
   * (`vpdpbusd`, no look-up). Rounded (round-to-nearest):
   *   - scores: per key group g (group_size tokens) the scaled query q * scale_g
   *     (fp32) to 15 bits over its range, step max |q_i scale_i| / 16256, held as
   *     two int8 digits (KIVI keys keep outlier channels: with one digit the other
   *     channels kept ~20 levels and the error was ~5x larger); the integer sums
   *     are exact, then scaled in fp32, plus <q, min_g> in fp32, times the softmax
   *     scale;
   *   - values: x_hat = mid + (scale / 2) (2 code - (2^b - 1)) with mid = min +
   *     scale (2^b - 1) / 2 per token and value group; the softmax weight times
   *     scale / 2 to u8 with one step per head, value group and pass of 64 tokens
   *     (the largest / 255), times the centred codes as s8; sum weight * mid in
   *     fp32 on the unrounded weights.
   * Measured error (tests/test_cpu_kivi_fused.cpp, CpuKiviInt8: Gaussian data with
   * an outlier key channel, head_dim 64..512, every width pair 1..4, key groups
   * 8..128, value groups 32..256, GQA 1..16, 1..4097 tokens, window, soft-capping):
   * relative L2 error per head against attention_compressed 5.0e-3 on average and
   * at most 1.04e-2 over 2432 heads (tolerance 3e-2 per head, 1e-2 on average).
   * Other KIVI calls (8-bit keys or values, value groups not a multiple of 32) run
   * the kFp32 kernel and return exactly its result. Source: src/cpu/kivi_int8_avx512.cpp.
   *
   * RVQ (two TurboQuant-MSE stages, x_hat = ||x|| Pi^T (c1[a] + c2[b])): where every
   * key and value head of the call is RVQ at 1..3 bits a stage, the TurboQuant
   * scheme above with both stages' centroids on one integer grid, so c1[a] + c2[b]
   * is one operand: keys u8 with step (range1 + range2) / 254, values s8 with step
   * (max |c1| + max |c2|) / 126; the query and the weights as for TurboQuant.
   * Measured error (tests/test_cpu_rvq_fused.cpp, CpuRvqInt8: Gaussian data with an
   * outlier key channel, head_dim 16..512, width pairs 1..3, GQA 1..16, 1..4097
   * tokens, window, soft-capping): 1.46e-2 on average and at most 5.5e-2 over 1614
   * heads (tolerance 1e-1 per head, 2e-2 on average). At 4 bits a stage (8 bits a
   * coordinate) int8's rounding is as large as the quantization itself and the
   * fp32 kernel was as fast, so those calls run the kFp32 kernel and return exactly
   * its result. Source: src/cpu/rvq_int8_avx512.cpp.
   */
  kInt8 = 2,
};

struct AttentionParams {
  double softmax_scale = 0;  ///< usually 1/sqrt(head_dim); must be > 0
  int window = 0;            ///< sliding window in tokens (0 = full attention)
  double softcap = 0;        ///< logit soft-capping value (0 = off)
  /// Arithmetic of the CPU fused TurboQuant-MSE kernels, integer and fractional widths, and with kInt8
  /// of the fused KIVI (1..4 bits) and RVQ (1..3 bits) kernels (see AttentionPrecision); default kFp32.
  AttentionPrecision precision = AttentionPrecision::kFp32;
};

/**
 * Validates the shape and parameters every decode attention shares; throws
 * std::invalid_argument naming the argument and value (`where` prefixes the
 * message): num_kv_heads > 0, num_heads a positive multiple of it,
 * softmax_scale positive and finite, window >= 0, softcap >= 0 and finite,
 * precision one of the AttentionPrecision values.
 */
void check_attention_params(const char* where, int num_heads, int num_kv_heads, const AttentionParams& p);

/// One KV head's encoded block: its codec and its bytes (codec.encoded_bytes(num_tokens)).
struct EncodedHead {
  const Codec* codec;
  const std::uint8_t* codes;
};

/**
 * Exact decode attention in fp64 on uncompressed tensors.
 * k, v: [num_tokens, num_kv_heads, head_dim] fp32; q: [num_heads, head_dim];
 * out: [num_heads, head_dim] fp64; weights (optional): [num_heads, num_tokens]
 * fp64 softmax weights (0 outside the window).
 * Throws std::invalid_argument on bad shapes, non-finite input or num_tokens == 0.
 */
void attention_exact(const float* k, const float* v, std::size_t num_tokens, int num_kv_heads, int head_dim,
                     const float* q, int num_heads, const AttentionParams& p, double* out,
                     double* weights = nullptr);

/**
 * Decode attention computed on the compressed cache (reference): scores from
 * Codec::scores (no decoded keys), values accumulated in each codec's domain
 * and finalised once per head (no decoded values).
 * keys, values: num_kv_heads encoded heads of num_tokens tokens each (all key
 * codecs share head_dim); q: [num_heads, head_dim]; out: [num_heads, head_dim];
 * context: the query sees tokens [0, context) of the block (0 means all
 * num_tokens; a causal query at position t passes t + 1);
 * weights (optional): [num_heads, context] as above.
 */
void attention_compressed(const std::vector<EncodedHead>& keys, const std::vector<EncodedHead>& values,
                          std::size_t num_tokens, const float* q, int num_heads, const AttentionParams& p,
                          double* out, double* weights = nullptr, std::size_t context = 0);

}  // namespace turbokv
