// Decode-attention instances for 4-bit TurboQuant-MSE keys (all value widths, HPW 1..4).
#include "decode.cuh"

namespace turbokv::cuda::detail {
void launch_tq_decode_k4(int vb, int hpw, const LaunchShape& shape, std::size_t smem, cudaStream_t s,
                         const DecodeKernelArgs& a) {
  launch_tq_decode_kb<4>(vb, hpw, shape, smem, s, a);
}
}  // namespace turbokv::cuda::detail
