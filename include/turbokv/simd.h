// turbokv — runtime SIMD dispatch for the CPU fast path (src/cpu).
//
// One level for the whole process, detected once by cpuid:
//   kAvx512: AVX-512 F, BW, VL, DQ, VBMI, VPOPCNTDQ, BITALG and VNNI (Ice Lake,
//            Zen 4 and later; plus AVX2, FMA, F16C, BMI2)
//   kAvx2:   AVX2, FMA, F16C and BMI2
//   kScalar: baseline x86-64; runs plain C++ versions of the same algorithms
// The environment variable TURBOKV_SIMD=scalar|avx2|avx512 overrides the
// detected level (read on first use; a level the CPU lacks is clamped to the
// best one it has). ISA code lives only in per-ISA source files
// (src/cpu/kernels_avx2.cpp, src/cpu/kernels_avx512.cpp, src/cpu/<method>_<isa>.cpp;
// src/cpu/tq_mse_bf16_avx512.cpp adds AVX512-BF16, used only where cpu_has_avx512_bf16())
// compiled with their
// own flags; everything else is built for baseline x86-64.
#pragma once

#include <vector>

namespace turbokv {

enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

/// "scalar", "avx2" or "avx512".
const char* simd_level_name(SimdLevel level);
/// Inverse of simd_level_name; throws std::invalid_argument naming the value.
SimdLevel parse_simd_level(const char* name);

/// The best level this CPU supports (cpuid, detected once).
SimdLevel detected_simd_level();
/// Every level this CPU can run, ascending (always starts with kScalar).
std::vector<SimdLevel> available_simd_levels();

/**
 * Whether this CPU has AVX512-BF16 (cpuid leaf 7, subleaf 1, EAX bit 5:
 * `vdpbf16ps`, `vcvtneps2bf16`) on top of detected_simd_level() == kAvx512
 * (which also checks that the OS saves the AVX-512 state). Detected once;
 * TURBOKV_SIMD and set_simd_level() do not change it. Used by
 * AttentionPrecision::kBf16 (turbokv/attention.h), which runs its bf16 kernel
 * only when this is true and simd_level() is kAvx512. Never throws. Source:
 * src/cpu/simd.cpp (cpuid via <cpuid.h>, baseline x86-64 code).
 */
bool cpu_has_avx512_bf16();

/**
 * Whether this process can run Intel AMX int8 tile instructions: turbokv built
 * with them (a compiler that takes -mamx-tile -mamx-int8, GCC >= 11; CMake
 * checks), cpuid leaf 7 EDX bits 24 (AMX-TILE) and 25 (AMX-INT8), the OS enabling the tile state
 * (XCR0 bits 17-18), detected_simd_level() == kAvx512, and Linux granting the
 * tile data to this process (`arch_prctl(ARCH_REQ_XCOMP_PERM, 18)`, asked on
 * the first call). Detected once; TURBOKV_SIMD does not change it. Used by
 * AttentionPrecision::kInt8 (turbokv/attention.h), whose sums become AMX tile
 * dot products where int8_uses_amx() says so. Never throws. Source: src/cpu/simd.cpp
 * (cpuid via <cpuid.h>, xgetbv, the arch_prctl syscall; baseline x86-64 code).
 */
bool cpu_has_amx_int8();

/**
 * Whether AttentionPrecision::kInt8 sums with AMX tiles (instead of `vpdpbusd`)
 * for a job of `group` query heads at head_dim `dim`. A job is one GQA group's
 * query heads, or 16 of them at a time when a group has more (then the rest
 * is a job of its own). False without cpu_has_amx_int8(); else the
 * environment variable TURBOKV_AMX decides when it is "0" (never) or "1"
 * (always); otherwise (unset or any other value) group >= 5 and dim <= 128,
 * where AMX measured faster
 * (docs/RESULTS.md "Session 35"). The attention calls ask this once per call
 * on the calling thread (TURBOKV_AMX is read then). The results are
 * bit-identical either way. Never throws. Source: src/cpu/simd.cpp.
 */
bool int8_uses_amx(int group, int dim);

/// The level the fast path uses now: TURBOKV_SIMD if set, else detected_simd_level().
SimdLevel simd_level();
/// Sets the level for the whole process. Throws std::invalid_argument if the
/// CPU does not support it. Not meant to race with running kernels.
void set_simd_level(SimdLevel level);

/// Sets a level for a scope (tests), restoring the previous one on exit.
class ScopedSimdLevel {
 public:
  explicit ScopedSimdLevel(SimdLevel level) : prev_(simd_level()) { set_simd_level(level); }
  ~ScopedSimdLevel() { set_simd_level(prev_); }
  ScopedSimdLevel(const ScopedSimdLevel&) = delete;
  ScopedSimdLevel& operator=(const ScopedSimdLevel&) = delete;

 private:
  SimdLevel prev_;
};

}  // namespace turbokv
