// turbokv — IEEE binary16 (fp16), bfloat16 and fp8 e4m3 conversions.
//
// Plain bit-level conversions usable on host and device. Rounding is
// round-to-nearest-even everywhere; fp16/bf16 -> fp32 is exact.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TURBOKV_HD __host__ __device__ __forceinline__
#else
#define TURBOKV_HD inline
#endif

namespace turbokv {

TURBOKV_HD std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
TURBOKV_HD float bits_f32(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// fp16 bits -> fp32 (exact, handles subnormals, Inf, NaN).
TURBOKV_HD float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1f;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    // subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/// fp32 -> fp16 bits, round-to-nearest-even; overflow -> Inf; NaN -> sign | 0x7e00 (quiet, payload
/// dropped). In device code the finite and infinite cases are one `cvt.rn.f16.f32` (IEEE
/// round-to-nearest-even, subnormals kept, overflow to Inf: the same bits as the code below, checked
/// on 21 M inputs covering every rounding case by tests/cuda/test_cuda_pack.cpp
/// HalfConversion.DeviceMatchesReferenceBits), NaN by a select.
TURBOKV_HD std::uint16_t float_to_half(float f) {
  const std::uint32_t x = f32_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7fffffffu;
#if defined(__CUDA_ARCH__)
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return ax > 0x7f800000u ? static_cast<std::uint16_t>(sign | 0x7e00u) : static_cast<std::uint16_t>(h);
#else
  if (ax >= 0x7f800000u) return static_cast<std::uint16_t>(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to >= 65520
  if (ax < 0x38800000u) {  // below 2^-14: subnormal or zero in fp16
    // value / 2^-24, rounded to nearest even integer
    const float v = bits_f32(ax) * 16777216.0f;  // exact scaling by 2^24
    std::uint32_t m = static_cast<std::uint32_t>(v);
    const float rem = v - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return static_cast<std::uint16_t>(sign | m);
  }
  std::uint32_t r = ax - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0x0fffu + ((r >> 13) & 1u);     // round to nearest even on the 13 dropped bits
  return static_cast<std::uint16_t>(sign | (r >> 13));
#endif
}

/// The fp16 value <= x closest to x (x finite, >= -65504), as bits.
TURBOKV_HD std::uint16_t float_to_half_down(float x) {
  std::uint16_t h = float_to_half(x);
  if (half_to_float(h) > x) {
    if (h == 0x0000u) return 0x8001u;  // +0 > x > 0: the smallest negative subnormal
    h = (h & 0x8000u) ? static_cast<std::uint16_t>(h + 1) : static_cast<std::uint16_t>(h - 1);
  }
  return h;
}
/// The fp16 value >= x closest to x (x finite, <= 65504), as bits.
TURBOKV_HD std::uint16_t float_to_half_up(float x) {
  std::uint16_t h = float_to_half(x);
  if (half_to_float(h) < x) {
    if (h == 0x8000u) return 0x0001u;
    h = (h & 0x8000u) ? static_cast<std::uint16_t>(h - 1) : static_cast<std::uint16_t>(h + 1);
  }
  return h;
}

/// Rounds x to the nearest fp16 value and returns it as fp32.
TURBOKV_HD float round_to_half(float x) { return half_to_float(float_to_half(x)); }

/// bfloat16 bits -> fp32 (exact).
TURBOKV_HD float bf16_to_float(std::uint16_t h) { return bits_f32(static_cast<std::uint32_t>(h) << 16); }

/// fp32 -> bfloat16 bits, round-to-nearest-even; NaN kept quiet.
TURBOKV_HD std::uint16_t float_to_bf16(float f) {
  std::uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

/// fp8 e4m3 (OCP "E4M3FN": bias 7, no Inf, max 448, 0x7f/0xff NaN) -> fp32.
TURBOKV_HD float e4m3_to_float(std::uint8_t v) {
  const std::uint32_t sign = v >> 7, exp = (v >> 3) & 0xf, mant = v & 7u;
  float r;
  if (exp == 0) {
    r = static_cast<float>(mant) * 0.001953125f;  // mant * 2^-9
  } else if (exp == 15 && mant == 7) {
    r = bits_f32(0x7fc00000u);
  } else {
    r = bits_f32(((exp + 120) << 23) | (mant << 20));
  }
  return sign ? -r : r;
}

/// fp32 -> fp8 e4m3, round-to-nearest-even, saturating to +-448. Input must be finite.
TURBOKV_HD std::uint8_t float_to_e4m3(float f) {
  const std::uint32_t x = f32_bits(f);
  const std::uint8_t sign = static_cast<std::uint8_t>((x >> 24) & 0x80u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x43e00000u) return static_cast<std::uint8_t>(sign | 0x7eu);  // >= 448 saturates
  if (ax < 0x3c800000u) {  // below 2^-6: subnormal range, step 2^-9
    const float v = bits_f32(ax) * 512.0f;
    std::uint32_t m = static_cast<std::uint32_t>(v);
    const float rem = v - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return static_cast<std::uint8_t>(sign | m);  // m == 8 becomes the smallest normal, correctly
  }
  std::uint32_t r = ax - 0x3c000000u;  // rebias exponent 127 -> 7
  r += 0x7ffffu + ((r >> 20) & 1u);
  std::uint32_t out = r >> 20;
  if (out > 0x7eu) out = 0x7eu;
  return static_cast<std::uint8_t>(sign | out);
}

}  // namespace turbokv
