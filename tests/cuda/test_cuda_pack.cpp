// GPU bit pack / unpack vs the reference pack_bits / unpack_bits: bytes identical.
#include <cstdio>

#include "cuda_test_util.h"
#include "turbokv/half.h"
#include "turbokv/pack.h"

namespace turbokv::test {
namespace {

TEST(CudaPack, MatchesReferenceAllWidths) {
  const std::uint64_t seed = fresh_seed();
  for (int bits = 1; bits <= 8; ++bits)
    for (std::size_t n : {1, 3, 7, 8, 16, 17, 100, 1000, 4097, 100003}) {
      SCOPED_TRACE("bits=" + std::to_string(bits) + " n=" + std::to_string(n) + " seed=" + std::to_string(seed));
      Rng r(seed + bits * 1000003ull + n);
      std::vector<std::uint8_t> codes(n);
      for (auto& c : codes) c = static_cast<std::uint8_t>(r.next() & ((1u << bits) - 1u));
      if (n > 2) codes[0] = 0, codes[n - 1] = static_cast<std::uint8_t>((1u << bits) - 1u);  // edge codes
      std::vector<std::uint8_t> ref(packed_bytes(n, bits));
      pack_bits(codes.data(), n, bits, ref.data());

      DevBuf<std::uint8_t> dc(codes), dp(ref.size()), du(n);
      dp.fill_byte(0xA5);
      cuda::pack_bits(dc.p, n, bits, dp.p, nullptr);
      EXPECT_EQ(dp.download(), ref);

      DevBuf<std::uint8_t> dref(ref);
      du.fill_byte(0xA5);
      cuda::unpack_bits(dref.p, n, bits, du.p, nullptr);
      EXPECT_EQ(du.download(), codes);
    }
}

// The device float_to_half (a hardware cvt plus a NaN select) against the host reference: every
// sign / exponent / top-10-mantissa pattern with 24 choices of the 13 dropped bits (the rounding
// cases: 0, 1, half - 1, half, half + 1, all ones, ...), every subnormal-result input's low bits by
// random choice, and random bit patterns. Any rounding, overflow, subnormal or NaN difference fails.
TEST(HalfConversion, DeviceMatchesReferenceBits) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  Rng r(seed);
  std::vector<std::uint32_t> bits;
  const std::uint32_t lows[] = {0x0000, 0x0001, 0x0002, 0x0fff, 0x1000, 0x1001, 0x0800, 0x07ff, 0x0801,
                                0x17ff, 0x1800, 0x1801, 0x1fff, 0x1ffe, 0x0400, 0x0c00, 0x1400, 0x1c00,
                                0x0aaa, 0x1555, 0x0003, 0x1003, 0x0ffe, 0x1002};
  for (std::uint32_t hi = 0; hi < (1u << 19); ++hi)
    for (std::uint32_t lo : lows) bits.push_back((hi << 13) | lo);
  for (int i = 0; i < (1 << 22); ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(r.next());
    bits.push_back(u);
    bits.push_back((u & 0x80000000u) | (0x33000000u + (u & 0x05ffffffu)));  // |x| in [2^-25, 2^-14): subnormal fp16
  }
  std::vector<float> x(bits.size());
  std::memcpy(x.data(), bits.data(), 4 * bits.size());
  DevBuf<float> dx(x);
  DevBuf<std::uint16_t> dh(x.size());
  dh.fill_byte(0xA5);
  cuda::fp32_to_fp16(dx.p, x.size(), dh.p, nullptr);
  const std::vector<std::uint16_t> got = dh.download();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::uint16_t want = float_to_half(x[i]);
    if (got[i] != want && ++bad <= 5)
      ADD_FAILURE() << "input bits 0x" << std::hex << bits[i] << ": device 0x" << got[i] << ", reference 0x" << want;
  }
  EXPECT_EQ(bad, 0u) << "of " << x.size() << " inputs";
  EXPECT_THROW(cuda::fp32_to_fp16(nullptr, 4, nullptr, nullptr), std::invalid_argument);
}

TEST(CudaPack, RejectsBadWidth) {
  EXPECT_THROW(cuda::pack_bits(nullptr, 4, 0, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::unpack_bits(nullptr, 4, 9, nullptr, nullptr), std::invalid_argument);
}

// The input of tq_mse_decode's head_dim-128 pair rule (cuda.h): a Hopper part has 10-25 DRAM bytes per SM
// cycle (H100 SXM ~12.8, H200 ~18.8); a kHz / MHz or bits / bytes slip would land far outside 2..64.
TEST(CudaDevice, DramBytesPerSmCycleIsPlausible) {
  const double r = cuda::dram_bytes_per_sm_cycle();
  EXPECT_GT(r, 2.0);
  EXPECT_LT(r, 64.0);
  EXPECT_EQ(r, cuda::dram_bytes_per_sm_cycle());  // cached: the same value every call
  std::printf("DRAM bytes per SM cycle: %.2f (pairs at head_dim 128 by default: %s)\n", r,
              r >= cuda::kPairMinDramBytesPerSmCycle ? "yes" : "no");
}

}  // namespace
}  // namespace turbokv::test

int main(int argc, char** argv) { return turbokv::test::cuda_test_main(argc, argv, "test_cuda_pack"); }
