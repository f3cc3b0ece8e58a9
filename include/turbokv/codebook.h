// turbokv — Lloyd-Max scalar codebooks, solved numerically at start-up.
//
// For a uniformly random unit vector in R^d, each coordinate has density
//   f_d(x) = Gamma(d/2) / (sqrt(pi) Gamma((d-1)/2)) * (1 - x^2)^((d-3)/2),  x in [-1, 1]
// (TurboQuant, arXiv 2504.19874, Lemma 1), which tends to N(0, 1/d). The
// Lloyd-Max quantizer with 2^b levels minimises E[(x - Q(x))^2] under that
// density (Lloyd 1982; Max 1960). We solve it by Lloyd iteration on a fine
// grid (2^20 points) with prefix sums, to convergence, and cache it by
// (density, d, b). No hand-typed tables.
#pragma once

#include <cstdint>
#include <vector>

namespace turbokv {

enum class CodebookKind {
  kBeta,      ///< exact coordinate density f_d of a random unit vector (default)
  kGaussian,  ///< the N(0, 1/d) limit
};

/// Parses "beta" or "gaussian"; throws std::invalid_argument otherwise.
CodebookKind parse_codebook(const char* name);
const char* codebook_name(CodebookKind kind);

/// A scalar quantizer: sorted centroids and the midpoints between them.
struct ScalarCodebook {
  int bits = 0;
  std::vector<float> centroids;   ///< size 2^bits, ascending
  std::vector<float> boundaries;  ///< size 2^bits - 1; boundaries[j] = (c[j] + c[j+1]) * 0.5f in fp32
  double mse = 0;                 ///< expected squared error per coordinate under the solved density

  /// Code of t: the number of boundaries strictly below t (ties round down).
  std::uint32_t quantize(float t) const {
    std::uint32_t c = 0;
    for (float b : boundaries) c += (t > b) ? 1u : 0u;
    return c;
  }
};

/**
 * Lloyd-Max codebook for one coordinate of a random unit vector in R^dim.
 * dim >= 2 (Beta) or >= 1 (Gaussian); bits in 1..8. Cached; thread-safe;
 * the returned reference lives for the program. Throws std::invalid_argument.
 */
const ScalarCodebook& lloyd_max_codebook(int dim, int bits, CodebookKind kind);

/**
 * Lloyd-Max codebook for a discretised density: points x (ascending) with
 * non-negative weights w (same size, sum > 0). Deterministic. Used for the
 * coordinate densities, the RVQ residual density and PolarQuant angles.
 */
ScalarCodebook lloyd_max_discrete(const std::vector<double>& x, const std::vector<double>& w, int bits);

/// The density f_d above on a grid: n points over [lo, hi], weights f_d(x)*dx.
void beta_coordinate_grid(int dim, int n, std::vector<double>& x, std::vector<double>& w);

}  // namespace turbokv
