// TurboQuant-MSE distortion on 100k random unit vectors vs the Lloyd-Max value.
#include <gtest/gtest.h>

#include "test_util.h"
#include "turbokv/codec.h"

using namespace turbokv;

class TqMseDistortion : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(TqMseDistortion, MatchesLloydMaxWithin2Percent) {
  const auto [d, b] = GetParam();
  CodecConfig cfg;
  cfg.method = Method::kTurboMse;
  cfg.bits = b;
  cfg.head_dim = d;
  auto codec = make_codec(cfg);
  const std::size_t total = 100000, chunk = 5000;
  double err = 0;
  std::vector<std::uint8_t> codes(codec->encoded_bytes(chunk));
  std::vector<float> dec(chunk * d);
  for (std::size_t c0 = 0; c0 < total; c0 += chunk) {
    const auto x = test::unit_rows(chunk, d, 1000 * d + 10 * b + c0);
    codec->encode(x.data(), chunk, codes.data());
    codec->decode(codes.data(), chunk, dec.data());
    for (std::size_t i = 0; i < chunk * d; ++i) err += double(dec[i] - x[i]) * (dec[i] - x[i]);
  }
  const double measured = err / total;  // unit vectors: E||x - x_hat||^2 / ||x||^2
  const double theory = d * lloyd_max_codebook(d, b, CodebookKind::kBeta).mse;
  EXPECT_NEAR(measured, theory, 0.02 * theory) << "d=" << d << " b=" << b;
  // And close to the Gaussian-limit numbers quoted in the paper.
  const double gauss[] = {0.3634, 0.1175, 0.03454, 0.009497};
  EXPECT_NEAR(measured, gauss[b - 1], 0.06 * gauss[b - 1]) << "d=" << d << " b=" << b;
}

INSTANTIATE_TEST_SUITE_P(All, TqMseDistortion,
                         ::testing::Combine(::testing::Values(64, 128, 256), ::testing::Values(1, 2, 3, 4)));
