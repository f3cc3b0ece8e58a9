// Reference decode attention (exact fp64, and on compressed codes).
#include "turbokv/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "turbokv/error.h"

namespace turbokv {

void check_attention_params(const char* where, int num_heads, int num_kv_heads, const AttentionParams& p) {
  check_arg(num_kv_heads > 0, where, "num_kv_heads", num_kv_heads, "must be positive");
  check_arg(num_heads > 0 && num_heads % num_kv_heads == 0, where, "num_heads", num_heads,
            "must be a positive multiple of num_kv_heads");
  check_arg(p.softmax_scale > 0 && std::isfinite(p.softmax_scale), where, "softmax_scale", p.softmax_scale,
            "must be positive and finite");
  check_arg(p.window >= 0, where, "window", p.window, "must be >= 0");
  check_arg(p.softcap >= 0 && std::isfinite(p.softcap), where, "softcap", p.softcap, "must be >= 0 and finite");
  check_arg(p.precision == AttentionPrecision::kFp32 || p.precision == AttentionPrecision::kBf16 ||
                p.precision == AttentionPrecision::kInt8,
            where, "precision", static_cast<int>(p.precision), "must be AttentionPrecision::kFp32, kBf16 or kInt8");
}

namespace {

void check_params(const char* where, std::size_t n, int num_heads, int num_kv_heads, const AttentionParams& p) {
  check_arg(n > 0, where, "num_tokens", n, "must be positive");
  check_attention_params(where, num_heads, num_kv_heads, p);
}

std::size_t window_start(std::size_t n, const AttentionParams& p) {
  return (p.window > 0 && n > static_cast<std::size_t>(p.window)) ? n - static_cast<std::size_t>(p.window) : 0;
}

/// In place: raw dot products -> softmax weights over [0, len).
void softmax_inplace(double* s, std::size_t len, const AttentionParams& p) {
  double mx = -INFINITY;
  for (std::size_t i = 0; i < len; ++i) {
    double l = s[i] * p.softmax_scale;
    if (p.softcap > 0) l = p.softcap * std::tanh(l / p.softcap);
    s[i] = l;
    mx = std::max(mx, l);
  }
  double sum = 0;
  for (std::size_t i = 0; i < len; ++i) sum += (s[i] = std::exp(s[i] - mx));
  for (std::size_t i = 0; i < len; ++i) s[i] /= sum;
}

}  // namespace

void attention_exact(const float* k, const float* v, std::size_t n, int num_kv_heads, int head_dim, const float* q,
                     int num_heads, const AttentionParams& p, double* out, double* weights) {
  check_params("attention_exact", n, num_heads, num_kv_heads, p);
  check_arg(head_dim > 0, "attention_exact", "head_dim", head_dim, "must be positive");
  const std::size_t d = static_cast<std::size_t>(head_dim), kvh = static_cast<std::size_t>(num_kv_heads);
  check_finite("attention_exact", "k", k, n * kvh * d);
  check_finite("attention_exact", "v", v, n * kvh * d);
  check_finite("attention_exact", "q", q, static_cast<std::size_t>(num_heads) * d);
  const int group = num_heads / num_kv_heads;
  const std::size_t t0 = window_start(n, p), len = n - t0;
  std::vector<double> s(len);
  for (int h = 0; h < num_heads; ++h) {
    const std::size_t g = static_cast<std::size_t>(h / group);
    const float* qh = q + static_cast<std::size_t>(h) * d;
    for (std::size_t t = t0; t < n; ++t) {
      const float* kt = k + (t * kvh + g) * d;
      double acc = 0;
      for (std::size_t i = 0; i < d; ++i) acc += double(qh[i]) * kt[i];
      s[t - t0] = acc;
    }
    softmax_inplace(s.data(), len, p);
    double* o = out + static_cast<std::size_t>(h) * d;
    std::fill(o, o + d, 0.0);
    for (std::size_t t = t0; t < n; ++t) {
      const float* vt = v + (t * kvh + g) * d;
      for (std::size_t i = 0; i < d; ++i) o[i] += s[t - t0] * vt[i];
    }
    if (weights) {
      double* w = weights + static_cast<std::size_t>(h) * n;
      std::fill(w, w + n, 0.0);
      std::copy(s.begin(), s.end(), w + t0);
    }
  }
}

void attention_compressed(const std::vector<EncodedHead>& keys, const std::vector<EncodedHead>& values,
                          std::size_t num_tokens, const float* q, int num_heads, const AttentionParams& p,
                          double* out, double* weights, std::size_t context) {
  const int num_kv_heads = static_cast<int>(keys.size());
  check_params("attention_compressed", num_tokens, num_heads, num_kv_heads, p);
  check_arg(context <= num_tokens, "attention_compressed", "context", context, "must be <= num_tokens");
  const std::size_t n = context ? context : num_tokens;
  check_arg(values.size() == keys.size(), "attention_compressed", "values.size()", values.size(),
            "must equal keys.size()");
  const int d = keys[0].codec->head_dim();
  for (std::size_t g = 0; g < keys.size(); ++g) {
    check_arg(keys[g].codec->head_dim() == d, "attention_compressed", "keys[g].head_dim", keys[g].codec->head_dim(),
              "must be the same for all heads");
    check_arg(values[g].codec->head_dim() == d, "attention_compressed", "values[g].head_dim",
              values[g].codec->head_dim(), "must equal the keys' head_dim");
  }
  const int group = num_heads / num_kv_heads;
  const std::size_t t0 = window_start(n, p), len = n - t0;
  std::vector<double> s(len), state, acc;
  for (int h = 0; h < num_heads; ++h) {
    const EncodedHead& kh = keys[static_cast<std::size_t>(h / group)];
    const EncodedHead& vh = values[static_cast<std::size_t>(h / group)];
    state.assign(kh.codec->query_state_size(), 0.0);
    kh.codec->prepare_query(q + static_cast<std::size_t>(h) * d, state.data());
    kh.codec->scores(state.data(), kh.codes, num_tokens, t0, n, s.data());
    softmax_inplace(s.data(), len, p);
    acc.assign(vh.codec->accumulator_size(), 0.0);
    vh.codec->accumulate(vh.codes, num_tokens, t0, n, s.data(), acc.data());
    vh.codec->finalize(acc.data(), out + static_cast<std::size_t>(h) * d);
    if (weights) {
      double* w = weights + static_cast<std::size_t>(h) * n;
      std::fill(w, w + n, 0.0);
      std::copy(s.begin(), s.end(), w + t0);
    }
  }
}

}  // namespace turbokv
