// Tensor-core decode-attention instances for 4-bit TurboQuant-MSE keys (value widths 1..4, head_dim 64/128/256).
#include "decode_mma.cuh"

namespace turbokv::cuda::detail {
void launch_mma_k4(int d, int vb, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  launch_mma_kb<4>(d, vb, shape, s, a);
}
}  // namespace turbokv::cuda::detail
