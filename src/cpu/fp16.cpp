// CPU fast path for fp16 passthrough (reference src/ref/fp16.cpp: each
// coordinate as IEEE binary16, round to nearest even). Baseline x86-64:
// dispatch to fp16_avx2.cpp / fp16_avx512.cpp (kivi_fp_simd.h; F16C
// conversions, which round exactly like float_to_half). Bytes and decoded
// floats are the reference's exactly; scores / accumulate accumulate in fp32.
#include "kivi_fp.h"
#include "methods.h"
#include "turbokv/simd.h"

namespace turbokv::cpu::detail {

std::unique_ptr<CpuCodec> make_cpu_fp16(const Codec& ref) {
  const CodecConfig& c = ref.config();
  if (c.method != Method::kFp16 || c.bits != 16 || c.head_dim % 8 != 0 || c.head_dim > kLowbitMaxDim) return nullptr;
  LowbitParams p;
  p.method = Method::kFp16;
  p.d = c.head_dim;
  p.bits = 16;
  p.row_bytes = 2 * static_cast<std::size_t>(c.head_dim);
  switch (simd_level()) {
    case SimdLevel::kAvx512: return make_lowbit_codec(ref, p, fp16_avx512_kernels(), 1, "avx512");
    case SimdLevel::kAvx2: return make_lowbit_codec(ref, p, fp16_avx2_kernels(), 1, "avx2");
    default: return nullptr;
  }
}

}  // namespace turbokv::cpu::detail
