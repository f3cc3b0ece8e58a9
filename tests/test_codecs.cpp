// Every method, width and head_dim: determinism, zero vectors, scores and value
// accumulation consistent with decode, and reconstruction quality.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "test_util.h"
#include "turbokv/codec.h"
#include "turbokv/formats.h"
#include "turbokv/half.h"
#include "turbokv/rng.h"

using namespace turbokv;

namespace {

struct Case {
  Method m;
  double bits;
  int d;
};

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (Method m : all_methods())
    for (double b : supported_bits(m))
      for (int d : {64, 80, 96, 128, 256}) out.push_back({m, b, d});
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = std::string(method_name(info.param.m)) + "_b" + std::to_string(info.param.bits) + "_d" +
                  std::to_string(info.param.d);
  for (auto& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

std::unique_ptr<Codec> make(const Case& c, Role role = Role::kKey, std::uint64_t seed = 7) {
  CodecConfig cfg;
  cfg.method = c.m;
  cfg.bits = c.bits;
  cfg.head_dim = c.d;
  cfg.role = role;
  cfg.seed = seed;
  if (c.d % cfg.group_size) cfg.group_size = 16;  // KIVI value groups must divide head_dim
  return make_codec(cfg);
}

/// Gaussian rows with a few outlier channels, like real keys.
std::vector<float> data(std::size_t n, int d, std::uint64_t seed) {
  auto x = test::gaussian(n * d, seed);
  for (std::size_t t = 0; t < n; ++t) x[t * d + 3] *= 8, x[t * d + d / 2] *= 5;
  return x;
}

/// Upper bound on the normalised MSE on data(): theory where there is one.
double nmse_bound(const Case& c) {
  switch (c.m) {
    case Method::kTurboMse: {
      const int b = static_cast<int>(c.bits);
      const double lm = c.d * lloyd_max_codebook(c.d, b, CodebookKind::kBeta).mse;
      // Fractional widths sit between their neighbours.
      return (c.bits == b ? 1.1 : 1.0) * lm;
    }
    case Method::kRvq: return 1.1 * c.d * lloyd_max_codebook(c.d, static_cast<int>(c.bits), CodebookKind::kBeta).mse;
    case Method::kTurboProd: return 2.5 * std::sqrt(M_PI / 2) * (c.bits > 1 ? 0.4 : 1.0);  // MSE + QJL noise
    case Method::kQjl: return M_PI / 2 + 0.2;  // decoded QJL: (pi/2 - 1) ||k||^2 per unit m/d, + sketch variance
    case Method::kPvq: return std::pow(2.0, -1.2 * c.bits);
    case Method::kPolar: return std::pow(2.0, -1.4 * (c.bits - 1));
    case Method::kKivi: return 2.0 * std::pow(2.0, -1.8 * (c.bits - 1));
    case Method::kFp8: return 2e-3;
    case Method::kFp16: return 1e-6;
  }
  return 0;
}

/// Bytes of n key tokens per the layouts documented in turbokv/formats.h.
std::size_t expected_bytes(const Case& c, std::size_t n) {
  const std::size_t d = static_cast<std::size_t>(c.d);
  const int b = static_cast<int>(c.bits);
  switch (c.m) {
    case Method::kTurboMse:
      if (c.bits != b) {
        const std::size_t dout = d / 2 / 8 * 8;
        return n * ((dout * (b + 1) + (d - dout) * b) / 8 + 4);
      }
      return n * (d * b / 8 + 2);
    case Method::kTurboProd: return n * (d * (b - 1) / 8 + d / 8 + 4);
    case Method::kQjl: return n * (d / 8 + 2);
    case Method::kRvq: return n * (2 * d * b / 8 + 2);
    case Method::kPvq: {
      const int g[] = {0, 8, 4, 2, 2}, cb[] = {0, 8, 8, 6, 8};
      return n * ((d / g[b]) * cb[b] / 8);
    }
    case Method::kPolar: return n * ((d / 2 * b + 7 * d / 16 * std::max(1, b - 2) + 7) / 8 + 2 * (d / 16));
    case Method::kKivi: {  // keys: groups of G tokens per channel (G = 32, or 16 where make() picks it)
      const std::size_t g = d % 32 ? 16 : 32;
      return n * d * b / 8 + 4 * ((n + g - 1) / g) * d;
    }
    case Method::kFp8: return n * (d + 2);
    case Method::kFp16: return n * 2 * d;
  }
  return 0;
}

}  // namespace

class CodecTest : public ::testing::TestWithParam<Case> {};

TEST_P(CodecTest, DeterministicAndSized) {
  const Case c = GetParam();
  const std::size_t n = 65;
  auto x = data(n, c.d, 3);
  auto a = make(c), b = make(c), other = make(c, Role::kKey, 8);
  a->calibrate(x.data(), n);
  b->calibrate(x.data(), n);
  other->calibrate(x.data(), n);
  std::vector<std::uint8_t> ca(a->encoded_bytes(n)), cb(b->encoded_bytes(n)), co(other->encoded_bytes(n));
  a->encode(x.data(), n, ca.data());
  b->encode(x.data(), n, cb.data());
  other->encode(x.data(), n, co.data());
  EXPECT_EQ(ca, cb) << "same seed, same bytes";
  const bool seeded = c.m != Method::kKivi && c.m != Method::kFp8 && c.m != Method::kFp16;
  if (seeded) {
    EXPECT_NE(ca, co) << "the seed must matter";
  }
  // The byte count is the layout of turbokv/formats.h, nothing more.
  EXPECT_EQ(ca.size(), expected_bytes(c, n));
  EXPECT_NEAR(a->bits_per_element(n), 8.0 * (ca.size() + a->side_bytes()) / (n * c.d), 1e-12);
}

TEST_P(CodecTest, ZeroVectorDecodesToZero) {
  const Case c = GetParam();
  const std::size_t n = 3;
  auto cal = data(64, c.d, 4);
  auto codec = make(c);
  codec->calibrate(cal.data(), 64);
  std::vector<float> zero(n * c.d, 0.0f), dec(n * c.d, 1.0f);
  std::vector<std::uint8_t> codes(codec->encoded_bytes(n));
  codec->encode(zero.data(), n, codes.data());
  codec->decode(codes.data(), n, dec.data());
  // KIVI/PVQ reconstruct the group minimum / nearest centroid, not exactly 0 for PVQ.
  for (float v : dec) {
    ASSERT_FALSE(std::isnan(v));
    if (c.m != Method::kPvq) {
      ASSERT_EQ(v, 0.0f);
    }
  }
}

TEST_P(CodecTest, ScoresAndAccumulationMatchDecode) {
  const Case c = GetParam();
  const std::size_t n = 33;
  auto x = data(n, c.d, 5);
  auto codec = make(c, Role::kValue);
  codec->calibrate(x.data(), n);
  std::vector<std::uint8_t> codes(codec->encoded_bytes(n));
  codec->encode(x.data(), n, codes.data());
  std::vector<float> dec(n * c.d);
  codec->decode(codes.data(), n, dec.data());
  auto q = test::gaussian(c.d, 6);
  std::vector<double> st(codec->query_state_size()), s(n - 4), w(n - 4), acc(codec->accumulator_size(), 0.0), out(c.d);
  codec->prepare_query(q.data(), st.data());
  codec->scores(st.data(), codes.data(), n, 2, n - 2, s.data());  // an inner token range
  std::vector<double> expect_out(c.d, 0.0);
  for (std::size_t t = 2; t < n - 2; ++t) {
    double dot = 0, qn = 0, xn = 0;
    for (int i = 0; i < c.d; ++i) dot += double(q[i]) * dec[t * c.d + i], qn += double(q[i]) * q[i], xn += double(dec[t * c.d + i]) * dec[t * c.d + i];
    EXPECT_NEAR(s[t - 2], dot, 1e-5 * std::sqrt(qn * xn) + 1e-30) << "token " << t;
    w[t - 2] = std::sin(double(t));
    for (int i = 0; i < c.d; ++i) expect_out[i] += w[t - 2] * dec[t * c.d + i];
  }
  codec->accumulate(codes.data(), n, 2, n - 2, w.data(), acc.data());
  codec->finalize(acc.data(), out.data());
  EXPECT_LT(test::rel_err(out.data(), expect_out.data(), c.d), 1e-5);
}

TEST_P(CodecTest, ReconstructionQuality) {
  const Case c = GetParam();
  const std::size_t n = 512;
  auto x = data(n, c.d, 9);
  auto codec = make(c, Role::kKey);
  codec->calibrate(x.data(), n);
  std::vector<std::uint8_t> codes(codec->encoded_bytes(n));
  codec->encode(x.data(), n, codes.data());
  std::vector<float> dec(n * c.d);
  codec->decode(codes.data(), n, dec.data());
  const double e = test::rel_err(dec.data(), x.data(), n * c.d);
  EXPECT_LT(e * e, nmse_bound(c));
  EXPECT_TRUE(std::isfinite(e));
}

INSTANTIATE_TEST_SUITE_P(All, CodecTest, ::testing::ValuesIn(all_cases()), case_name);

TEST(Codecs, MoreBitsNeverWorse) {
  const int d = 128;
  const std::size_t n = 512;
  auto x = data(n, d, 21);
  for (Method m : all_methods()) {
    double prev = 1e30;
    for (double b : supported_bits(m)) {
      auto codec = make({m, b, d});
      codec->calibrate(x.data(), n);
      std::vector<std::uint8_t> codes(codec->encoded_bytes(n));
      codec->encode(x.data(), n, codes.data());
      std::vector<float> dec(n * d);
      codec->decode(codes.data(), n, dec.data());
      const double e = test::rel_err(dec.data(), x.data(), n * d);
      EXPECT_LE(e, prev) << method_name(m) << " bits " << b;
      prev = e;
    }
  }
}

TEST(Codecs, CenteringRemovesAChannelOffset) {
  // Keys with a large constant offset in one channel (as in Gemma 3 layer 5):
  // mean removal must cut the error of a norm-scaled quantizer, and scores
  // must stay equal to <q, decoded>.
  const int d = 128;
  const std::size_t n = 256;
  auto x = test::gaussian(n * d, 31);
  for (std::size_t t = 0; t < n; ++t) x[t * d + 5] += 30.0f;
  double err[2];
  for (int c = 0; c < 2; ++c) {
    CodecConfig cfg;
    cfg.method = Method::kTurboMse;
    cfg.bits = 3;
    cfg.head_dim = d;
    cfg.center = c == 1;
    auto codec = make_codec(cfg);
    EXPECT_EQ(codec->needs_calibration(), c == 1);
    codec->calibrate(x.data(), n);
    std::vector<std::uint8_t> codes(codec->encoded_bytes(n));
    codec->encode(x.data(), n, codes.data());
    std::vector<float> dec(n * d);
    codec->decode(codes.data(), n, dec.data());
    err[c] = test::rel_err(dec.data(), x.data(), n * d);
    auto q = test::gaussian(d, 32);
    std::vector<double> st(codec->query_state_size()), s(n);
    codec->prepare_query(q.data(), st.data());
    codec->scores(st.data(), codes.data(), n, 0, n, s.data());
    for (std::size_t t = 0; t < n; t += 17) {
      double dot = 0;
      for (int i = 0; i < d; ++i) dot += double(q[i]) * dec[t * d + i];
      EXPECT_NEAR(s[t], dot, 1e-5 * (std::fabs(dot) + 1));
    }
  }
  EXPECT_LT(err[1], 0.5 * err[0]) << "centered " << err[1] << " plain " << err[0];
}

TEST(Codecs, KiviErrorWithinHalfAStep) {
  // Values near 100 are not exactly representable in fp16: the stored minimum
  // rounds down and the scale up, so no code clamps (review finding).
  const int d = 32;
  const std::size_t n = 32;
  Rng r(3);
  std::vector<float> x(n * d);
  for (auto& v : x) v = 100.03f + 0.05f * static_cast<float>(r.uniform());
  CodecConfig cfg;
  cfg.method = Method::kKivi;
  cfg.bits = 4;
  cfg.head_dim = d;
  auto c = make_codec(cfg);
  std::vector<std::uint8_t> codes(c->encoded_bytes(n));
  c->encode(x.data(), n, codes.data());
  std::vector<float> dec(n * d);
  c->decode(codes.data(), n, dec.data());
  // Per channel (one key group of 32 tokens): error <= scale/2 with
  // scale = (max - fp16_down(min)) / 15 rounded up to fp16 (clamping a code
  // used to cost up to 0.03 here, an fp16 ulp at 100).
  for (int j = 0; j < d; ++j) {
    float mn = 1e30f, mx = -1e30f;
    for (std::size_t t = 0; t < n; ++t) mn = std::min(mn, x[t * d + j]), mx = std::max(mx, x[t * d + j]);
    const float step = half_to_float(float_to_half_up((mx - half_to_float(float_to_half_down(mn))) / 15.0f));
    for (std::size_t t = 0; t < n; ++t) ASSERT_LE(std::fabs(dec[t * d + j] - x[t * d + j]), 0.5f * step * 1.001f) << j;
  }
}

TEST(Codecs, Fp8TinyRowsKeepPrecision) {
  const int d = 64;
  for (float scale : {1e-6f, 1e-3f, 1.0f, 300.0f}) {
    auto x = test::gaussian(d, 8, scale);
    CodecConfig cfg;
    cfg.method = Method::kFp8;
    cfg.bits = 8;
    cfg.head_dim = d;
    auto c = make_codec(cfg);
    std::vector<std::uint8_t> codes(c->encoded_bytes(1));
    c->encode(x.data(), 1, codes.data());
    std::vector<float> dec(d);
    c->decode(codes.data(), 1, dec.data());
    EXPECT_LT(test::rel_err(dec.data(), x.data(), d), 0.04) << "scale " << scale;
  }
}

// PolarQuant's encode arithmetic (formats.h polar_radius, polar_cell1, polar_cell_hi; no atan2 / hypot since
// session 46): the angle cells are atan2's (the paper's definition) wherever the fp64 angle is more than 1e-9
// from a cell edge, the axes, diagonals and signed zeros land where a correctly rounded atan2 puts them, and the
// radius is within an ulp of hypot.
TEST(Codecs, PolarCellsAreAtan2Cells) {
  Rng rng(46);
  const auto random_pair = [&](double& a0, double& a1) {
    const double mag = std::pow(10.0, 40.0 * rng.uniform() - 20.0);
    a0 = static_cast<float>(mag * rng.normal());
    a1 = static_cast<float>(mag * rng.normal());
  };
  for (int b : {2, 3, 4}) {
    const int k1 = 1 << b;
    SCOPED_TRACE("level-1 bits " + std::to_string(b));
    const auto atan2_cell = [&](double a0, double a1) {
      double psi = std::atan2(a1, a0);
      if (psi < 0) psi += 2 * M_PI;
      const int c = static_cast<int>(psi / (2 * M_PI) * k1);
      return c >= k1 ? k1 - 1 : c;
    };
    // Direction k (angle k pi / 4) starts cell k k1 / 8 or lies inside cell floor(k k1 / 8).
    const double dirs[8][2] = {{1, 0}, {1, 1}, {0, 1}, {-1, 1}, {-1, 0}, {-1, -1}, {0, -1}, {1, -1}};
    for (int k = 0; k < 8; ++k)
      for (double m : {1e-30, 0.37, 1.0, 3e20}) {
        const double a0 = m * dirs[k][0], a1 = m * dirs[k][1];
        EXPECT_EQ(polar_cell1(a0, a1, b), k * k1 / 8) << "direction " << k << " magnitude " << m;
        EXPECT_EQ(polar_cell1(a0, a1, b), atan2_cell(a0, a1)) << "direction " << k << " magnitude " << m;
      }
    // Signed zeros as atan2 has them: (+-0, +-0) and (x, -0) at angle 0 or pi, (-0, y) on the y axis.
    EXPECT_EQ(polar_cell1(0.0, 0.0, b), 0);
    EXPECT_EQ(polar_cell1(-0.0, 0.0, b), k1 / 2);
    EXPECT_EQ(polar_cell1(0.0, -0.0, b), 0);
    EXPECT_EQ(polar_cell1(-0.0, -0.0, b), k1 / 2);
    EXPECT_EQ(polar_cell1(5.0, -0.0, b), 0);
    EXPECT_EQ(polar_cell1(-5.0, -0.0, b), k1 / 2);
    EXPECT_EQ(polar_cell1(-0.0, 5.0, b), k1 / 4);
    EXPECT_EQ(polar_cell1(0.0, -5.0, b), 3 * k1 / 4);
    for (double a0 : {0.0, -0.0, 2.0, -2.0})
      for (double a1 : {0.0, -0.0, 2.0, -2.0}) EXPECT_EQ(polar_cell1(a0, a1, b), atan2_cell(a0, a1)) << a0 << " " << a1;
    // Random pairs over 40 decades: every cell reached, atan2's cell away from the edges.
    int checked = 0;
    std::vector<int> seen(static_cast<std::size_t>(k1), 0);
    for (int i = 0; i < 200000; ++i) {
      double a0, a1;
      random_pair(a0, a1);
      double psi = std::atan2(a1, a0);
      if (psi < 0) psi += 2 * M_PI;
      const double f = psi / (2 * M_PI) * k1;
      if (std::fabs(f - std::round(f)) < 1e-9) continue;
      const int c = polar_cell1(a0, a1, b);
      ASSERT_EQ(c, atan2_cell(a0, a1)) << a0 << " " << a1;
      ++seen[static_cast<std::size_t>(c)];
      ++checked;
    }
    EXPECT_GT(checked, 199000);
    for (int c = 0; c < k1; ++c) EXPECT_GT(seen[static_cast<std::size_t>(c)], 1000) << "cell " << c;
  }
  // Levels 2..4: radius pairs (>= 0) against ascending boundaries in (0, pi / 2).
  for (const std::vector<double>& bnd : {std::vector<double>{0.7853981633974483}, std::vector<double>{0.31, 0.78, 1.2}}) {
    std::vector<double> tk;
    for (double v : bnd) tk.push_back(std::tan(v));
    const int nb = static_cast<int>(bnd.size());
    EXPECT_EQ(polar_cell_hi(0.0, 0.0, tk.data(), nb), 0u);
    EXPECT_EQ(polar_cell_hi(1.0, 0.0, tk.data(), nb), 0u);
    EXPECT_EQ(polar_cell_hi(0.0, 1.0, tk.data(), nb), static_cast<unsigned>(nb));
    int checked = 0;
    std::vector<int> seen(bnd.size() + 1, 0);
    for (int i = 0; i < 100000; ++i) {
      double a0, a1;
      random_pair(a0, a1);
      a0 = std::fabs(a0), a1 = std::fabs(a1);
      const double psi = std::atan2(a1, a0);
      unsigned want = 0;
      bool near = false;
      for (double v : bnd) want += psi > v ? 1u : 0u, near = near || std::fabs(psi - v) < 1e-9;
      if (near) continue;
      const unsigned c = polar_cell_hi(a0, a1, tk.data(), nb);
      ASSERT_EQ(c, want) << a0 << " " << a1;
      ++seen[c];
      ++checked;
    }
    EXPECT_GT(checked, 99000);
    for (int c = 0; c <= nb; ++c) EXPECT_GT(seen[static_cast<std::size_t>(c)], 1000) << "cell " << c;
  }
  // The radius: sqrt(a0 a0 + a1 a1), each operation rounded, within an ulp of hypot.
  for (int i = 0; i < 10000; ++i) {
    double a0, a1;
    random_pair(a0, a1);
    const double r = polar_radius(a0, a1), h = std::hypot(a0, a1);
    ASSERT_EQ(r, std::sqrt(a0 * a0 + a1 * a1));
    ASSERT_LE(std::fabs(r - h), std::ldexp(std::fabs(h), -52)) << a0 << " " << a1;
  }
}
