// fp16 / bf16 / e4m3 conversions against the compiler's _Float16 and exhaustive round trips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "turbokv/half.h"
#include "turbokv/rng.h"

using namespace turbokv;

TEST(Half, EveryHalfRoundTrips) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = half_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_half(f), h) << h;
    EXPECT_EQ(f, static_cast<float>(static_cast<_Float16>(f))) << h;
  }
}

TEST(Half, RoundingMatchesCompiler) {
  Rng r(5);
  for (int i = 0; i < 2000000; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(r.next());
    const float f = bits_f32(u);
    if (std::isnan(f)) continue;
    const _Float16 ref = static_cast<_Float16>(f);
    std::uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    ASSERT_EQ(float_to_half(f), rb) << "f=" << f << " bits=" << u;
  }
}

TEST(Half, Bf16) {
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(float_to_bf16(bits_f32(0x3f808000u)), 0x3f80);  // tie to even (down)
  EXPECT_EQ(float_to_bf16(bits_f32(0x3f818000u)), 0x3f82);  // tie to even (up)
}

TEST(Half, E4m3) {
  for (int c = 0; c < 256; ++c) {
    const float f = e4m3_to_float(static_cast<std::uint8_t>(c));
    if (std::isnan(f)) continue;
    if (f == 0 && c == 0x80) continue;  // -0 encodes as 0x80
    EXPECT_EQ(float_to_e4m3(f), c) << c;
  }
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(float_to_e4m3(1000.0f), 0x7e);  // saturates
  EXPECT_EQ(e4m3_to_float(float_to_e4m3(-3.3f)), -3.25f);
  // Nearest representable: every value between two codes rounds to the closer.
  Rng r(9);
  for (int i = 0; i < 100000; ++i) {
    const float x = static_cast<float>((r.uniform() * 2 - 1) * 500);
    const float y = e4m3_to_float(float_to_e4m3(x));
    float best = 1e30f;
    for (int c = 0; c < 256; ++c) {
      const float v = e4m3_to_float(static_cast<std::uint8_t>(c));
      if (!std::isnan(v)) best = std::min(best, std::fabs(v - std::clamp(x, -448.0f, 448.0f)));
    }
    ASSERT_EQ(std::fabs(y - std::clamp(x, -448.0f, 448.0f)), best) << x;
  }
}
