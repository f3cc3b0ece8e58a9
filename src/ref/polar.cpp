// PolarQuant reference (Han, Kacham, Karbasi, Mirrokni, Zandieh, arXiv 2502.02617).
//
// Random preconditioning y = Pi x (randomized Hadamard), then a recursive polar
// transform over L = 4 levels (head_dim must be a multiple of 16):
//   level 1: r1_i = |(y_2i, y_2i+1)|, psi1_i = atan2(y_2i+1, y_2i) in [0, 2pi)
//   level l: rl_i = |(r(l-1)_2i, r(l-1)_2i+1)|, psil_i = atan2(r(l-1)_2i+1, r(l-1)_2i) in [0, pi/2]
// Stored: level-1 angles with b bits, levels 2..4 with max(1, b-2) bits, and
// the d/16 level-4 radii in fp16. After preconditioning, y is close to
// isotropic Gaussian, so psi1 is uniform and psil (l >= 2) has density
// proportional to sin(2 psi)^(2^(l-1) - 1) (paper Lemma 2); each level's
// angle codebook is the Lloyd-Max quantizer of that density (turbokv/codebook.h),
// and decoding uses fp32 cos/sin tables of the centroids.
// Encoding computes radii and angle cells without atan2 / hypot (formats.h:
// polar_radius, polar_cell1, polar_cell_hi): fp64 products, sums, square roots
// and compares against the cells' edges (tan(pi/8) at level 1, the tangents of
// the level's boundaries at levels 2..4, computed once by the host libm like the
// codebooks and shared with the fast paths), so every backend computes the same
// bits from the same tables. They equal atan2's cells except within ~1e-16 of an
// edge (tests/test_codecs.cpp PolarCellsAreAtan2Cells).
#include <cmath>

#include "polar.h"
#include "turbokv/error.h"

namespace turbokv::ref {
std::unique_ptr<Codec> make_polar(const CodecConfig& cfg) {
  check_bits(cfg, {2, 3, 4});
  check_arg(cfg.head_dim % 16 == 0, "make_codec(polar)", "head_dim", cfg.head_dim, "must be a multiple of 16 (4 polar levels)");
  return std::make_unique<Polar>(cfg);
}

}  // namespace turbokv::ref
