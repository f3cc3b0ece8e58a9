// CPU fast path for fp8 e4m3 with a per-token scale (reference src/ref/fp8.cpp:
// scale16 = max|x| / 448 rounded up to fp16, code_j = e4m3(x_j / scale16) round
// to nearest even, x_hat = e4m3(code) * scale16). Baseline x86-64: dispatch to
// the per-ISA kernels fp8_avx2.cpp / fp8_avx512.cpp (kivi_fp_simd.h: e4m3 is
// widened in registers through fp16 bits, no table). Encoded bytes and decoded
// floats are the reference's exactly; scores / accumulate accumulate in fp32.
#include "kivi_fp.h"
#include "methods.h"
#include "turbokv/simd.h"

namespace turbokv::cpu::detail {

std::unique_ptr<CpuCodec> make_cpu_fp8(const Codec& ref) {
  const CodecConfig& c = ref.config();
  if (c.method != Method::kFp8 || c.bits != 8 || c.head_dim % 8 != 0 || c.head_dim > kLowbitMaxDim) return nullptr;
  LowbitParams p;
  p.method = Method::kFp8;
  p.d = c.head_dim;
  p.bits = 8;
  p.row_bytes = static_cast<std::size_t>(c.head_dim);
  switch (simd_level()) {
    case SimdLevel::kAvx512: return make_lowbit_codec(ref, p, fp8_avx512_kernels(), 1, "avx512");
    case SimdLevel::kAvx2: return make_lowbit_codec(ref, p, fp8_avx2_kernels(), 1, "avx2");
    default: return nullptr;
  }
}

}  // namespace turbokv::cpu::detail
