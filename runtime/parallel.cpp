// runtime/parallel.cpp -- a small fork-join pool. Workers sleep on a condition variable after a
// short spin, so they never compete for cores with the caller or with BLAS; BLAS itself runs
// single-threaded inside our chunks (see runtime/ops/matmul.cpp).
#include "runtime/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/api.h"

extern "C" void openblas_set_num_threads(int);

namespace kiln {
namespace {

thread_local bool t_in_region = false;

// One fork-join job; lives on the caller's stack until every worker that joined has left.
struct Job {
  detail::ChunkFn fn;
  void* ctx;
  int64_t begin, end, chunks;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> remaining{0};
  int joined = 0;  // workers inside take_chunks (guarded by Pool::mu_)
  std::exception_ptr error;
};

class Pool {
 public:
  explicit Pool(int n) : size_(std::max(1, n)) {
    for (int i = 1; i < size_; ++i) workers_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return size_; }

  // Returns false (without running anything) when the pool is busy with another caller.
  bool run(int64_t begin, int64_t end, int64_t chunks, detail::ChunkFn fn, void* ctx) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    Job job{fn, ctx, begin, end, chunks, {0}, {0}, 0, nullptr};
    job.remaining.store(chunks);
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    take_chunks(job);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return job.remaining.load() == 0 && job.joined == 0; });
    job_ = nullptr;
    if (job.error) std::rethrow_exception(job.error);
    return true;
  }

 private:
  void take_chunks(Job& job) {
    t_in_region = true;
    int64_t n = job.end - job.begin;
    for (int64_t c; (c = job.next.fetch_add(1)) < job.chunks;) {
      int64_t b = job.begin + n * c / job.chunks, e = job.begin + n * (c + 1) / job.chunks;
      try {
        job.fn(job.ctx, b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!job.error) job.error = std::current_exception();
      }
      job.remaining.fetch_sub(1);
    }
    t_in_region = false;
  }

  void work() {
    uint64_t seen = 0;
    for (;;) {
      // Spin briefly: back-to-back eager ops then start without a wake-up.
      auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
      while (generation_.load() == seen && std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();
      }
      Job* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return generation_.load() != seen; });
        seen = generation_.load();
        if (stop_) return;
        job = job_;
        if (!job) continue;  // woke after the job was over
        ++job->joined;
      }
      take_chunks(*job);
      std::lock_guard<std::mutex> lock(mu_);
      if (--job->joined == 0) done_.notify_all();
    }
  }

  int size_;
  std::vector<std::thread> workers_;
  std::mutex busy_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;
  Job* job_ = nullptr;
};

int default_threads() {
  if (const char* env = std::getenv("KILN_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::mutex g_pool_mu;
std::shared_ptr<Pool> g_pool;

std::shared_ptr<Pool> pool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool) {
    openblas_set_num_threads(1);  // BLAS runs inside our chunks, never beside them
    g_pool = std::make_shared<Pool>(default_threads());
  }
  return g_pool;
}

}  // namespace

bool in_parallel_region() { return t_in_region; }

void set_num_threads(int n) {
  auto fresh = std::make_shared<Pool>(std::max(1, n));
  openblas_set_num_threads(1);
  std::lock_guard<std::mutex> lock(g_pool_mu);
  g_pool = std::move(fresh);
}

int num_threads() { return pool()->size(); }

namespace detail {
void parallel_run(int64_t begin, int64_t end, int64_t grain, ChunkFn fn, void* ctx) {
  int64_t n = end - begin;
  if (t_in_region || n <= grain) return fn(ctx, begin, end);
  auto p = pool();
  // Round down, so that every chunk gets at least `grain` items.
  int64_t chunks = std::min<int64_t>(p->size(), n / std::max<int64_t>(grain, 1));
  if (chunks <= 1 || !p->run(begin, end, chunks, fn, ctx)) fn(ctx, begin, end);
}
}  // namespace detail

}  // namespace kiln
