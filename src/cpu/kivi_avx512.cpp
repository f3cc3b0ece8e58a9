// KIVI kernels (Liu et al., arXiv 2402.02750) for avx512: kivi_fp_simd.h stamped out with this file's ISA flags.
#define TURBOKV_LB_AVX512 1
#include "kivi_fp_simd.h"

namespace turbokv::cpu::detail {

const LowbitKernels& kivi_avx512_kernels(int bits) {
  static const LowbitKernels k[5] = {kivi_table<1>(), kivi_table<2>(), kivi_table<3>(), kivi_table<4>(),
                                     kivi_table<8>()};
  return k[bits == 8 ? 4 : bits - 1];
}

}  // namespace turbokv::cpu::detail
