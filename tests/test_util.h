// Shared helpers for the tests: seeded data and tolerance checks.
#pragma once

#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "turbokv/rng.h"

namespace turbokv::test {

/// Sets an environment variable for a scope (restores the previous value or its absence).
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) had_ = true, old_ = old;
    setenv(name, value, 1);
  }
  ~EnvGuard() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

/// {fn() with TURBOKV_AMX=0, fn() with TURBOKV_AMX=1}: AttentionPrecision::kInt8 summing with vpdpbusd, then
/// with AMX tiles for every job where the CPU has them (turbokv/simd.h int8_uses_amx).
template <class Fn>
auto vpdpbusd_and_amx(Fn&& fn) {
  auto run = [&](const char* v) {
    EnvGuard env("TURBOKV_AMX", v);
    return fn();
  };
  auto a = run("0");
  auto b = run("1");
  return std::pair{std::move(a), std::move(b)};
}

inline std::vector<float> gaussian(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(r.normal()) * scale;
  return v;
}

/// Rows of a [n, d] matrix scaled to unit norm.
inline std::vector<float> unit_rows(std::size_t n, int d, std::uint64_t seed) {
  auto v = gaussian(n * d, seed);
  for (std::size_t t = 0; t < n; ++t) {
    double s = 0;
    for (int i = 0; i < d; ++i) s += double(v[t * d + i]) * v[t * d + i];
    const float inv = static_cast<float>(1.0 / std::sqrt(s));
    for (int i = 0; i < d; ++i) v[t * d + i] *= inv;
  }
  return v;
}

/// Relative error ||a - b|| / max(||b||, tiny).
template <class A, class B>
double rel_err(const A* a, const B* b, std::size_t n) {
  double diff = 0, nb = 0;
  for (std::size_t i = 0; i < n; ++i) {
    diff += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    nb += double(b[i]) * double(b[i]);
  }
  return std::sqrt(diff) / std::max(std::sqrt(nb), 1e-300);
}

}  // namespace turbokv::test
