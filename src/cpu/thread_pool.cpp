// Process-wide thread pool (see thread_pool.h).
#include "thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace turbokv::cpu::detail {
namespace {

thread_local bool tls_in_task = false;

class Pool {
 public:
  explicit Pool(int total) : total_(std::max(1, total)) {
    for (int i = 0; i + 1 < total_; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int total() const { return total_; }

  void run(std::size_t n, int threads, const std::function<void(std::size_t)>& fn) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock() || threads <= 1 || n <= 1 || tls_in_task) return inline_run(n, fn);
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = &fn;
      n_ = n;
      next_.store(0);
      done_ = 0;
      slots_.store(threads - 1);
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return done_ == n_ && active_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  static void inline_run(std::size_t n, const std::function<void(std::size_t)>& fn) {
    const bool prev = tls_in_task;
    tls_in_task = true;
    try {
      for (std::size_t i = 0; i < n; ++i) fn(i);
    } catch (...) {
      tls_in_task = prev;
      throw;
    }
    tls_in_task = prev;
  }

  void work() {
    const bool prev = tls_in_task;
    tls_in_task = true;
    std::size_t local_done = 0;
    for (;;) {
      const std::size_t i = next_.fetch_add(1);
      if (i >= n_) break;
      try {
        (*fn_)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
      }
      ++local_done;
    }
    tls_in_task = prev;
    std::lock_guard<std::mutex> lk(mu_);
    done_ += local_done;
    if (done_ == n_) done_cv_.notify_all();
  }

  void loop() {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (!fn_ || slots_.fetch_sub(1) <= 0) continue;
        ++active_;
      }
      work();
      std::lock_guard<std::mutex> lk(mu_);
      --active_;
      done_cv_.notify_all();
    }
  }

  int total_;
  std::vector<std::thread> workers_;
  std::mutex busy_, mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(std::size_t)>* fn_ = nullptr;
  std::size_t n_ = 0, done_ = 0;
  std::atomic<std::size_t> next_{0};
  std::atomic<int> slots_{0};
  int active_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool p([] {
    if (const char* env = std::getenv("TURBOKV_THREADS"); env && *env) {
      const int v = std::atoi(env);
      if (v >= 1) return v;
    }
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return p;
}

}  // namespace

int pool_threads() { return pool().total(); }

int resolve_threads(int requested) {
  const int total = pool_threads();
  return requested <= 0 ? total : std::min(requested, total);
}

void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& fn) {
  pool().run(n, resolve_threads(threads), fn);
}

}  // namespace turbokv::cpu::detail
