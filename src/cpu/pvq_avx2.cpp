// pvq kernels for AVX2 (AVX2, FMA, F16C, BMI2): the templates of pvq_simd.h stamped out with
// this file's ISA flags (CMakeLists.txt); called only when simd_level() allows it.
#include "pvq_simd.h"

namespace turbokv::cpu::detail::vq {

const PvqKernels& pvq_avx2_kernels(int bits) {
  static const PvqKernels k[4] = {pvq_table<VAvx2>(1), pvq_table<VAvx2>(2), pvq_table<VAvx2>(3), pvq_table<VAvx2>(4)};
  return k[bits - 1];
}

}  // namespace turbokv::cpu::detail::vq
