// Fractional TurboQuant-MSE scores / value accumulation (kivi_fp_simd.h) and
// codec-domain decode (tq_mse_split_simd.h) for avx2, stamped out with this
// file's ISA flags.
#define TURBOKV_LB_AVX2 1
#include "kivi_fp_simd.h"
#include "tq_mse_split_simd.h"

namespace turbokv::cpu::detail {

const SplitKernels& tq_split_avx2_kernels() {
  static const SplitKernels k{&split_scores, &split_accumulate};
  return k;
}

void tq_split_decode_domain_avx2(const SplitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0,
                                 std::size_t t1, float* y) {
  split_decode_domain(p, block, n, t0, t1, y);
}

}  // namespace turbokv::cpu::detail
