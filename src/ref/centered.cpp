// Per-channel mean removal around any codec (CodecConfig::center).
//
//   calibrate: mu_j = mean_t x_tj (rounded to fp16); the inner codec is
//              calibrated on x - mu
//   encode:    inner(x - mu)          decode: inner^-1 + mu
//   score:     <q, x_hat> = inner score of q + <q, mu>
//   values:    sum_t w_t x_hat_t = inner sum + (sum_t w_t) mu
#include <cmath>
#include <stdexcept>
#include <string>

#include "internal.h"
#include "turbokv/half.h"

namespace turbokv::ref {
namespace {

class Centered final : public Codec {
 public:
  Centered(const CodecConfig& cfg, std::unique_ptr<Codec> inner)
      : Codec(cfg), inner_(std::move(inner)), mu_(static_cast<std::size_t>(cfg.head_dim), 0.0f) {}
  bool needs_calibration() const override { return true; }
  std::size_t encoded_bytes(std::size_t n) const override { return inner_->encoded_bytes(n); }
  std::size_t side_bytes() const override { return inner_->side_bytes() + 2 * mu_.size(); }
  std::size_t query_state_size() const override { return inner_->query_state_size() + 1; }
  std::size_t accumulator_size() const override { return inner_->accumulator_size() + 1; }

 protected:
  std::vector<float> shifted(const float* x, std::size_t n) const {
    const std::size_t d = mu_.size();
    std::vector<float> y(x, x + n * d);
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t j = 0; j < d; ++j) y[t * d + j] -= mu_[j];
    return y;
  }
  void do_calibrate(const float* x, std::size_t n) override {
    const std::size_t d = mu_.size();
    std::vector<double> sum(d, 0.0);
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t j = 0; j < d; ++j) sum[j] += x[t * d + j];
    for (std::size_t j = 0; j < d; ++j) mu_[j] = round_to_half(static_cast<float>(sum[j] / static_cast<double>(n)));
    const auto y = shifted(x, n);
    inner_->calibrate(y.data(), n);
  }
  void do_validate(const float* x, std::size_t n) const override {
    const std::size_t d = mu_.size();
    for (std::size_t t = 0; t < n; ++t) {
      double s = 0;
      for (std::size_t j = 0; j < d; ++j) s += (double(x[t * d + j]) - mu_[j]) * (double(x[t * d + j]) - mu_[j]);
      if (std::sqrt(s) >= 32768.0)
        throw std::invalid_argument("Codec::encode(center): ||x[" + std::to_string(t) + "] - mu|| = " +
                                    std::to_string(std::sqrt(s)) + ": must be below 32768 (stored in fp16)");
    }
  }
  void do_encode(const float* x, std::size_t n, std::uint8_t* out) const override {
    const auto y = shifted(x, n);
    inner_->encode(y.data(), n, out);
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, float* out) const override {
    inner_->decode(codes, n, out);
    const std::size_t d = mu_.size();
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t j = 0; j < d; ++j) out[t * d + j] += mu_[j];
  }
  void do_prepare_query(const float* q, double* state) const override {
    inner_->prepare_query(q, state);
    double qm = 0;
    for (std::size_t j = 0; j < mu_.size(); ++j) qm += double(q[j]) * mu_[j];
    state[inner_->query_state_size()] = qm;
  }
  void do_scores(const double* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 double* out) const override {
    inner_->scores(state, codes, n, t0, t1, out);
    const double qm = state[inner_->query_state_size()];
    for (std::size_t t = t0; t < t1; ++t) out[t - t0] += qm;
  }
  void do_accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const double* w,
                     double* acc) const override {
    inner_->accumulate(codes, n, t0, t1, w, acc);
    double& wsum = acc[inner_->accumulator_size()];
    for (std::size_t t = t0; t < t1; ++t) wsum += w[t - t0];
  }
  void do_finalize(const double* acc, double* out) const override {
    inner_->finalize(acc, out);
    const double wsum = acc[inner_->accumulator_size()];
    for (std::size_t j = 0; j < mu_.size(); ++j) out[j] += wsum * mu_[j];
  }

 private:
  std::unique_ptr<Codec> inner_;
  std::vector<float> mu_;
};

}  // namespace

std::unique_ptr<Codec> make_centered(const CodecConfig& cfg, std::unique_ptr<Codec> inner) {
  return std::make_unique<Centered>(cfg, std::move(inner));
}

}  // namespace turbokv::ref
