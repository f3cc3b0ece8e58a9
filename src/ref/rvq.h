// The two-stage residual scalar quantizer's reference class (src/ref/rvq.cpp
// has the method's description and the constructor), in a header so that the
// CPU fast path (src/cpu/rvq.cpp) can read its rotation and codebooks.
// Internal, not public API.
#pragma once

#include <vector>

#include "internal.h"
#include "turbokv/error.h"

namespace turbokv::ref {

class Rvq final : public Codec {
 public:
  explicit Rvq(const CodecConfig& cfg);
  /// Read-only access for the CPU fast path (src/cpu/rvq.cpp).
  int bits() const { return b_; }
  const Rotation& rotation() const { return s1_.rotation; }
  const ScalarCodebook& stage1_codebook() const { return *s1_.codebook; }
  const ScalarCodebook& stage2_codebook() const { return *cb2_; }
  std::size_t stage_bytes() const { return stage_bytes_; }
  std::size_t encoded_bytes(std::size_t n) const override { return layout_.block_bytes(n); }

 protected:
  float coord(const std::uint8_t* tc, int i) const {
    return s1_.codebook->centroids[get_code(tc, static_cast<std::size_t>(i), b_)] +
           cb2_->centroids[get_code(tc + stage_bytes_, static_cast<std::size_t>(i), b_)];
  }
  void do_encode(const float* x, std::size_t n, std::uint8_t* out) const override {
    const int d = head_dim();
    std::vector<float> u(static_cast<std::size_t>(d));
    for (std::size_t t = 0; t < n; ++t) {
      std::uint8_t* tc = layout_.codes(out, t);
      const float norm = s1_.encode(x + t * d, tc, u.data());
      check_arg(norm <= 65504.0f, "Codec::encode(rvq)", "||x[t]||", norm, "exceeds the fp16 range of the stored norm");
      for (int i = 0; i < d; ++i) {
        const float r = u[static_cast<std::size_t>(i)] - s1_.codebook->centroids[get_code(tc, static_cast<std::size_t>(i), b_)];
        put_code(tc + stage_bytes_, static_cast<std::size_t>(i), b_, cb2_->quantize(r));
      }
      layout_.set_scalar(out, n, t, 0, norm);
    }
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, float* out) const override {
    const int d = head_dim();
    std::vector<float> y(static_cast<std::size_t>(d)), xr(static_cast<std::size_t>(d));
    for (std::size_t t = 0; t < n; ++t) {
      for (int i = 0; i < d; ++i) y[static_cast<std::size_t>(i)] = coord(layout_.codes(codes, t), i);
      s1_.rotation.inverse(y.data(), xr.data());
      const float norm = layout_.scalar(codes, n, t, 0);
      for (int i = 0; i < d; ++i) out[t * d + i] = norm * xr[static_cast<std::size_t>(i)];
    }
  }
  void do_prepare_query(const float* q, double* state) const override {
    std::vector<double> qd(q, q + head_dim());
    s1_.rotation.forward(qd.data(), state);
  }
  void do_scores(const double* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 double* out) const override {
    for (std::size_t t = t0; t < t1; ++t) {
      double dot = 0;
      for (int i = 0; i < head_dim(); ++i) dot += state[i] * coord(layout_.codes(codes, t), i);
      out[t - t0] = dot * layout_.scalar(codes, n, t, 0);
    }
  }
  void do_accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const double* w,
                     double* acc) const override {
    for (std::size_t t = t0; t < t1; ++t) {
      const double wn = w[t - t0] * layout_.scalar(codes, n, t, 0);
      for (int i = 0; i < head_dim(); ++i) acc[i] += wn * coord(layout_.codes(codes, t), i);
    }
  }
  void do_finalize(const double* acc, double* out) const override { s1_.rotation.inverse(acc, out); }

 private:
  int b_;
  RotatedScalar s1_;
  const ScalarCodebook* cb2_;
  std::size_t stage_bytes_;
  TokenLayout layout_;
};

}  // namespace turbokv::ref
