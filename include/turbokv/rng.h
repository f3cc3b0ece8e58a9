// turbokv — the seeded random source behind every rotation, sketch and codebook.
//
// Defined bit for bit here (no std:: distributions, whose output differs
// between standard libraries), so a seed gives the same rotation, sketch and
// therefore the same packed bytes on every platform and backend.
#pragma once

#include <cmath>
#include <cstdint>

namespace turbokv {

/// SplitMix64 (Steele, Lea, Flood 2014) seeding xoshiro256** (Blackman, Vigna 2018).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    for (auto& s : s_) s = splitmix(seed);
  }
  /// Next 64 uniformly random bits.
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  /// Uniform double in (0, 1): 53 random bits, never 0.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  /// Standard normal by Box-Muller (uses two uniforms per call; simple and reproducible).
  double normal() {
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  /// +1 or -1 with equal probability.
  float sign() { return (next() >> 63) ? -1.0f : 1.0f; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::uint64_t s_[4];
};

}  // namespace turbokv
