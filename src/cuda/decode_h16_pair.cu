// fp16 tensor-core decode-attention instances with two sequences per block (H16Layout::PAIR): head_dim
// 64 here (16 warps), 128 in decode_h16_pair128.cu; TurboQuant-MSE keys and values at 2..4 bits each,
// page_size 16 (tq_mse_decode chooses them).
#include "decode_h16.cuh"

namespace turbokv::cuda::detail {
namespace {
template <int KB>
void launch_pair_kb(int vb, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  switch (vb) {
    case 2: return launch_h16_nw<128, KB, 2, 16, false, false, kModePair>(shape, s, a);
    case 3: return launch_h16_nw<128, KB, 3, 16, false, false, kModePair>(shape, s, a);
    case 4: return launch_h16_nw<128, KB, 4, 16, false, false, kModePair>(shape, s, a);
  }
  throw std::logic_error("launch_h16_pair: value bits out of range");
}
}  // namespace

void launch_h16_pair(int kb, int d, int vb, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  if (d == 128) return launch_h16_pair128(kb, vb, shape, s, a);
  if (d != 64) throw std::logic_error("launch_h16_pair: head_dim must be 64 or 128");
  switch (kb) {
    case 2: return launch_pair_kb<2>(vb, shape, s, a);
    case 3: return launch_pair_kb<3>(vb, shape, s, a);
    case 4: return launch_pair_kb<4>(vb, shape, s, a);
  }
  throw std::logic_error("launch_h16_pair: key bits out of range");
}
}  // namespace turbokv::cuda::detail
