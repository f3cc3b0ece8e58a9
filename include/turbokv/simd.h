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
// (src/cpu/kernels_avx2.cpp, src/cpu/kernels_avx512.cpp, src/cpu/<method>_<isa>.cpp)
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
