// turbokv — division by a runtime-invariant divisor as multiply-high, add and shift.
//
// GPU kernels that map a flat index to (batch, token, head) divide by values
// known only at launch; an integer division costs ~20 instructions on NVIDIA
// GPUs, this costs three. Usable on host and device (the host computes the
// constants once per launch).
// Source: T. Granlund, P. Montgomery, "Division by invariant integers using
// multiplication", PLDI 1994, Figure 4.1 (N = 32, l = ceil(log2 d),
// m = floor(2^N (2^l - d) / d) + 1); with dividends below 2^31 the sum t1 + n
// cannot overflow 32 bits, so q = (t1 + n) >> l without the figure's halving.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#if defined(__CUDACC__)
#define TURBOKV_FD_HD __host__ __device__ __forceinline__
#else
#define TURBOKV_FD_HD inline
#endif

namespace turbokv {

/// Exact n / d and n % d for 0 <= n < 2^31 and a fixed divisor 1 <= d < 2^31.
struct FastDiv {
  std::uint32_t d = 1;  ///< the divisor
  std::uint32_t m = 1;  ///< multiplier floor(2^32 (2^l - d) / d) + 1
  std::uint32_t l = 0;  ///< ceil(log2 d)

  FastDiv() = default;
  /// Throws std::invalid_argument unless 1 <= divisor < 2^31.
  explicit FastDiv(long long divisor) {
    if (divisor < 1 || divisor >= (1LL << 31))
      throw std::invalid_argument("FastDiv: divisor = " + std::to_string(divisor) + ": must be in [1, 2^31)");
    d = static_cast<std::uint32_t>(divisor);
    while ((1ULL << l) < d) ++l;
    m = static_cast<std::uint32_t>(((1ULL << 32) * ((1ULL << l) - d)) / d + 1);
  }
  /// n / d (rounded down); n must be in [0, 2^31).
  TURBOKV_FD_HD std::uint32_t div(std::uint32_t n) const {
    const std::uint32_t t1 = static_cast<std::uint32_t>((static_cast<std::uint64_t>(n) * m) >> 32);
    return (t1 + n) >> l;
  }
  /// n % d; n must be in [0, 2^31).
  TURBOKV_FD_HD std::uint32_t mod(std::uint32_t n) const { return n - div(n) * d; }
};

}  // namespace turbokv
