// CUDA-core decode-attention instances for TurboQuant-Prod keys with a 0- or 1-bit MSE part
// (decode.cuh SketchKeyFmt; value widths 1..4, HPW 1..4): tq_prod_paged_decode's kernel 1 and its
// head_dims without a tensor-core instance.
#include "decode.cuh"

namespace turbokv::cuda::detail {
void launch_prod_decode_k01(int kmb, int vb, int hpw, const LaunchShape& shape, std::size_t smem, cudaStream_t s,
                            const DecodeKernelArgs& a) {
  if (kmb == 0) return launch_sketch_decode_kb<0, true>(vb, hpw, shape, smem, s, a);
  launch_sketch_decode_kb<1, true>(vb, hpw, shape, smem, s, a);
}
}  // namespace turbokv::cuda::detail
