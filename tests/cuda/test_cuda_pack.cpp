// GPU bit pack / unpack vs the reference pack_bits / unpack_bits: bytes identical.
#include "cuda_test_util.h"
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

TEST(CudaPack, RejectsBadWidth) {
  EXPECT_THROW(cuda::pack_bits(nullptr, 4, 0, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::unpack_bits(nullptr, 4, 9, nullptr, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace turbokv::test

int main(int argc, char** argv) { return turbokv::test::cuda_test_main(argc, argv, "test_cuda_pack"); }
