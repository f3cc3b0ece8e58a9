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

struct AttentionParams {
  double softmax_scale = 0;  ///< usually 1/sqrt(head_dim); must be > 0
  int window = 0;            ///< sliding window in tokens (0 = full attention)
  double softcap = 0;        ///< logit soft-capping value (0 = off)
};

/**
 * Validates the shape and parameters every decode attention shares; throws
 * std::invalid_argument naming the argument and value (`where` prefixes the
 * message): num_kv_heads > 0, num_heads a positive multiple of it,
 * softmax_scale positive and finite, window >= 0, softcap >= 0 and finite.
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
