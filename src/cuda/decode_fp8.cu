// Decode-attention instances for paged fp8 e4m3 keys and values (HPW 1..4): the CUDA-core kernel.
#include "decode.cuh"

namespace turbokv::cuda::detail {
void launch_fp8_decode(int hpw, const LaunchShape& shape, std::size_t smem, cudaStream_t s,
                       const DecodeKernelArgs& a) {
  launch_decode<F8Fmt, F8Fmt>(hpw, shape, smem, s, a);
}
}  // namespace turbokv::cuda::detail
