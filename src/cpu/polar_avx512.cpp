// polar kernels for AVX-512 (F, BW, VL, DQ + BMI2): the templates of polar_simd.h stamped out with
// this file's ISA flags (CMakeLists.txt); called only when simd_level() allows it.
#include "polar_simd.h"

namespace turbokv::cpu::detail::vq {

const PolarKernels& polar_avx512_kernels(int b1) {
  static const PolarKernels k[3] = {polar_table<VAvx512>(2), polar_table<VAvx512>(3), polar_table<VAvx512>(4)};
  return k[b1 - 2];
}

}  // namespace turbokv::cpu::detail::vq
