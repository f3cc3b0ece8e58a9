// TurboQuant-Prod kernels for AVX-512 (F, BW, VL, DQ, VBMI; F16C, BMI2): the templates of
// tq_prod_simd.h stamped out with this file's ISA flags (CMakeLists.txt); called only when
// simd_level() is kAvx512.
#include "tq_prod_simd.h"

namespace turbokv::cpu::detail {

const ProdKernels& tq_prod_avx512_kernels() { return ProdSimd<ProdAvx512>::table(); }

}  // namespace turbokv::cpu::detail
