// Lloyd-Max codebooks: the Gaussian-limit distortions of the literature, Beta
// approaching Gaussian, centroid condition, symmetry.
#include <gtest/gtest.h>

#include <cmath>

#include "turbokv/codebook.h"

using namespace turbokv;

TEST(Codebook, GaussianLimitMatchesLloydMax) {
  // Max (1960) / TurboQuant Table: unit-variance Gaussian Lloyd-Max MSE for b = 1..4.
  const double expected[] = {0.3634, 0.1175, 0.03454, 0.009497};
  for (int b = 1; b <= 4; ++b) {
    const auto& cb = lloyd_max_codebook(128, b, CodebookKind::kGaussian);
    EXPECT_NEAR(cb.mse * 128, expected[b - 1], expected[b - 1] * 0.0005) << "b=" << b;
  }
  // 1-bit centroids are +-sqrt(2/pi)/sqrt(d).
  const auto& cb1 = lloyd_max_codebook(64, 1, CodebookKind::kGaussian);
  EXPECT_NEAR(cb1.centroids[1] * 8, std::sqrt(2 / M_PI), 1e-5);
}

TEST(Codebook, BetaIsBelowGaussianAndConverges) {
  for (int b = 1; b <= 4; ++b) {
    const double g = lloyd_max_codebook(64, b, CodebookKind::kGaussian).mse * 64;
    const double beta64 = lloyd_max_codebook(64, b, CodebookKind::kBeta).mse * 64;
    const double beta1024 = lloyd_max_codebook(1024, b, CodebookKind::kBeta).mse * 1024;
    EXPECT_LT(beta64, g) << "b=" << b;  // lighter tails than the Gaussian limit
    EXPECT_NEAR(beta1024, lloyd_max_codebook(1024, b, CodebookKind::kGaussian).mse * 1024, 0.01 * g) << "b=" << b;
  }
}

TEST(Codebook, SymmetricSortedAndMidpoints) {
  for (int b = 1; b <= 8; ++b) {
    const auto& cb = lloyd_max_codebook(96, b, CodebookKind::kBeta);
    ASSERT_EQ(cb.centroids.size(), std::size_t(1) << b);
    for (std::size_t j = 0; j < cb.centroids.size(); ++j) {
      EXPECT_NEAR(cb.centroids[j], -cb.centroids[cb.centroids.size() - 1 - j], 1e-6) << "b=" << b;
      if (j) {
        EXPECT_LT(cb.centroids[j - 1], cb.centroids[j]);
      }
    }
    for (std::size_t j = 0; j < cb.boundaries.size(); ++j) {
      EXPECT_EQ(cb.boundaries[j], (cb.centroids[j] + cb.centroids[j + 1]) * 0.5f);
      EXPECT_EQ(cb.quantize(cb.boundaries[j]), j) << "ties round down";
      EXPECT_EQ(cb.quantize(std::nextafter(cb.boundaries[j], 1.0f)), j + 1);
    }
  }
}

TEST(Codebook, DiscreteSolverFindsUniformCellsForUniformDensity) {
  std::vector<double> x(10000), w(10000, 1.0);
  for (int i = 0; i < 10000; ++i) x[i] = (i + 0.5) / 10000;
  const auto cb = lloyd_max_discrete(x, w, 2);
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(cb.centroids[j], (j + 0.5) / 4, 1e-4);
  EXPECT_NEAR(cb.mse, 1.0 / 12 / 16, 1e-6);
}

TEST(Codebook, RejectsBadArguments) {
  EXPECT_THROW(lloyd_max_codebook(64, 0, CodebookKind::kBeta), std::invalid_argument);
  EXPECT_THROW(lloyd_max_codebook(64, 9, CodebookKind::kBeta), std::invalid_argument);
  EXPECT_THROW(lloyd_max_codebook(1, 2, CodebookKind::kBeta), std::invalid_argument);
}
