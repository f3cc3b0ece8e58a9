// rvq kernels for AVX-512 (F, BW, VL, DQ + BMI2): the templates of rvq_simd.h stamped out with
// this file's ISA flags (CMakeLists.txt); called only when simd_level() allows it.
#include "rvq_simd.h"

namespace turbokv::cpu::detail::vq {

const RvqKernels& rvq_avx512_kernels(int bits) {
  static const RvqKernels k[4] = {rvq_table<VAvx512>(1), rvq_table<VAvx512>(2), rvq_table<VAvx512>(3), rvq_table<VAvx512>(4)};
  return k[bits - 1];
}

}  // namespace turbokv::cpu::detail::vq
