// CPU fast path for qjl: not written yet; make_cpu_codec wraps the reference.
#include "methods.h"

namespace turbokv::cpu::detail {

std::unique_ptr<CpuCodec> make_cpu_qjl(const Codec&) { return nullptr; }

}  // namespace turbokv::cpu::detail
