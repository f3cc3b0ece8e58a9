// fp16 tensor-core decode-attention instances with two sequences per block (H16Layout::PAIR) at head_dim
// 128: the head_dim-256 step over both sequences' rows, TurboQuant-MSE keys and values at 2..4 bits each,
// page_size 16 (tq_mse_decode chooses them). Warps per block by launch_h16 as the head_dim-256 kernel's: 12
// with shape.wide (DecodeArgs::block_warps; by default where the pairs' blocks read many tokens), else 8.
#include "decode_h16.cuh"

namespace turbokv::cuda::detail {
namespace {
template <int KB>
void launch_pair128_kb(int vb, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  switch (vb) {
    case 2: return launch_h16<256, KB, 2, false, kModePair>(shape, s, a);
    case 3: return launch_h16<256, KB, 3, false, kModePair>(shape, s, a);
    case 4: return launch_h16<256, KB, 4, false, kModePair>(shape, s, a);
  }
  throw std::logic_error("launch_h16_pair128: value bits out of range");
}
}  // namespace

void launch_h16_pair128(int kb, int vb, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  switch (kb) {
    case 2: return launch_pair128_kb<2>(vb, shape, s, a);
    case 3: return launch_pair128_kb<3>(vb, shape, s, a);
    case 4: return launch_pair128_kb<4>(vb, shape, s, a);
  }
  throw std::logic_error("launch_h16_pair128: key bits out of range");
}
}  // namespace turbokv::cuda::detail
