// CPU fast path for TurboQuant-MSE, every SIMD level this machine has against
// the scalar reference (src/ref): packed bytes identical, decoded floats
// identical, scores within 1e-5 relative. Failures name the level, seed and shape.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "test_util.h"
#include "turbokv/codec.h"
#include "turbokv/cpu.h"
#include "turbokv/error.h"
#include "turbokv/formats.h"
#include "turbokv/half.h"
#include "turbokv/simd.h"

using namespace turbokv;

namespace {

constexpr double kScoreTol = 1e-5;  // fp32 accumulation against the fp64 reference

CodecConfig tq_config(int d, int bits, std::uint64_t seed) {
  CodecConfig cfg;
  cfg.method = Method::kTurboMse;
  cfg.bits = bits;
  cfg.head_dim = d;
  cfg.seed = seed;
  return cfg;
}

/// Gaussian rows with an outlier channel, a zero row, a tiny row and a large row.
std::vector<float> test_rows(std::size_t n, int d, std::uint64_t seed) {
  auto x = test::gaussian(n * d, seed);
  for (std::size_t t = 0; t < n; ++t) x[t * d + (t % d)] *= 8;
  if (n > 3) {
    std::fill(x.begin() + d, x.begin() + 2 * d, 0.0f);
    for (int i = 0; i < d; ++i) x[2 * d + i] *= 1e-20f;
    for (int i = 0; i < d; ++i) x[3 * d + i] *= 1e3f;
  }
  return x;
}

std::string shape(SimdLevel l, int d, int bits, std::size_t n, std::uint64_t seed) {
  return detail::concat("level=", simd_level_name(l), " d=", d, " bits=", bits, " n=", n, " seed=", seed);
}

}  // namespace

TEST(CpuSimd, LevelsAndOverride) {
  const auto levels = available_simd_levels();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.front(), SimdLevel::kScalar);
  EXPECT_EQ(levels.back(), detected_simd_level());
  for (SimdLevel l : levels) {
    ScopedSimdLevel g(l);
    EXPECT_EQ(simd_level(), l);
    EXPECT_EQ(parse_simd_level(simd_level_name(l)), l);
  }
  EXPECT_THROW(parse_simd_level("sse9"), std::invalid_argument);
  if (detected_simd_level() != SimdLevel::kAvx512) {
    EXPECT_THROW(set_simd_level(SimdLevel::kAvx512), std::invalid_argument);
  }
}

class CpuTqMse : public ::testing::TestWithParam<int> {};  // head_dim

TEST_P(CpuTqMse, EncodeBytesAndDecodeMatchReference) {
  const int d = GetParam();
  for (int bits = 1; bits <= 4; ++bits)
    for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{31}, std::size_t{64}, std::size_t{65},
                          std::size_t{1000}, std::size_t{4097}}) {
      const std::uint64_t seed = 1000 * d + 10 * bits + n;
      const CodecConfig cfg = tq_config(d, bits, seed);
      auto ref = make_codec(cfg);
      cpu::TqMse fast(cfg);
      ASSERT_EQ(fast.encoded_bytes(n), ref->encoded_bytes(n));
      const auto x = test_rows(n, d, seed);
      std::vector<std::uint8_t> want(ref->encoded_bytes(n));
      ref->encode(x.data(), n, want.data());
      std::vector<float> want_dec(n * d);
      ref->decode(want.data(), n, want_dec.data());
      for (SimdLevel l : available_simd_levels()) {
        ScopedSimdLevel g(l);
        SCOPED_TRACE(shape(l, d, bits, n, seed));
        const int off = static_cast<int>(n % 3) + 1;  // unaligned input and output
        std::vector<float> xs(n * d + 3);
        std::copy(x.begin(), x.end(), xs.begin() + off);
        std::vector<std::uint8_t> got(want.size() + 3, 0xAB);
        fast.encode(xs.data() + off, n, got.data() + off);
        ASSERT_EQ(0, std::memcmp(got.data() + off, want.data(), want.size())) << "packed bytes differ";
        std::vector<float> dec(n * d + 3);
        fast.decode(want.data(), n, dec.data() + off);
        ASSERT_EQ(0, std::memcmp(dec.data() + off, want_dec.data(), sizeof(float) * n * d)) << "decoded floats differ";
        // fp16 / bf16 inputs against the reference fed the same values in fp32
        for (cpu::DType dt : {cpu::DType::kF16, cpu::DType::kBf16}) {
          std::vector<std::uint16_t> h(n * d + 3);
          std::vector<float> xf(n * d);
          for (std::size_t i = 0; i < n * d; ++i) {
            const float v = std::min(std::max(x[i], -60000.0f), 60000.0f) * (i < 4 * static_cast<std::size_t>(d) ? 1e-2f : 1.0f);
            h[i + off] = dt == cpu::DType::kF16 ? float_to_half(v) : float_to_bf16(v);
            xf[i] = dt == cpu::DType::kF16 ? half_to_float(h[i + off]) : bf16_to_float(h[i + off]);
          }
          std::vector<std::uint8_t> w16(want.size()), g16(want.size() + 3);
          ref->encode(xf.data(), n, w16.data());
          fast.encode(h.data() + off, dt, n, g16.data() + off);
          ASSERT_EQ(0, std::memcmp(g16.data() + off, w16.data(), w16.size()))
              << (dt == cpu::DType::kF16 ? "fp16" : "bf16") << " input: packed bytes differ";
        }
      }
    }
}

TEST_P(CpuTqMse, AllZeroAndAllMaxCodes) {
  const int d = GetParam();
  for (int bits = 1; bits <= 4; ++bits) {
    const CodecConfig cfg = tq_config(d, bits, 7);
    auto ref = make_codec(cfg);
    cpu::TqMse fast(cfg);
    const std::size_t n = 37;
    for (std::uint8_t fill : {std::uint8_t{0x00}, std::uint8_t{0xFF}}) {
      std::vector<std::uint8_t> codes(ref->encoded_bytes(n), fill);
      for (std::size_t t = 0; t < n; ++t) store_half(codes.data() + n * fast.code_bytes() + 2 * t, 0.5f + t);
      std::vector<float> want(n * d), got(n * d);
      ref->decode(codes.data(), n, want.data());
      auto q = test::gaussian(d, 3);
      std::vector<double> qs(ref->query_state_size()), ws(n);
      ref->prepare_query(q.data(), qs.data());
      ref->scores(qs.data(), codes.data(), n, 0, n, ws.data());
      for (SimdLevel l : available_simd_levels()) {
        ScopedSimdLevel g(l);
        SCOPED_TRACE(shape(l, d, bits, n, 7) + (fill ? " all-max" : " all-zero"));
        fast.decode(codes.data(), n, got.data());
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * n * d));
        std::vector<float> s(n);
        fast.scores(q.data(), codes.data(), n, 0, n, s.data());
        EXPECT_LT(test::rel_err(s.data(), ws.data(), n), kScoreTol);
      }
    }
  }
}

TEST_P(CpuTqMse, ScoresMatchReference) {
  const int d = GetParam();
  for (int bits = 1; bits <= 4; ++bits)
    for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{31}, std::size_t{64}, std::size_t{65},
                          std::size_t{1000}, std::size_t{4097}}) {
      const std::uint64_t seed = 77 + n + bits;
      const CodecConfig cfg = tq_config(d, bits, seed);
      auto ref = make_codec(cfg);
      cpu::TqMse fast(cfg);
      const auto x = test::gaussian(n * d, seed);
      std::vector<std::uint8_t> codes(ref->encoded_bytes(n));
      ref->encode(x.data(), n, codes.data());
      const auto q = test::gaussian(d, seed + 1);
      std::vector<double> qs(ref->query_state_size());
      ref->prepare_query(q.data(), qs.data());
      const std::size_t t0 = n / 3, t1 = n;
      std::vector<double> want(t1 - t0);
      ref->scores(qs.data(), codes.data(), n, t0, t1, want.data());
      for (SimdLevel l : available_simd_levels()) {
        ScopedSimdLevel g(l);
        SCOPED_TRACE(shape(l, d, bits, n, seed));
        std::vector<float> got(t1 - t0 + 1);
        fast.scores(q.data(), codes.data(), n, t0, t1, got.data() + 1);  // unaligned output
        // tolerance relative to the scale of the score, ||q|| * ||k_hat_t|| (Cauchy-Schwarz)
        double qn = 0;
        for (float v : q) qn += double(v) * v;
        for (std::size_t i = 0; i < want.size(); ++i) {
          const double kn = load_half(codes.data() + n * fast.code_bytes() + 2 * (t0 + i));
          ASSERT_NEAR(got[i + 1], want[i], kScoreTol * std::sqrt(qn) * kn) << "token " << t0 + i;
        }
      }
    }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CpuTqMse, ::testing::Values(64, 80, 96, 112, 128, 256));

TEST(CpuTqMseErrors, NamesArgumentAndValue) {
  auto msg = [](auto f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  EXPECT_NE(msg([] { cpu::TqMse c(tq_config(72, 4, 1)); }).find("head_dim = 72"), std::string::npos);
  EXPECT_NE(msg([] { auto cfg = tq_config(128, 4, 1); cfg.bits = 2.5; cpu::TqMse c(cfg); }).find("bits = 2.5"),
            std::string::npos);
  EXPECT_NE(msg([] { auto cfg = tq_config(128, 4, 1); cfg.method = Method::kKivi; cpu::TqMse c(cfg); }).find("kivi"),
            std::string::npos);
  cpu::TqMse c(tq_config(64, 3, 1));
  std::vector<float> x(64 * 3, 1.0f);
  x[64 + 5] = NAN;
  std::vector<std::uint8_t> out(c.encoded_bytes(3));
  EXPECT_NE(msg([&] { c.encode(x.data(), 3, out.data()); }).find("x[69]"), std::string::npos);
  for (float bad : {INFINITY, -INFINITY}) {  // the vectorized finiteness check: every lane position
    for (int at : {0, 69, 131, 191}) {
      std::vector<float> y(64 * 3, 1.0f);
      y[at] = bad;
      EXPECT_NE(msg([&] { c.encode(y.data(), 3, out.data()); }).find("x[" + std::to_string(at) + "]"),
                std::string::npos);
    }
  }
  x[69] = 1e30f;
  EXPECT_NE(msg([&] { c.encode(x.data(), 3, out.data()); }).find("||x[t]||"), std::string::npos);
  std::vector<float> s(4);
  EXPECT_NE(msg([&] { c.scores(x.data(), out.data(), 3, 2, 4, s.data()); }).find("t1 = 4"), std::string::npos);
}
