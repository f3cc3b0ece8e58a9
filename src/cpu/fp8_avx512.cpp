// fp8 e4m3 (per-token scale) kernels for avx512: kivi_fp_simd.h stamped out with this file's ISA flags.
#define TURBOKV_LB_AVX512 1
#include "kivi_fp_simd.h"

namespace turbokv::cpu::detail {

const LowbitKernels& fp8_avx512_kernels() {
  static const LowbitKernels k{&Fp8::encode, &Fp8::decode, &Fp8::scores, &Fp8::accumulate, &Fp8::decode_domain};
  return k;
}

}  // namespace turbokv::cpu::detail
