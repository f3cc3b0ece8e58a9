// A small process-wide thread pool for the CPU fast path (internal).
//
// Size: TURBOKV_THREADS if set (>= 1), else std::thread::hardware_concurrency().
// parallel_for runs inline (no pool threads) when the caller asks for one
// thread, when there is one item, when called from inside a pool task (nested
// parallelism), or when another host thread is using the pool right now, so a
// threaded host never oversubscribes the cores through turbokv.
#pragma once

#include <cstddef>
#include <functional>

namespace turbokv::cpu::detail {

/// Total threads the pool can run a job on (workers + the calling thread).
int pool_threads();
/// Threads a call asking for `requested` (0 = all) would use.
int resolve_threads(int requested);
/// Calls fn(i) for every i in [0, n), dynamically scheduled over up to
/// `threads` threads (0 = pool_threads()). Rethrows the first exception.
void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& fn);

}  // namespace turbokv::cpu::detail
