// KIVI-style asymmetric integer quantization (Liu et al., arXiv 2402.02750).
//
// Keys are grouped per channel over G consecutive tokens, values per token over
// G consecutive channels. In each group: mn16 = the fp16 value at or below the
// minimum (rounded toward -inf), scale16 = (max - mn16) / (2^b - 1) rounded up
// to fp16, so no code clamps and the error is at most scale16 / 2;
// code = clamp(round_half_even((x - mn16) / scale16), 0, 2^b - 1) (0 when
// scale16 == 0); x_hat = mn16 + scale16 * code. Groups whose scale would
// overflow fp16 are rejected before anything is written. The last key group of a
// block may hold fewer than G tokens. (KIVI also keeps the newest tokens in
// full precision; that residual window belongs to the cache, not this codec.)
#include <algorithm>
#include <cmath>

#include "internal.h"
#include "turbokv/error.h"

namespace turbokv::ref {
namespace {

class Kivi final : public Codec {
 public:
  explicit Kivi(const CodecConfig& cfg)
      : Codec(cfg), b_(int_bits(cfg)), g_(cfg.group_size), row_bytes_(packed_bytes(static_cast<std::size_t>(cfg.head_dim), b_)) {
    calibrated_ = true;
  }
  std::size_t encoded_bytes(std::size_t n) const override {
    return n * row_bytes_ + 4 * (key() ? groups(n) * head_dim() : n * static_cast<std::size_t>(head_dim() / g_));
  }

 protected:
  bool key() const { return cfg_.role == Role::kKey; }
  std::size_t groups(std::size_t n) const { return (n + g_ - 1) / g_; }
  /// Byte offset of the (min, scale) pair for token t / channel j.
  std::size_t param_offset(std::size_t n, std::size_t t, int j) const {
    const std::size_t idx = key() ? (t / g_) * head_dim() + j : t * (head_dim() / g_) + j / g_;
    return n * row_bytes_ + 4 * idx;
  }
  void quantize_group(const float* x, std::size_t stride, std::size_t count, std::uint8_t* params, std::uint8_t* rows,
                      std::size_t code_stride, std::size_t code_index0) const {
    float mn = x[0], mx = x[0];
    for (std::size_t i = 1; i < count; ++i) mn = std::min(mn, x[i * stride]), mx = std::max(mx, x[i * stride]);
    const float levels = static_cast<float>((1 << b_) - 1);
    const float mn16 = store_half_bits(params, float_to_half_down(mn));
    const float sc16 = store_half_bits(params + 2, float_to_half_up(static_cast<float>((double(mx) - mn16) / levels)));
    for (std::size_t i = 0; i < count; ++i) {
      std::uint32_t code = 0;
      if (sc16 > 0) {
        const float v = std::nearbyint((x[i * stride] - mn16) / sc16);
        code = static_cast<std::uint32_t>(std::clamp(v, 0.0f, levels));
      }
      // Key groups: one code per token row (same channel); value groups: consecutive codes in one row.
      put_code(rows + i * code_stride, code_index0 + (code_stride ? 0 : i), b_, code);
    }
  }

  /// Largest (max - min) / levels over all groups of x.
  double max_scale(const float* x, std::size_t n) const {
    const int d = head_dim();
    const double levels = (1 << b_) - 1;
    double worst = 0;
    auto range = [&](const float* p, std::size_t stride, std::size_t count) {
      float mn = p[0], mx = p[0];
      for (std::size_t i = 1; i < count; ++i) mn = std::min(mn, p[i * stride]), mx = std::max(mx, p[i * stride]);
      worst = std::max(worst, (double(mx) - mn) / levels);
    };
    if (key()) {
      for (std::size_t g0 = 0; g0 < n; g0 += g_)
        for (int j = 0; j < d; ++j) range(x + g0 * d + j, static_cast<std::size_t>(d), std::min<std::size_t>(g_, n - g0));
    } else {
      for (std::size_t t = 0; t < n; ++t)
        for (int j0 = 0; j0 < d; j0 += g_) range(x + t * d + j0, 1, static_cast<std::size_t>(g_));
    }
    return worst;
  }
  void do_validate(const float* x, std::size_t n) const override {
    const double s = max_scale(x, n);
    if (s > 32768.0)
      throw std::invalid_argument(detail::concat("Codec::encode(kivi): group scale = ", s,
                                                 ": (max - min) / (2^bits - 1) must stay below 32768 (stored in fp16)"));
  }
  void do_encode(const float* x, std::size_t n, std::uint8_t* out) const override {
    const int d = head_dim();
    if (key()) {
      for (std::size_t g0 = 0; g0 < n; g0 += g_) {
        const std::size_t cnt = std::min<std::size_t>(g_, n - g0);
        for (int j = 0; j < d; ++j)
          quantize_group(x + g0 * d + j, static_cast<std::size_t>(d), cnt, out + param_offset(n, g0, j),
                         out + g0 * row_bytes_, row_bytes_, static_cast<std::size_t>(j));
      }
    } else {
      for (std::size_t t = 0; t < n; ++t)
        for (int j0 = 0; j0 < d; j0 += g_)
          quantize_group(x + t * d + j0, 1, static_cast<std::size_t>(g_), out + param_offset(n, t, j0),
                         out + t * row_bytes_, 0, static_cast<std::size_t>(j0));
    }
  }
  /// Decodes token t: x_hat_j = min16 + scale16 * code. The (min, scale) pairs
  /// of a key group are converted once per group (`group` remembers which).
  struct RowDecoder {
    const Kivi& k;
    const std::uint8_t* codes;
    std::size_t n;
    std::vector<float> mn, sc;
    std::size_t group = static_cast<std::size_t>(-1);
    RowDecoder(const Kivi& kv, const std::uint8_t* c, std::size_t nn)
        : k(kv), codes(c), n(nn), mn(static_cast<std::size_t>(kv.head_dim())), sc(mn.size()) {}
    void operator()(std::size_t t, float* row) {
      const int d = k.head_dim();
      const std::size_t g = k.key() ? t / k.g_ : t;
      if (g != group) {
        for (int j = 0; j < d; ++j) {
          if (!k.key() && j % k.g_) {
            mn[j] = mn[j - 1], sc[j] = sc[j - 1];
            continue;
          }
          const std::uint8_t* p = codes + k.param_offset(n, t, j);
          mn[j] = load_half(p);
          sc[j] = load_half(p + 2);
        }
        group = g;
      }
      const std::uint8_t* rc = codes + t * k.row_bytes_;
      for (int j = 0; j < d; ++j) row[j] = mn[j] + sc[j] * static_cast<float>(get_code(rc, static_cast<std::size_t>(j), k.b_));
    }
  };
  void do_decode(const std::uint8_t* codes, std::size_t n, float* out) const override {
    RowDecoder row(*this, codes, n);
    for (std::size_t t = 0; t < n; ++t) row(t, out + t * head_dim());
  }
  void do_scores(const double* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 double* out) const override {
    RowDecoder row(*this, codes, n);
    std::vector<float> x(static_cast<std::size_t>(head_dim()));
    for (std::size_t t = t0; t < t1; ++t) {
      row(t, x.data());
      double acc = 0;
      for (int j = 0; j < head_dim(); ++j) acc += state[j] * x[static_cast<std::size_t>(j)];
      out[t - t0] = acc;
    }
  }
  void do_accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const double* w,
                     double* acc) const override {
    RowDecoder row(*this, codes, n);
    std::vector<float> x(static_cast<std::size_t>(head_dim()));
    for (std::size_t t = t0; t < t1; ++t) {
      row(t, x.data());
      for (int j = 0; j < head_dim(); ++j) acc[j] += w[t - t0] * x[static_cast<std::size_t>(j)];
    }
  }

 private:
  int b_, g_;
  std::size_t row_bytes_;
};

}  // namespace

std::unique_ptr<Codec> make_kivi(const CodecConfig& cfg) {
  check_bits(cfg, {1, 2, 3, 4, 8});
  check_arg(cfg.group_size >= 1, "make_codec(kivi)", "group_size", cfg.group_size, "must be positive");
  if (cfg.role == Role::kValue)
    check_arg(cfg.head_dim % cfg.group_size == 0, "make_codec(kivi)", "group_size", cfg.group_size,
              "must divide head_dim for value groups");
  return std::make_unique<Kivi>(cfg);
}

}  // namespace turbokv::ref
