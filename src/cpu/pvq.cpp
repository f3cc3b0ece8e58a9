// CPU fast path for pvq: not written yet; make_cpu_codec wraps the reference.
#include "methods.h"

namespace turbokv::cpu::detail {

std::unique_ptr<CpuCodec> make_cpu_pvq(const Codec&) { return nullptr; }

}  // namespace turbokv::cpu::detail
