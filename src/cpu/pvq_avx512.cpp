// pvq kernels for AVX-512 (F, BW, VL, DQ + BMI2): the templates of pvq_simd.h stamped out with
// this file's ISA flags (CMakeLists.txt); called only when simd_level() allows it.
#include "pvq_simd.h"

namespace turbokv::cpu::detail::vq {

const PvqKernels& pvq_avx512_kernels(int bits) {
  static const PvqKernels k[4] = {pvq_table<VAvx512>(1), pvq_table<VAvx512>(2), pvq_table<VAvx512>(3), pvq_table<VAvx512>(4)};
  return k[bits - 1];
}

}  // namespace turbokv::cpu::detail::vq
