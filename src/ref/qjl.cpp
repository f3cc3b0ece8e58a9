// QJL reference (Zandieh, Daliri, Han, arXiv 2406.03482).
//
//   stored:  signs = sign(S k) (m bits), ||k|| (fp16)
//   <q, k> ~= kappa * ||k|| * <S q, signs>,  kappa = sqrt(pi/2)/m (Gaussian S, Lemma 3.2),
//   or 1/(m E|u_1|) for orthogonalised unit rows (see Sketch in internal.h).
//   decoded: k_hat = kappa * ||k|| * S^T signs (the estimator is linear in q).
#include <cmath>

#include "internal.h"
#include "turbokv/error.h"

namespace turbokv::ref {
namespace {

class Qjl final : public Codec {
 public:
  explicit Qjl(const CodecConfig& cfg)
      : Codec(cfg),
        m_(cfg.qjl_rows ? cfg.qjl_rows : cfg.head_dim),
        sketch_(m_, cfg.head_dim, cfg.qjl_orthogonal, cfg.seed ^ 0x51ull),
        layout_{packed_bytes(static_cast<std::size_t>(m_), 1), 1} {
    calibrated_ = true;
  }
  std::size_t encoded_bytes(std::size_t n) const override { return layout_.block_bytes(n); }
  std::size_t query_state_size() const override { return static_cast<std::size_t>(m_); }
  std::size_t accumulator_size() const override { return static_cast<std::size_t>(m_); }

 protected:
  void do_encode(const float* x, std::size_t n, std::uint8_t* out) const override {
    const int d = head_dim();
    for (std::size_t t = 0; t < n; ++t) {
      const float norm = std::sqrt(sumsq_spec(x + t * d, static_cast<std::size_t>(d)));
      check_arg(norm <= 65504.0f, "Codec::encode(qjl)", "||x[t]||", norm, "exceeds the fp16 range of the stored norm");
      sketch_.signs(x + t * d, layout_.codes(out, t));
      layout_.set_scalar(out, n, t, 0, norm);
    }
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, float* out) const override {
    const int d = head_dim();
    std::vector<double> y(static_cast<std::size_t>(d));
    for (std::size_t t = 0; t < n; ++t) {
      std::fill(y.begin(), y.end(), 0.0);
      sketch_.transpose_signs(layout_.codes(codes, t), sketch_.kappa * layout_.scalar(codes, n, t, 0), y.data());
      for (int i = 0; i < d; ++i) out[t * d + i] = static_cast<float>(y[static_cast<std::size_t>(i)]);
    }
  }
  void do_prepare_query(const float* q, double* state) const override {
    std::vector<double> qd(q, q + head_dim());
    sketch_.project(qd.data(), state);
  }
  void do_scores(const double* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 double* out) const override {
    for (std::size_t t = t0; t < t1; ++t)
      out[t - t0] = sketch_.kappa * layout_.scalar(codes, n, t, 0) *
                    Sketch::signed_sum(state, layout_.codes(codes, t), m_);
  }
  void do_accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const double* w,
                     double* acc) const override {
    for (std::size_t t = t0; t < t1; ++t) {
      const double wg = w[t - t0] * sketch_.kappa * layout_.scalar(codes, n, t, 0);
      for (int i = 0; i < m_; ++i) acc[i] += get_code(layout_.codes(codes, t), static_cast<std::size_t>(i), 1) ? wg : -wg;
    }
  }
  void do_finalize(const double* acc, double* out) const override {
    const int d = head_dim();
    for (int j = 0; j < d; ++j) out[j] = 0;
    for (int i = 0; i < m_; ++i) {
      const float* row = &sketch_.s[static_cast<std::size_t>(i) * d];
      for (int j = 0; j < d; ++j) out[j] += acc[i] * row[j];
    }
  }

 private:
  int m_;
  Sketch sketch_;
  TokenLayout layout_;
};

}  // namespace

std::unique_ptr<Codec> make_qjl(const CodecConfig& cfg) {
  check_bits(cfg, {1});
  return std::make_unique<Qjl>(cfg);
}

}  // namespace turbokv::ref
