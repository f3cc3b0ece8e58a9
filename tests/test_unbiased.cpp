// TurboQuant-Prod and QJL: inner-product estimates are unbiased over the
// random sketch (mean error within 3 standard errors of 0) and their variance
// is within the QJL bound pi/(2m) * ||q||^2 * ||r||^2 (arXiv 2406.03482, Lemma 3.2),
// where r is the sketched vector (the key for QJL, ||x|| times the MSE residual for Prod).
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"
#include "turbokv/codec.h"

using namespace turbokv;

namespace {

struct Stats {
  double mean_err, se, var, bound;
};

Stats run(Method m, int bits, int d, bool orthogonal, int trials) {
  auto q = test::gaussian(static_cast<std::size_t>(d), 11);
  auto x = test::unit_rows(1, d, 12);
  for (auto& v : x) v *= 2.0f;  // ||x|| = 2, exact in fp16
  double truth = 0, qq = 0;
  for (int i = 0; i < d; ++i) truth += double(q[i]) * x[i], qq += double(q[i]) * q[i];
  double sum = 0, sum2 = 0, r2 = 0;
  std::vector<float> dec(static_cast<std::size_t>(d));
  for (int s = 0; s < trials; ++s) {
    CodecConfig cfg;
    cfg.method = m;
    cfg.bits = bits;
    cfg.head_dim = d;
    cfg.seed = 1000 + static_cast<std::uint64_t>(s);
    cfg.qjl_orthogonal = orthogonal;
    auto c = make_codec(cfg);
    std::vector<std::uint8_t> codes(c->encoded_bytes(1));
    c->encode(x.data(), 1, codes.data());
    std::vector<double> st(c->query_state_size());
    c->prepare_query(q.data(), st.data());
    double est;
    c->scores(st.data(), codes.data(), 1, 0, 1, &est);
    sum += est - truth;
    sum2 += (est - truth) * (est - truth);
    // Squared norm of the sketched vector: the key (QJL) or ||x||^2 * gamma^2 (Prod).
    if (m == Method::kQjl) {
      r2 += 4.0;
    } else {
      CodecConfig mc;
      mc.method = Method::kTurboMse;
      mc.bits = bits - 1;
      mc.head_dim = d;
      mc.seed = cfg.seed;
      if (bits == 1) {
        r2 += 4.0;
      } else {
        auto mse = make_codec(mc);
        std::vector<std::uint8_t> mcodes(mse->encoded_bytes(1));
        mse->encode(x.data(), 1, mcodes.data());
        mse->decode(mcodes.data(), 1, dec.data());
        double e = 0;
        for (int i = 0; i < d; ++i) e += double(x[i] - dec[i]) * (x[i] - dec[i]);
        r2 += e;
      }
    }
  }
  const double mean = sum / trials, var = sum2 / trials - mean * mean;
  return {mean, std::sqrt(var / trials), var, M_PI / (2.0 * d) * qq * (r2 / trials)};
}

}  // namespace

class Unbiased : public ::testing::TestWithParam<std::tuple<Method, int, int>> {};

TEST_P(Unbiased, GaussianSketch) {
  const auto [m, bits, d] = GetParam();
  const Stats s = run(m, bits, d, false, 3000);
  EXPECT_LT(std::fabs(s.mean_err), 3 * s.se) << "mean error " << s.mean_err << " se " << s.se;
  EXPECT_LT(s.var, 1.1 * s.bound) << "variance " << s.var << " bound " << s.bound;
  EXPECT_GT(s.var, 0.0);
}

INSTANTIATE_TEST_SUITE_P(All, Unbiased,
                         ::testing::Values(std::make_tuple(Method::kQjl, 1, 64), std::make_tuple(Method::kQjl, 1, 128),
                                           std::make_tuple(Method::kTurboProd, 1, 64),
                                           std::make_tuple(Method::kTurboProd, 2, 64),
                                           std::make_tuple(Method::kTurboProd, 3, 128),
                                           std::make_tuple(Method::kTurboProd, 4, 128)));

TEST(Unbiased, OrthogonalSketchWithItsConstant) {
  for (Method m : {Method::kQjl, Method::kTurboProd}) {
    const Stats s = run(m, m == Method::kQjl ? 1 : 3, 32, true, 1500);
    EXPECT_LT(std::fabs(s.mean_err), 3 * s.se) << method_name(m) << " mean error " << s.mean_err << " se " << s.se;
    EXPECT_LT(s.var, 1.1 * s.bound) << method_name(m);
  }
}

TEST(Unbiased, MseIsBiasedButProdIsNot) {
  // TurboQuant-MSE shrinks inner products (paper Sec. 3.2): its mean error is
  // many standard errors from 0 at 1 bit, which is why Prod exists.
  const int d = 64, trials = 1500;
  auto q = test::unit_rows(1, d, 11);
  auto x = q;  // <q, x> = 1: the shrinkage is largest
  double sum = 0, sum2 = 0;
  for (int s = 0; s < trials; ++s) {
    CodecConfig cfg;
    cfg.method = Method::kTurboMse;
    cfg.bits = 1;
    cfg.head_dim = d;
    cfg.seed = 50 + static_cast<std::uint64_t>(s);
    auto c = make_codec(cfg);
    std::vector<std::uint8_t> codes(c->encoded_bytes(1));
    c->encode(x.data(), 1, codes.data());
    std::vector<double> st(c->query_state_size());
    c->prepare_query(q.data(), st.data());
    double est;
    c->scores(st.data(), codes.data(), 1, 0, 1, &est);
    sum += est - 1.0;
    sum2 += (est - 1.0) * (est - 1.0);
  }
  const double mean = sum / trials, se = std::sqrt((sum2 / trials - mean * mean) / trials);
  EXPECT_GT(std::fabs(mean), 10 * se);
}
