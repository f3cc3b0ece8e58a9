// TurboQuant-Prod kernels for AVX2 (FMA, F16C, BMI2): the templates of tq_prod_simd.h stamped
// out with this file's ISA flags (CMakeLists.txt); called only when simd_level() is kAvx2.
#include "tq_prod_simd.h"

namespace turbokv::cpu::detail {

const ProdKernels& tq_prod_avx2_kernels() { return ProdSimd<ProdAvx2>::table(); }

}  // namespace turbokv::cpu::detail
