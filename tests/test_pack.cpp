// Bit packing: exact round trips for every width and awkward lengths, and the
// documented LSB-first byte layout.
#include <gtest/gtest.h>

#include "turbokv/pack.h"
#include "turbokv/rng.h"

using namespace turbokv;

TEST(Pack, RoundTripEveryWidthAndLength) {
  for (int bits = 1; bits <= 8; ++bits)
    for (std::size_t n : {1, 7, 8, 9, 63, 64, 65, 4097}) {
      Rng r(bits * 1000 + n);
      std::vector<std::uint8_t> codes(n), back(n, 0xee);
      for (auto& c : codes) c = static_cast<std::uint8_t>(r.next() & ((1u << bits) - 1));
      std::vector<std::uint8_t> packed(packed_bytes(n, bits) + 1, 0xab);
      pack_bits(codes.data(), n, bits, packed.data());
      EXPECT_EQ(packed.back(), 0xab) << "wrote past packed_bytes, bits=" << bits << " n=" << n;
      unpack_bits(packed.data(), n, bits, back.data());
      EXPECT_EQ(codes, back) << "bits=" << bits << " n=" << n;
      // Unused high bits of the last byte are zero.
      const std::size_t used = n * bits % 8;
      if (used) {
        EXPECT_EQ(packed[packed_bytes(n, bits) - 1] >> used, 0) << "bits=" << bits << " n=" << n;
      }
    }
}

TEST(Pack, ByteLayoutIsLsbFirst) {
  // Derived from the format definition: code i occupies stream bits [i*b, (i+1)*b).
  for (int bits = 1; bits <= 8; ++bits) {
    const std::size_t n = 24;
    Rng r(77 + bits);
    std::vector<std::uint8_t> codes(n);
    for (auto& c : codes) c = static_cast<std::uint8_t>(r.next() & ((1u << bits) - 1));
    std::vector<std::uint8_t> packed(packed_bytes(n, bits));
    pack_bits(codes.data(), n, bits, packed.data());
    for (std::size_t i = 0; i < n; ++i)
      for (int k = 0; k < bits; ++k) {
        const std::size_t bit = i * bits + k;
        EXPECT_EQ((packed[bit / 8] >> (bit % 8)) & 1, (codes[i] >> k) & 1) << "bits=" << bits << " i=" << i;
      }
  }
  // 3-bit: 8 codes in exactly 3 bytes; 4-bit: even code in the low nibble.
  EXPECT_EQ(packed_bytes(8, 3), 3u);
  const std::uint8_t two[2] = {0x3, 0xa};
  std::uint8_t b = 0;
  pack_bits(two, 2, 4, &b);
  EXPECT_EQ(b, 0xa3);
}

TEST(Pack, RejectsBadArguments) {
  std::uint8_t c = 4, out[2];
  EXPECT_THROW(pack_bits(&c, 1, 2, out), std::invalid_argument);  // 4 does not fit 2 bits
  EXPECT_THROW(pack_bits(&c, 1, 0, out), std::invalid_argument);
  EXPECT_THROW(unpack_bits(out, 1, 9, &c), std::invalid_argument);
}
