// QJL kernels for AVX2 (FMA, F16C, BMI2): the templates of qjl_simd.h stamped out with this
// file's ISA flags (CMakeLists.txt); called only when simd_level() is kAvx2.
#include "qjl_simd.h"

namespace turbokv::cpu::detail {

const QjlKernels& qjl_avx2_kernels() { return QjlSimd<QjlAvx2>::table(); }

}  // namespace turbokv::cpu::detail
