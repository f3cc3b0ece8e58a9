// Runtime SIMD level: cpuid once, TURBOKV_SIMD override, set_simd_level().
#include "turbokv/simd.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "turbokv/error.h"

namespace turbokv {

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar: return "scalar";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512";
  }
  return "?";
}

SimdLevel parse_simd_level(const char* name) {
  const std::string s = name ? name : "";
  if (s == "scalar") return SimdLevel::kScalar;
  if (s == "avx2") return SimdLevel::kAvx2;
  if (s == "avx512") return SimdLevel::kAvx512;
  throw std::invalid_argument("parse_simd_level: level = " + s + ": expected scalar, avx2 or avx512");
}

SimdLevel detected_simd_level() {
  static const SimdLevel level = [] {
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
    if (!avx2) return SimdLevel::kScalar;
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vbmi") &&
                        __builtin_cpu_supports("avx512vpopcntdq") && __builtin_cpu_supports("avx512bitalg") &&
                        __builtin_cpu_supports("avx512vnni");
    return avx512 ? SimdLevel::kAvx512 : SimdLevel::kAvx2;
  }();
  return level;
}

bool cpu_has_avx512_bf16() {
  static const bool has = [] {
    if (detected_simd_level() != SimdLevel::kAvx512) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid_count(7, 1, a, b, c, d);
    return (a & (1u << 5)) != 0;  // leaf 7 subleaf 1 EAX bit 5: AVX512_BF16
  }();
  return has;
}

bool cpu_has_amx_int8() {
  static const bool has = [] {
#if !TURBOKV_HAVE_AMX
    return false;  // built without -mamx-tile / -mamx-int8 (CMakeLists.txt)
#else
    if (detected_simd_level() != SimdLevel::kAvx512) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    if (!((d >> 24) & 1) || !((d >> 25) & 1)) return false;  // AMX-TILE, AMX-INT8
    __cpuid(1, a, b, c, d);
    if (!((c >> 27) & 1)) return false;  // OSXSAVE: xgetbv is allowed
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if (((lo >> 17) & 3) != 3) return false;  // XTILECFG and XTILEDATA enabled by the OS
#if defined(__linux__) && defined(SYS_arch_prctl)
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
#endif
  }();
  return has;
}

bool int8_uses_amx(int group, int dim) {
  if (!cpu_has_amx_int8()) return false;
  const char* env = std::getenv("TURBOKV_AMX");
  if (env && env[0] == '0' && !env[1]) return false;
  if (env && env[0] == '1' && !env[1]) return true;
  // Measured (Intel Xeon VM, docs/RESULTS.md "Session 35"), AMX against vpdpbusd: GQA groups of 5 and 8 at
  // head_dim 128, 32k tokens, 1.04-1.41x at one thread, 0.96-1.15x at two (4-bit 0.96-1.01x); groups of 5..16
  // at 16k tokens and head_dim 64 / 128 up to 1.48x; groups of 4 0.81-0.98x (the same tile work per token serves
  // 4 heads instead of up to 16); head_dim 256 0.75-0.97x.
  return group >= 5 && dim <= 128;
}

std::vector<SimdLevel> available_simd_levels() {
  std::vector<SimdLevel> out;
  for (int l = 0; l <= static_cast<int>(detected_simd_level()); ++l) out.push_back(static_cast<SimdLevel>(l));
  return out;
}

namespace {
std::atomic<int>& current() {
  static std::atomic<int> level = [] {
    int l = static_cast<int>(detected_simd_level());
    if (const char* env = std::getenv("TURBOKV_SIMD"); env && *env) {
      try {
        l = std::min(l, static_cast<int>(parse_simd_level(env)));
      } catch (const std::invalid_argument&) {
        // an unknown value keeps the detected level
      }
    }
    return l;
  }();
  return level;
}
}  // namespace

SimdLevel simd_level() { return static_cast<SimdLevel>(current().load(std::memory_order_relaxed)); }

void set_simd_level(SimdLevel level) {
  check_arg(static_cast<int>(level) >= 0 && level <= detected_simd_level(), "set_simd_level", "level",
            simd_level_name(level), "is not supported by this CPU");
  current().store(static_cast<int>(level), std::memory_order_relaxed);
}

}  // namespace turbokv
