// AVX-512 kernels (F, BW, VL, DQ, VBMI; FMA, F16C, BMI2). Compiled with its own
// flags (CMakeLists.txt); called only when simd_level() is kAvx512. The vector
// traits T are in kernels_avx512_traits.h.
#include "kernels_avx512_traits.h"
#define KNS avx512
#include "kernels_simd.h"
#undef KNS

namespace turbokv::cpu::detail {
const Kernels& avx512_kernels() { return avx512::table(); }
}  // namespace turbokv::cpu::detail
