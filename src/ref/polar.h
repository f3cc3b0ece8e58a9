// The PolarQuant reference class (src/ref/polar.cpp has the method's description),
// in a header so that the CPU fast path (src/cpu/polar.cpp) can read its
// parameters. Internal, not public API.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "internal.h"
#include "turbokv/error.h"
#include "turbokv/formats.h"
#include "turbokv/rng.h"

namespace turbokv::ref {

constexpr int kPolarLevels = 4;  ///< polar levels (Han et al., Sec. 3)

class Polar final : public Codec {
 public:
  explicit Polar(const CodecConfig& cfg)
      : Codec(cfg), rot_(cfg.head_dim, RotationKind::kHadamard, cfg.seed), b1_(int_bits(cfg)), b2_(std::max(1, b1_ - 2)) {
    const int d = cfg.head_dim;
    n_hi_ = d / 4 + d / 8 + d / 16;
    l1_bytes_ = packed_bytes(static_cast<std::size_t>(d / 2), b1_);
    layout_ = TokenLayout{l1_bytes_ + packed_bytes(static_cast<std::size_t>(n_hi_), b2_), static_cast<std::size_t>(d / 16)};
    // Level 1: uniform angle on [0, 2 pi): uniform cells.
    const int k1 = 1 << b1_;
    for (int k = 0; k < k1; ++k) {
      const double a = (k + 0.5) * 2 * M_PI / k1;
      cos_[0].push_back(static_cast<float>(std::cos(a)));
      sin_[0].push_back(static_cast<float>(std::sin(a)));
    }
    for (int l = 2; l <= kPolarLevels; ++l) {
      const int n = 1 << 16;
      std::vector<double> x(n), w(n);
      const double p = std::ldexp(1.0, l - 1) - 1;
      for (int i = 0; i < n; ++i) {
        x[i] = (i + 0.5) * (M_PI / 2) / n;
        w[i] = std::pow(std::sin(2 * x[i]), p);
      }
      cb_[l - 1] = lloyd_max_discrete(x, w, b2_);
      for (float b : cb_[l - 1].boundaries) tan_[l - 1].push_back(std::tan(double(b)));
      for (float c : cb_[l - 1].centroids) {
        cos_[l - 1].push_back(static_cast<float>(std::cos(double(c))));
        sin_[l - 1].push_back(static_cast<float>(std::sin(double(c))));
      }
    }
    calibrated_ = true;
  }
  /// Read-only access for the CPU fast path (src/cpu/polar.cpp).
  const Rotation& rotation() const { return rot_; }
  int level1_bits() const { return b1_; }
  int high_bits() const { return b2_; }       ///< bits of the level 2..4 angles
  std::size_t level1_bytes() const { return l1_bytes_; }
  std::size_t code_bytes() const { return layout_.code_bytes; }
  /// Level l (1..4) angle codebook (levels 2..4 only) and fp32 cos/sin tables of its centroids.
  const ScalarCodebook& level_codebook(int l) const { return cb_[l - 1]; }
  const std::vector<float>& cos_table(int l) const { return cos_[l - 1]; }
  const std::vector<float>& sin_table(int l) const { return sin_[l - 1]; }
  /// Level l (2..4): the fp64 tangents of its codebook's boundaries, which the encode compares
  /// against (formats.h polar_cell_hi; computed once here by the host libm, then shared by every backend).
  const std::vector<double>& level_tangents(int l) const { return tan_[l - 1]; }
  std::size_t encoded_bytes(std::size_t n) const override { return layout_.block_bytes(n); }

 protected:
  /// Rotated-domain reconstruction y_hat[d] of token t (fp32).
  void reconstruct(const std::uint8_t* codes, std::size_t n, std::size_t t, float* y) const {
    const int d = head_dim();
    const std::uint8_t* tc = layout_.codes(codes, t);
    std::vector<float> r(static_cast<std::size_t>(d / 16)), next;
    for (int i = 0; i < d / 16; ++i) r[static_cast<std::size_t>(i)] = layout_.scalar(codes, n, t, static_cast<std::size_t>(i));
    // Levels 4..2: angle index of level l, entry i, lives at offset(l) + i in the high stream.
    for (int l = kPolarLevels; l >= 2; --l) {
      const int cnt = d >> l;  // number of radii at level l
      int off = 0;
      for (int k = 2; k < l; ++k) off += d >> k;
      next.assign(static_cast<std::size_t>(2 * cnt), 0.0f);
      for (int i = 0; i < cnt; ++i) {
        const std::uint32_t a = get_code(tc + l1_bytes_, static_cast<std::size_t>(off + i), b2_);
        next[static_cast<std::size_t>(2 * i)] = r[static_cast<std::size_t>(i)] * cos_[l - 1][a];
        next[static_cast<std::size_t>(2 * i + 1)] = r[static_cast<std::size_t>(i)] * sin_[l - 1][a];
      }
      r.swap(next);
    }
    for (int i = 0; i < d / 2; ++i) {
      const std::uint32_t a = get_code(tc, static_cast<std::size_t>(i), b1_);
      y[2 * i] = r[static_cast<std::size_t>(i)] * cos_[0][a];
      y[2 * i + 1] = r[static_cast<std::size_t>(i)] * sin_[0][a];
    }
  }

  void do_encode(const float* x, std::size_t n, std::uint8_t* out) const override {
    const int d = head_dim();
    std::vector<float> y(static_cast<std::size_t>(d));
    std::vector<double> r(static_cast<std::size_t>(d / 2)), next;
    for (std::size_t t = 0; t < n; ++t) {
      std::uint8_t* tc = layout_.codes(out, t);
      rot_.forward(x + t * d, y.data());
      // The polar transform in fp64 by the arithmetic formats.h fixes (radii, angle cells by compares).
      for (int i = 0; i < d / 2; ++i) {
        const double a0 = y[static_cast<std::size_t>(2 * i)], a1 = y[static_cast<std::size_t>(2 * i + 1)];
        r[static_cast<std::size_t>(i)] = polar_radius(a0, a1);
        put_code(tc, static_cast<std::size_t>(i), b1_, static_cast<std::uint32_t>(polar_cell1(a0, a1, b1_)));
      }
      int off = 0;
      for (int l = 2; l <= kPolarLevels; ++l) {
        const int cnt = d >> l;
        const std::vector<double>& tk = tan_[l - 1];
        next.assign(static_cast<std::size_t>(cnt), 0.0);
        for (int i = 0; i < cnt; ++i) {
          const double a0 = r[static_cast<std::size_t>(2 * i)], a1 = r[static_cast<std::size_t>(2 * i + 1)];
          next[static_cast<std::size_t>(i)] = polar_radius(a0, a1);
          put_code(tc + l1_bytes_, static_cast<std::size_t>(off + i), b2_,
                   polar_cell_hi(a0, a1, tk.data(), static_cast<int>(tk.size())));
        }
        off += cnt;
        r.swap(next);
      }
      for (int i = 0; i < d / 16; ++i) {
        check_arg(r[static_cast<std::size_t>(i)] <= 65504.0, "Codec::encode(polar)", "radius", r[static_cast<std::size_t>(i)],
                  "exceeds the fp16 range of the stored radius");
        layout_.set_scalar(out, n, t, static_cast<std::size_t>(i), static_cast<float>(r[static_cast<std::size_t>(i)]));
      }
      r.resize(static_cast<std::size_t>(d / 2));
    }
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, float* out) const override {
    const int d = head_dim();
    std::vector<float> y(static_cast<std::size_t>(d));
    for (std::size_t t = 0; t < n; ++t) {
      reconstruct(codes, n, t, y.data());
      rot_.inverse(y.data(), out + t * d);
    }
  }
  void do_prepare_query(const float* q, double* state) const override {
    std::vector<double> qd(q, q + head_dim());
    rot_.forward(qd.data(), state);
  }
  void do_scores(const double* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 double* out) const override {
    std::vector<float> y(static_cast<std::size_t>(head_dim()));
    for (std::size_t t = t0; t < t1; ++t) {
      reconstruct(codes, n, t, y.data());
      double acc = 0;
      for (int i = 0; i < head_dim(); ++i) acc += state[i] * y[static_cast<std::size_t>(i)];
      out[t - t0] = acc;
    }
  }
  void do_accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const double* w,
                     double* acc) const override {
    std::vector<float> y(static_cast<std::size_t>(head_dim()));
    for (std::size_t t = t0; t < t1; ++t) {
      reconstruct(codes, n, t, y.data());
      for (int i = 0; i < head_dim(); ++i) acc[i] += w[t - t0] * y[static_cast<std::size_t>(i)];
    }
  }
  void do_finalize(const double* acc, double* out) const override { rot_.inverse(acc, out); }

 private:
  Rotation rot_;
  int b1_, b2_, n_hi_ = 0;
  std::size_t l1_bytes_ = 0;
  TokenLayout layout_;
  ScalarCodebook cb_[kPolarLevels];
  std::vector<float> cos_[kPolarLevels], sin_[kPolarLevels];
  std::vector<double> tan_[kPolarLevels];  ///< levels 2..4: fp64 tangents of the boundaries
};

}  // namespace turbokv::ref
