// Shared internals of src/cpu (baseline files only; not public API).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels.h"
#include "thread_pool.h"
#include "turbokv/codec.h"

namespace turbokv::cpu::detail {

/// Throws like turbokv::check_finite if x[0..n) holds Inf/NaN (fast scan first).
void check_finite_f32(const char* where, const char* arg, const float* x, std::size_t n);
/// True if x[0..n) are all finite (one SSE2 pass); with max_abs, also sets *max_abs = max |x[i]| (valid
/// when true). Defined in tq_mse.cpp.
bool all_finite_f32(const float* x, std::size_t n, float* max_abs = nullptr);
/// ref.validate(x, n) semantics, fast (CpuCodec::validate's default): one SSE2 scan for Inf / NaN and
/// max |x|; the reference's own checks run only when that scan cannot rule out an error (so the thrown
/// messages are the reference's), and always for centered codecs, a missing calibration and methods
/// it does not know. Defined in codec.cpp.
void validate_fast(const Codec& ref, const float* x, std::size_t n);
/// Same for fp16 (bf16 = false) or bf16 bits.
void check_finite_16(const char* where, const char* arg, const std::uint16_t* x, std::size_t n, bool bf16);
/// qp[dim] = Pi q (rotated in fp64, then fp32), natural order (every kernel scores from it).
void prepare_query(const TqState& st, const float* q, int lanes, float* qp);
/// out[dim] = Pi^T acc * inv_l (acc in the layout of `lanes`; rotated back in fp64).
void finalize_output(const TqState& st, const float* acc, int lanes, double inv_l, float* out);
/// Fractional TurboQuant-MSE values: out[head_dim] = each part's Pi_p^T acc_p * inv_l scattered to the
/// part's channels (acc in the layout of `lanes`, SplitHeadState in kernels.h; rotated back in fp64).
void finalize_split_output(const SplitHeadState& s, const float* acc, int lanes, double inv_l, float* out);

}  // namespace turbokv::cpu::detail
