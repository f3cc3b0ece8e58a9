// Decode-attention instances for the contiguous fp16 baseline (HPW 1..4).
#include "decode.cuh"

namespace turbokv::cuda::detail {
void launch_f16_decode(int hpw, const LaunchShape& shape, std::size_t smem, cudaStream_t s,
                       const DecodeKernelArgs& a) {
  launch_decode<F16Fmt, F16Fmt>(hpw, shape, smem, s, a);
}
}  // namespace turbokv::cuda::detail
