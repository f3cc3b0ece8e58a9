// Decode-attention instances for paged fp8 e4m3 keys and values: the CUDA-core kernel (HPW 1..4,
// kernel 1 and the head_dims the tensor-core kernel lacks) and the fp16 tensor-core kernel
// (decode_h16.cuh with KB = VB = 8, kernel 0 at head_dim 64, 80, 96, 112, 128, 256; 16 warps per block,
// 8 at 256, as launch_h16: 8 warps at head_dim 128 measured 0.92x (b16 x 64k, 550.2 vs 599.6 us, H200
// run s18-1); 12 at 256 with DecodeArgs::block_warps 12 only (0.99-1.00x the 8-warp kernel at b16 / b64 x
// 32k / 128k, run s30-4, so not by default)).
#include <stdexcept>

#include "decode.cuh"
#include "decode_h16.cuh"

namespace turbokv::cuda::detail {
void launch_fp8_decode(int hpw, const LaunchShape& shape, std::size_t smem, cudaStream_t s,
                       const DecodeKernelArgs& a) {
  launch_decode<F8Fmt, F8Fmt>(hpw, shape, smem, s, a);
}

void launch_fp8_h16(int /*kb*/, int d, int /*vb*/, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  switch (d) {
    case 64: return launch_h16<64, 8, 8>(shape, s, a);
    case 128: return launch_h16<128, 8, 8>(shape, s, a);
    case 256: return launch_h16<256, 8, 8>(shape, s, a);
    case 80: return launch_h16<80, 8, 8>(shape, s, a);
    case 96: return launch_h16<96, 8, 8>(shape, s, a);
    case 112: return launch_h16<112, 8, 8>(shape, s, a);
  }
  throw std::logic_error("launch_fp8_h16: head_dim out of range");
}
}  // namespace turbokv::cuda::detail
