// FastDiv (include/turbokv/fastdiv.h) against the built-in division: every
// divisor up to 4096 and awkward large ones, dividends at the edges (0, d - 1,
// d, multiples +- 1, 2^31 - 1) and random ones.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "turbokv/fastdiv.h"

namespace {

void check(std::uint32_t d, std::mt19937_64& rng) {
  const turbokv::FastDiv f(d);
  std::vector<std::uint32_t> ns = {0u, 1u, d - 1u, d, d + 1u, 2u * d - 1u, 2u * d, 0x7FFFFFFFu, 0x7FFFFFFEu,
                                   0x40000000u, 0x3FFFFFFFu};
  for (std::uint32_t k : {3u, 1000u, 65537u, 0x7FFFFFFFu / d}) {
    const std::uint64_t p = static_cast<std::uint64_t>(k) * d;
    for (std::uint64_t n : {p - 1, p, p + 1})
      if (n < 0x80000000ULL) ns.push_back(static_cast<std::uint32_t>(n));
  }
  for (int i = 0; i < 64; ++i) ns.push_back(static_cast<std::uint32_t>(rng() & 0x7FFFFFFFu));
  for (std::uint32_t n : ns) {
    if (n >= 0x80000000u) continue;
    ASSERT_EQ(f.div(n), n / d) << "n = " << n << ", d = " << d;
    ASSERT_EQ(f.mod(n), n % d) << "n = " << n << ", d = " << d;
  }
}

TEST(FastDiv, MatchesDivisionForSmallDivisors) {
  std::mt19937_64 rng(7);
  for (std::uint32_t d = 1; d <= 4096; ++d) check(d, rng);
}

TEST(FastDiv, MatchesDivisionForLargeAndAwkwardDivisors) {
  std::mt19937_64 rng(11);
  for (std::uint32_t d : {65535u, 65536u, 65537u, 1000003u, (1u << 30) - 1u, 1u << 30, (1u << 30) + 1u,
                          0x7FFFFFFEu, 0x7FFFFFFFu})
    check(d, rng);
  for (int i = 0; i < 2000; ++i) check(static_cast<std::uint32_t>(1 + rng() % 0x7FFFFFFEu), rng);
}

TEST(FastDiv, ExhaustiveDividendsForSomeDivisors) {
  for (std::uint32_t d : {3u, 7u, 24u, 641u}) {
    const turbokv::FastDiv f(d);
    for (std::uint32_t n = 0; n < (1u << 22); ++n) ASSERT_EQ(f.div(n), n / d) << "n = " << n << ", d = " << d;
  }
}

TEST(FastDiv, RejectsOutOfRangeDivisors) {
  EXPECT_THROW(turbokv::FastDiv(0), std::invalid_argument);
  EXPECT_THROW(turbokv::FastDiv(-5), std::invalid_argument);
  EXPECT_THROW(turbokv::FastDiv(1LL << 31), std::invalid_argument);
}

}  // namespace
