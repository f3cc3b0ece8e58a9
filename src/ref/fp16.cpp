// fp16 passthrough: each coordinate stored as IEEE binary16 (round-to-nearest-even).
#include "internal.h"
#include "turbokv/error.h"

namespace turbokv::ref {
namespace {

class Fp16 final : public Codec {
 public:
  explicit Fp16(const CodecConfig& cfg) : Codec(cfg), layout_{2 * static_cast<std::size_t>(cfg.head_dim), 0} { calibrated_ = true; }
  std::size_t encoded_bytes(std::size_t n) const override { return layout_.block_bytes(n); }

 protected:
  void do_encode(const float* x, std::size_t n, std::uint8_t* out) const override {
    for (std::size_t t = 0; t < n; ++t)
      for (int j = 0; j < head_dim(); ++j) store_half(layout_.codes(out, t) + 2 * j, x[t * head_dim() + j]);
  }
  float value(const std::uint8_t* codes, std::size_t t, int j) const { return load_half(layout_.codes(codes, t) + 2 * j); }
  void do_decode(const std::uint8_t* codes, std::size_t n, float* out) const override {
    for (std::size_t t = 0; t < n; ++t)
      for (int j = 0; j < head_dim(); ++j) out[t * head_dim() + j] = value(codes, t, j);
  }
  void do_scores(const double* state, const std::uint8_t* codes, std::size_t, std::size_t t0, std::size_t t1,
                 double* out) const override {
    for (std::size_t t = t0; t < t1; ++t) {
      double acc = 0;
      for (int j = 0; j < head_dim(); ++j) acc += state[j] * value(codes, t, j);
      out[t - t0] = acc;
    }
  }
  void do_accumulate(const std::uint8_t* codes, std::size_t, std::size_t t0, std::size_t t1, const double* w,
                     double* acc) const override {
    for (std::size_t t = t0; t < t1; ++t)
      for (int j = 0; j < head_dim(); ++j) acc[j] += w[t - t0] * value(codes, t, j);
  }

 private:
  TokenLayout layout_;
};

}  // namespace

std::unique_ptr<Codec> make_fp16(const CodecConfig& cfg) {
  check_bits(cfg, {16});
  return std::make_unique<Fp16>(cfg);
}

}  // namespace turbokv::ref
