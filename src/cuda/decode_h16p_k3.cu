// fp16 tensor-core decode-attention instances for TurboQuant-Prod keys with a 3-bit MSE part
// (value widths 1..4, head_dim 64/80/96/112/128/256).
#include "decode_h16.cuh"

namespace turbokv::cuda::detail {
void launch_h16p_k3(int d, int vb, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  launch_h16_kb<3, true>(d, vb, shape, s, a);
}
}  // namespace turbokv::cuda::detail
