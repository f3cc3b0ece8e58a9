// fp16 passthrough kernels for avx2: kivi_fp_simd.h stamped out with this file's ISA flags.
#define TURBOKV_LB_AVX2 1
#include "kivi_fp_simd.h"

namespace turbokv::cpu::detail {

const LowbitKernels& fp16_avx2_kernels() {
  static const LowbitKernels k{&Fp16::encode, &Fp16::decode, &Fp16::scores, &Fp16::accumulate, &Fp16::decode_domain};
  return k;
}

}  // namespace turbokv::cpu::detail
