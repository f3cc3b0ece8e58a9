// TurboQuant-MSE reference internals that the fast paths read (src/ref/tq_mse.cpp has the
// method's description). Internal, not public API.
#pragma once

#include <vector>

#include "turbokv/codec.h"

namespace turbokv::ref {

/// The calibrated outlier split of a fractional-width TurboQuant-MSE reference codec: channels[0]
/// = part 0's channels (the outliers, b + 1 bits), channels[1] = part 1's (b bits), each ascending,
/// exactly the channels its encode gathers. False (channels untouched) if ref is not a tq-mse codec
/// at a fractional width, or not calibrated. Read by the CPU (src/cpu/tq_mse_split.cpp) and CUDA
/// (src/cuda/pack.cu, TqMseTables) fast paths.
bool tq_mse_split_channels(const Codec& ref, std::vector<int> (&channels)[2]);

}  // namespace turbokv::ref
