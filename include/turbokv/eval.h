// turbokv — `turbokv eval`: compress real KV caches with every method and
// measure what is gained (bytes actually held) and lost (errors, attention).
//
// Input: a safetensors file per model (docs/DATA.md) with, for each layer L,
//   layers.L.keys    [num_tokens, num_kv_heads, head_dim]
//   layers.L.values  [num_tokens, num_kv_heads, head_dim]
//   layers.L.queries [num_queries, num_heads, head_dim]  (positions query_start ..)
// and metadata: model, num_heads, num_kv_heads, head_dim, query_start,
// softmax_scale, sliding_window.L (0 = full), attn_logit_softcapping.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "turbokv/attention.h"
#include "turbokv/codec.h"

namespace turbokv {

struct EvalOptions {
  std::vector<std::string> files;     ///< safetensors fixtures
  std::vector<Method> methods;        ///< empty = all
  std::vector<double> bits;           ///< empty = every width each method supports
  std::vector<int> layers;            ///< empty = all layers in the file
  int topk = 32;
  int threads = 0;                    ///< 0 = hardware concurrency
  std::uint64_t seed = 0x7b5eedull;
  bool center_keys = false;           ///< CodecConfig::center for the keys (all methods)
  /// Also run the CPU fast path's decode attention on the same bytes (cpu::attention_codec with
  /// cpu::make_cpu_codec views, one thread per case, AttentionParams::precision = cpu_precision, which
  /// only the fused TurboQuant-MSE kernels honour) and report its error against exact attention
  /// (EvalResult::cpu_cosine, cpu_rel_err). Off by default.
  bool cpu_attention = false;
  AttentionPrecision cpu_precision = AttentionPrecision::kFp32;
  std::function<void(const std::string&)> progress;  ///< called once per finished case
};

/// One (model, layer, method, bits) result; field names are the JSON keys.
struct EvalResult {
  std::string model;
  int layer = 0;
  std::string method;
  double bits = 0;              ///< nominal bits per coordinate
  double bits_per_element = 0;  ///< all-in: 8 * bytes / (2 * tokens * kv_heads * head_dim)
  std::size_t bytes = 0;        ///< bytes held for this layer's keys and values (codes + scalars + side data)
  double compression_ratio = 0; ///< fp16 bytes / bytes
  double key_nmse = 0, value_nmse = 0;  ///< sum ||x - x_hat||^2 / sum ||x||^2
  double ip_bias = 0, ip_rmse = 0;      ///< of <q,k_hat> - <q,k>, relative to the RMS of <q,k>
  double attn_cosine = 0, attn_rel_err = 0;  ///< compressed vs exact fp64 attention output (mean)
  double topk_recall = 0;       ///< |top-k(exact weights) ∩ top-k(compressed weights)| / k (mean)
  double attn_kl = 0;           ///< KL(p_exact || p_compressed) in nats (mean)
  double encode_ns_per_token = 0;  ///< encoding keys+values, all KV heads, per token
  double attend_ns_per_token = 0;  ///< compressed attention, all heads, per (query, context token)
  /// EvalOptions::cpu_attention: the precision asked for ("fp32", "bf16", "int8"; "" = not run) and the
  /// CPU fast path's attention output against exact fp64 attention (mean, as attn_cosine / attn_rel_err).
  std::string cpu_precision;
  double cpu_cosine = 0, cpu_rel_err = 0;
};

/// Runs the evaluation. Throws std::runtime_error / std::invalid_argument on bad files or options.
std::vector<EvalResult> run_eval(const EvalOptions& opt);

/// {"results": [...]} with exactly the EvalResult keys.
std::string eval_json(const std::vector<EvalResult>& results);

/// Human-readable tables, one per model (rows averaged over layers).
std::string eval_table(const std::vector<EvalResult>& results);

}  // namespace turbokv
