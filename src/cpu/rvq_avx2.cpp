// rvq kernels for AVX2 (AVX2, FMA, F16C, BMI2): the templates of rvq_simd.h stamped out with
// this file's ISA flags (CMakeLists.txt); called only when simd_level() allows it.
#include "rvq_simd.h"

namespace turbokv::cpu::detail::vq {

const RvqKernels& rvq_avx2_kernels(int bits) {
  static const RvqKernels k[4] = {rvq_table<VAvx2>(1), rvq_table<VAvx2>(2), rvq_table<VAvx2>(3), rvq_table<VAvx2>(4)};
  return k[bits - 1];
}

}  // namespace turbokv::cpu::detail::vq
