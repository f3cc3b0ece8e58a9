// fp16 tensor-core decode-attention instances for fractional TurboQuant-MSE widths 1.5 / 2.5 / 3.5
// (the outlier split, keys and values alike; head_dim 128 / 256): decode_h16_kernel's SPLIT instances.
#include "decode_h16.cuh"

namespace turbokv::cuda::detail {
/// b: the low part's bits (1..3; the outlier part has b + 1).
void launch_h16s(int d, int b, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  auto by_d = [&](auto bc) {
    constexpr int B = decltype(bc)::value;
    switch (d) {
      case 128: return launch_h16_nw<128, B + 1, B, 16, false, true>(shape, s, a);
      case 256:  // 12 warps with shape.wide (DecodeArgs::block_warps), as launch_h16
        if (shape.wide) return launch_h16_nw<256, B + 1, B, 12, false, true>(shape, s, a);
        return launch_h16_nw<256, B + 1, B, 8, false, true>(shape, s, a);
    }
    throw std::logic_error("launch_h16s: head_dim out of range");
  };
  switch (b) {
    case 1: return by_d(std::integral_constant<int, 1>{});
    case 2: return by_d(std::integral_constant<int, 2>{});
    case 3: return by_d(std::integral_constant<int, 3>{});
  }
  throw std::logic_error("launch_h16s: bits out of range");
}
}  // namespace turbokv::cuda::detail
