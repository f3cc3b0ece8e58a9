// fp8 e4m3 baseline with a per-token scale: scale16 = max|x| / 448 rounded up to
// fp16 and at least 2^-24 (the smallest fp16 subnormal), so x / scale16 never
// exceeds 448; code_j = e4m3(x_j / scale16) (round-to-nearest-even);
// x_hat = e4m3(code) * scale16. A zero row stores scale 0 and zero codes.
#include <algorithm>
#include <cmath>

#include "internal.h"
#include "turbokv/error.h"

namespace turbokv::ref {
namespace {

class Fp8 final : public Codec {
 public:
  explicit Fp8(const CodecConfig& cfg) : Codec(cfg), layout_{static_cast<std::size_t>(cfg.head_dim), 1} { calibrated_ = true; }
  std::size_t encoded_bytes(std::size_t n) const override { return layout_.block_bytes(n); }

 protected:
  void do_encode(const float* x, std::size_t n, std::uint8_t* out) const override {
    const int d = head_dim();
    for (std::size_t t = 0; t < n; ++t) {
      float mx = 0;
      for (int j = 0; j < d; ++j) mx = std::max(mx, std::fabs(x[t * d + j]));
      const std::uint16_t h = mx > 0 ? float_to_half_up(std::max(mx / 448.0f, 5.9604644775390625e-08f)) : 0;
      const float sc = store_half_bits(out + n * layout_.code_bytes + 2 * t, h);
      std::uint8_t* c = layout_.codes(out, t);
      for (int j = 0; j < d; ++j) c[j] = sc > 0 ? float_to_e4m3(x[t * d + j] / sc) : 0;
    }
  }
  float value(const std::uint8_t* codes, std::size_t n, std::size_t t, int j) const {
    return e4m3_to_float(layout_.codes(codes, t)[j]) * layout_.scalar(codes, n, t, 0);
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, float* out) const override {
    for (std::size_t t = 0; t < n; ++t)
      for (int j = 0; j < head_dim(); ++j) out[t * head_dim() + j] = value(codes, n, t, j);
  }
  void do_scores(const double* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 double* out) const override {
    for (std::size_t t = t0; t < t1; ++t) {
      double acc = 0;
      for (int j = 0; j < head_dim(); ++j) acc += state[j] * value(codes, n, t, j);
      out[t - t0] = acc;
    }
  }
  void do_accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const double* w,
                     double* acc) const override {
    for (std::size_t t = t0; t < t1; ++t)
      for (int j = 0; j < head_dim(); ++j) acc[j] += w[t - t0] * value(codes, n, t, j);
  }

 private:
  TokenLayout layout_;
};

}  // namespace

std::unique_ptr<Codec> make_fp8(const CodecConfig& cfg) {
  check_bits(cfg, {8});
  return std::make_unique<Fp8>(cfg);
}

}  // namespace turbokv::ref
