// The per-method CPU fast paths behind make_cpu_codec (internal). Each returns
// nullptr when it has no SIMD path for ref's configuration at the current
// simd_level(); make_cpu_codec then wraps the reference codec.
// One file per method: src/cpu/<method>.cpp (baseline x86-64 orchestration) and
// its ISA kernels in src/cpu/<method>_avx2.cpp / <method>_avx512.cpp.
#pragma once

#include <memory>

#include "turbokv/cpu_codec.h"

namespace turbokv::cpu::detail {

std::unique_ptr<CpuCodec> make_cpu_tq_mse(const Codec& ref);
/// Fractional TurboQuant-MSE widths (b + 0.5, outlier split); nullptr where not covered (src/cpu/tq_mse_split.cpp).
std::unique_ptr<CpuCodec> make_cpu_tq_mse_split(const Codec& ref);
std::unique_ptr<CpuCodec> make_cpu_tq_prod(const Codec& ref);
std::unique_ptr<CpuCodec> make_cpu_qjl(const Codec& ref);
std::unique_ptr<CpuCodec> make_cpu_rvq(const Codec& ref);
std::unique_ptr<CpuCodec> make_cpu_pvq(const Codec& ref);
std::unique_ptr<CpuCodec> make_cpu_polar(const Codec& ref);
std::unique_ptr<CpuCodec> make_cpu_kivi(const Codec& ref);
std::unique_ptr<CpuCodec> make_cpu_fp8(const Codec& ref);
std::unique_ptr<CpuCodec> make_cpu_fp16(const Codec& ref);

/// The TqMse behind a make_cpu_tq_mse codec, else nullptr (attention_codec then
/// takes the fused TurboQuant-MSE kernels).
const TqMse* as_tq_mse(const CpuCodec* c);

struct ProdKeyState;  // kernels.h
/// The fused-kernel view of a make_cpu_tq_prod codec (sketch rows m <= 512), else nullptr
/// (attention_codec then takes the fused TurboQuant-Prod kernel when values are TurboQuant-MSE).
const ProdKeyState* as_tq_prod(const CpuCodec* c);

struct SplitHeadState;  // kernels.h
/// The fused-kernel view of a make_cpu_tq_mse_split codec (fractional TurboQuant-MSE), else nullptr
/// (attention_codec then takes the fused split kernel when every other head is TurboQuant-MSE).
const SplitHeadState* as_tq_split(const CpuCodec* c);

struct RvqHeadState;  // kernels.h
/// The fused-kernel view of a make_cpu_rvq codec (head_dim <= 512), else nullptr (attention_codec
/// then takes the fused RVQ kernel when every key and value head is such a codec).
const RvqHeadState* as_rvq(const CpuCodec* c);

struct KiviHeadState;  // kernels.h
/// The fused-kernel view of a make_cpu_kivi codec (1..4 bits, head_dim a multiple of 16 up to 512; keys:
/// group >= 8; values: group a multiple of 8, head_dim / group <= 8), else nullptr (attention_codec then takes the fused KIVI
/// kernel when every key and value head is such a codec).
const KiviHeadState* as_kivi(const CpuCodec* c);

/// 8 for a make_cpu_fp8 codec, 16 for a make_cpu_fp16 codec (head_dim a multiple of 16), else 0
/// (attention_codec then takes the fused fp8 / fp16 kernel when every key and value head is one).
int as_float_codec(const CpuCodec* c);

/// Wraps the reference codec (fp64 inside, fp32 at the interface): the scalar level.
std::unique_ptr<CpuCodec> make_cpu_reference(const Codec& ref);

}  // namespace turbokv::cpu::detail
