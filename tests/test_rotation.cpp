// Rotations: orthogonal (inverse undoes forward, norms kept), seeded, mixing.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"
#include "turbokv/rotation.h"

using namespace turbokv;

class RotationTest : public ::testing::TestWithParam<std::tuple<int, RotationKind>> {};

TEST_P(RotationTest, OrthogonalAndSeeded) {
  const auto [d, kind] = GetParam();
  Rotation r(d, kind, 42), r2(d, kind, 42), r3(d, kind, 43);
  auto x = test::gaussian(static_cast<std::size_t>(d), d);
  std::vector<float> y(d), y2(d), y3(d), back(d);
  r.forward(x.data(), y.data());
  r2.forward(x.data(), y2.data());
  r3.forward(x.data(), y3.data());
  EXPECT_EQ(y, y2) << "same seed must give the same rotation, d=" << d;
  EXPECT_NE(y, y3) << "different seeds must differ, d=" << d;
  r.inverse(y.data(), back.data());
  EXPECT_LT(test::rel_err(back.data(), x.data(), d), 1e-5) << "d=" << d;
  double nx = 0, ny = 0;
  for (int i = 0; i < d; ++i) nx += double(x[i]) * x[i], ny += double(y[i]) * y[i];
  EXPECT_NEAR(ny / nx, 1.0, 1e-5) << "d=" << d;
  // Every output depends on every input (mixing): rotate each basis vector.
  std::vector<double> e(d), col(d);
  std::vector<int> touched(d, 0);
  for (int j = 0; j < d; ++j) {
    std::fill(e.begin(), e.end(), 0.0);
    e[j] = 1;
    r.forward(e.data(), col.data());
    for (int i = 0; i < d; ++i) touched[i] += std::fabs(col[i]) > 1e-9;
  }
  for (int i = 0; i < d; ++i) EXPECT_EQ(touched[i], d) << "output " << i << " misses inputs, d=" << d;
}

INSTANTIATE_TEST_SUITE_P(Dims, RotationTest,
                         ::testing::Combine(::testing::Values(8, 16, 64, 80, 96, 112, 128, 256),
                                            ::testing::Values(RotationKind::kHadamard, RotationKind::kHaar)));

TEST(Rotation, HadamardFollowsTheFormat) {
  // Non-powers of two use the dense rotation (see rotation.h).
  EXPECT_EQ(Rotation(80, RotationKind::kHadamard, 1).kind(), RotationKind::kHaar);
  Rotation p(128, RotationKind::kHadamard, 1);
  ASSERT_EQ(p.kind(), RotationKind::kHadamard);
  // y = H D x / sqrt(d), checked against an explicit Sylvester matrix.
  std::vector<double> x(128), y(128);
  for (int i = 0; i < 128; ++i) x[i] = std::sin(i + 1.0);
  p.forward(x.data(), y.data());
  for (int i = 0; i < 128; ++i) {
    double acc = 0;
    for (int j = 0; j < 128; ++j) acc += ((__builtin_popcount(i & j) & 1) ? -1.0 : 1.0) * p.signs()[j] * x[j];
    EXPECT_NEAR(y[i], acc / std::sqrt(128.0), 1e-6);
  }
}

TEST(Rotation, RejectsBadDim) { EXPECT_THROW(Rotation(0, RotationKind::kHadamard, 1), std::invalid_argument); }
