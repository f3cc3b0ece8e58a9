// Fractional TurboQuant-MSE scores / value accumulation for avx512: kivi_fp_simd.h
// stamped out with this file's ISA flags.
#define TURBOKV_LB_AVX512 1
#include "kivi_fp_simd.h"

namespace turbokv::cpu::detail {

const SplitKernels& tq_split_avx512_kernels() {
  static const SplitKernels k{&split_scores, &split_accumulate};
  return k;
}

}  // namespace turbokv::cpu::detail
