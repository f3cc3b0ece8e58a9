// turbokv — argument checking shared by every public entry point.
//
// Every public function validates its arguments once, at the API boundary, and
// throws std::invalid_argument whose message names the argument and the value
// ("turbokv::encode: head_dim = 70: must be a positive multiple of 8").
// Kernels behind the boundary assume valid input.
#pragma once

#include <cmath>
#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>

namespace turbokv {

namespace detail {
template <class... Ts>
std::string concat(const Ts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
}  // namespace detail

/// Throws std::invalid_argument "<where>: <arg> = <value>: <why>" unless `ok`.
template <class V>
inline void check_arg(bool ok, const char* where, const char* arg, const V& value,
                      const char* why) {
  if (!ok) throw std::invalid_argument(detail::concat(where, ": ", arg, " = ", value, ": ", why));
}

/// Throws std::invalid_argument naming the first non-finite element of x[0..n).
/// x: size n. `arg` names the tensor in the message, e.g. "keys".
void check_finite(const char* where, const char* arg, const float* x, std::size_t n);

}  // namespace turbokv
