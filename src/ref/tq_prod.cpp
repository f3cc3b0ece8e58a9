// TurboQuant-Prod reference (Zandieh et al., arXiv 2504.19874, Algorithm 2).
//
//   u = x / ||x||;  u_mse = TurboQuant-MSE(u) at b-1 bits (rotated domain);
//   r = Pi u - c[code] (residual, rotated domain), gamma = ||r||;
//   signs = sign(S r) (QJL, m rows);  stored: codes, signs, ||x||, gamma.
//   <q, x> ~= ||x|| * ( <Pi q, c[code]> + kappa * gamma * <S Pi q, signs> )
// with kappa = sqrt(pi/2)/m for Gaussian S, which makes the estimate unbiased
// (E over S) up to the fp16 rounding of ||x|| and gamma (relative <= 2^-11);
// the decoded vector is the same expression with q removed:
//   x_hat = ||x|| * Pi^T ( c[code] + kappa * gamma * S^T signs ).
// b = 1 is pure QJL on the rotated unit vector (no MSE stage).
#include <cmath>

#include "internal.h"
#include "turbokv/error.h"

namespace turbokv::ref {
namespace {

class TqProd final : public Codec {
 public:
  explicit TqProd(const CodecConfig& cfg)
      : Codec(cfg),
        m_(cfg.qjl_rows ? cfg.qjl_rows : cfg.head_dim),
        mse_(cfg.head_dim, int_bits(cfg) - 1, cfg.rotation, cfg.codebook, cfg.seed),
        sketch_(m_, cfg.head_dim, cfg.qjl_orthogonal, cfg.seed ^ 0x51ull),
        mse_bytes_(packed_bytes(static_cast<std::size_t>(cfg.head_dim), int_bits(cfg) - 1)),
        layout_{mse_bytes_ + packed_bytes(static_cast<std::size_t>(m_), 1), 2} {
    calibrated_ = true;
  }

  std::size_t encoded_bytes(std::size_t n) const override { return layout_.block_bytes(n); }
  std::size_t query_state_size() const override { return static_cast<std::size_t>(head_dim() + m_); }
  std::size_t accumulator_size() const override { return static_cast<std::size_t>(head_dim() + m_); }

 protected:
  void do_encode(const float* x, std::size_t n, std::uint8_t* out) const override {
    const int d = head_dim();
    std::vector<float> u(static_cast<std::size_t>(d)), c(static_cast<std::size_t>(d));
    for (std::size_t t = 0; t < n; ++t) {
      std::uint8_t* codes = layout_.codes(out, t);
      const float norm = mse_.encode(x + t * d, codes, u.data());
      check_arg(norm <= 65504.0f, "Codec::encode(tq-prod)", "||x[t]||", norm, "exceeds the fp16 range of the stored norm");
      mse_.centroids(codes, c.data());
      for (int i = 0; i < d; ++i) u[static_cast<std::size_t>(i)] -= c[static_cast<std::size_t>(i)];
      const float gamma = std::sqrt(sumsq_spec(u.data(), static_cast<std::size_t>(d)));
      sketch_.signs(u.data(), codes + mse_bytes_);
      layout_.set_scalar(out, n, t, 0, norm);
      layout_.set_scalar(out, n, t, 1, gamma);
    }
  }

  void do_decode(const std::uint8_t* codes, std::size_t n, float* out) const override {
    const int d = head_dim();
    std::vector<float> c(static_cast<std::size_t>(d));
    std::vector<double> y(static_cast<std::size_t>(d)), xr(static_cast<std::size_t>(d));
    for (std::size_t t = 0; t < n; ++t) {
      const std::uint8_t* tc = layout_.codes(codes, t);
      mse_.centroids(tc, c.data());
      for (int i = 0; i < d; ++i) y[static_cast<std::size_t>(i)] = c[static_cast<std::size_t>(i)];
      sketch_.transpose_signs(tc + mse_bytes_, sketch_.kappa * layout_.scalar(codes, n, t, 1), y.data());
      mse_.rotation.inverse(y.data(), xr.data());
      const double norm = layout_.scalar(codes, n, t, 0);
      for (int i = 0; i < d; ++i) out[t * d + i] = static_cast<float>(norm * xr[static_cast<std::size_t>(i)]);
    }
  }

  void do_prepare_query(const float* q, double* state) const override {
    std::vector<double> qd(q, q + head_dim());
    mse_.rotation.forward(qd.data(), state);
    sketch_.project(state, state + head_dim());
  }

  void do_scores(const double* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 double* out) const override {
    const int d = head_dim();
    for (std::size_t t = t0; t < t1; ++t) {
      const std::uint8_t* tc = layout_.codes(codes, t);
      double dot = 0;
      if (mse_.bits > 0)
        for (int i = 0; i < d; ++i)
          dot += state[i] * mse_.codebook->centroids[get_code(tc, static_cast<std::size_t>(i), mse_.bits)];
      dot += sketch_.kappa * layout_.scalar(codes, n, t, 1) * Sketch::signed_sum(state + d, tc + mse_bytes_, m_);
      out[t - t0] = layout_.scalar(codes, n, t, 0) * dot;
    }
  }

  // Accumulator: [0, d) rotated-domain MSE part, [d, d+m) sketch-domain sign part.
  void do_accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const double* w,
                     double* acc) const override {
    const int d = head_dim();
    for (std::size_t t = t0; t < t1; ++t) {
      const std::uint8_t* tc = layout_.codes(codes, t);
      const double wn = w[t - t0] * layout_.scalar(codes, n, t, 0);
      if (mse_.bits > 0)
        for (int i = 0; i < d; ++i)
          acc[i] += wn * mse_.codebook->centroids[get_code(tc, static_cast<std::size_t>(i), mse_.bits)];
      const double wg = wn * sketch_.kappa * layout_.scalar(codes, n, t, 1);
      for (int i = 0; i < m_; ++i) acc[d + i] += get_code(tc + mse_bytes_, static_cast<std::size_t>(i), 1) ? wg : -wg;
    }
  }

  void do_finalize(const double* acc, double* out) const override {
    const int d = head_dim();
    std::vector<double> y(acc, acc + d);
    for (int i = 0; i < m_; ++i) {
      const float* row = &sketch_.s[static_cast<std::size_t>(i) * d];
      for (int j = 0; j < d; ++j) y[static_cast<std::size_t>(j)] += acc[d + i] * row[j];
    }
    mse_.rotation.inverse(y.data(), out);
  }

 private:
  int m_;
  RotatedScalar mse_;
  Sketch sketch_;
  std::size_t mse_bytes_;
  TokenLayout layout_;
};

}  // namespace

std::unique_ptr<Codec> make_tq_prod(const CodecConfig& cfg) {
  check_bits(cfg, {1, 2, 3, 4});
  return std::make_unique<TqProd>(cfg);
}

}  // namespace turbokv::ref
