// QJL kernels for AVX-512 (F, BW, VL, DQ; F16C): the templates of qjl_simd.h stamped out with
// this file's ISA flags (CMakeLists.txt); called only when simd_level() is kAvx512.
#include "qjl_simd.h"

namespace turbokv::cpu::detail {

const QjlKernels& qjl_avx512_kernels() { return QjlSimd<QjlAvx512>::table(); }

}  // namespace turbokv::cpu::detail
