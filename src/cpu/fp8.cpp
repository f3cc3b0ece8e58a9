// CPU fast path for fp8: not written yet; make_cpu_codec wraps the reference.
#include "methods.h"

namespace turbokv::cpu::detail {

std::unique_ptr<CpuCodec> make_cpu_fp8(const Codec&) { return nullptr; }

}  // namespace turbokv::cpu::detail
