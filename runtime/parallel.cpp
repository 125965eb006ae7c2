// runtime/parallel.cpp -- a fork-join pool shared by any number of calling threads. Each call is
// a job in a queue; idle workers take chunks from the oldest job, the caller works on its own.
// Workers spin a couple of microseconds, yield their core for 100 us, then sleep on a condition
// variable, so an idle pool takes no CPU from the caller, from BLAS or from another library's
// threads.
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
#include "runtime/autograd_meta.h"
#include "runtime/profiler.h"
#include "runtime/recorder.h"

extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int);

namespace kiln {
namespace {

thread_local bool t_in_region = false;

// Long enough to catch a job that follows at once, too short to matter to anyone else's cores.
constexpr auto kSpin = std::chrono::microseconds(2);

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// After the spin, a waiting thread yields its core for up to kYield before it sleeps. On a
// virtual machine a sleeping core takes 30-150 us to wake (measured here), longer than many
// jobs: without this window, two threads ran a training step of small ops slower than one. A
// yielding thread gives the core to any other runnable thread at once.
constexpr auto kYield = std::chrono::microseconds(100);

// Polls `ready`: for kSpin with pause, then for kYield yielding the core; the caller then
// sleeps if it is still false.
template <class P> void spin_until(P ready) {
  auto now = std::chrono::steady_clock::now();
  auto spin_end = now + kSpin, yield_end = now + kSpin + kYield;
  while (!ready() && std::chrono::steady_clock::now() < spin_end) cpu_relax();
  while (!ready() && std::chrono::steady_clock::now() < yield_end) std::this_thread::yield();
}

// The caller's thread-local state that ops read, installed on a worker for each chunk it runs,
// so a chunk behaves as it would inline. Not carried: the autograd graveyard (tape.cpp: a ~Node's
// own scratch stack) and jit/function.cpp's signature buffer, which belong to their thread.
struct CallerState {
  bool grad = grad_enabled();
  // Tracing hands ops to the Recorder and runs no kernels, so no chunk should start while one
  // is active (by_row_blocks checks); carried anyway, so a chunk never runs a kernel on a trace.
  Recorder* recorder = active_recorder();
};

struct InstallState {
  explicit InstallState(const CallerState& s) : grad(s.grad), recorder(s.recorder) { t_in_region = true; }
  ~InstallState() { t_in_region = false; }
  GradModeGuard grad;
  RecorderGuard recorder;
};

// One call of parallel_run; lives on the caller's stack until its last chunk has finished.
struct Job {
  Job(detail::ChunkFn fn, void* ctx, int64_t begin, int64_t end, int64_t chunks)
      : fn(fn), ctx(ctx), begin(begin), end(end), chunks(chunks), unfinished(chunks) {}
  detail::ChunkFn fn;
  void* ctx;
  int64_t begin, end, chunks;
  CallerState state;
  int64_t claimed = 0;              // chunks handed out (guarded by Pool::mu_)
  std::atomic<int64_t> unfinished;  // written under Pool::mu_; the caller's spin reads it unlocked
  std::exception_ptr error;         // the first one (guarded by Pool::mu_)
  std::condition_variable done;     // unfinished reached 0
};

class Pool {
 public:
  explicit Pool(int n) : size_(std::max(1, n)) {
    for (int i = 1; i < size_; ++i)
      workers_.emplace_back([this, i] {
        profiler::name_thread("kiln worker " + std::to_string(i));
        work();
      });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return size_; }

  // Runs every chunk of `job`, on the workers and on this thread; returns when all are done.
  void run(Job& job) {
    std::unique_lock<std::mutex> lock(mu_);
    queue_.push_back(&job);
    pending_.fetch_add(job.chunks, std::memory_order_relaxed);
    lock.unlock();
    int64_t helpers = std::min<int64_t>(job.chunks - 1, static_cast<int64_t>(workers_.size()));
    for (int64_t i = 0; i < helpers; ++i) wake_.notify_one();
    lock.lock();
    while (job.claimed < job.chunks) run_chunk(job, lock);
    lock.unlock();
    spin_until([&] { return job.unfinished.load(std::memory_order_acquire) == 0; });
    // Always through the lock: the worker that finished last may still be notifying `done`.
    lock.lock();
    job.done.wait(lock, [&] { return job.unfinished.load(std::memory_order_relaxed) == 0; });
  }

 private:
  // Claims the next chunk of `job` and runs it with mu_ released; `lock` holds mu_ on entry/exit.
  void run_chunk(Job& job, std::unique_lock<std::mutex>& lock) {
    int64_t c = job.claimed++;
    pending_.fetch_sub(1, std::memory_order_relaxed);
    if (job.claimed == job.chunks) queue_.erase(std::find(queue_.begin(), queue_.end(), &job));
    bool skip = job.error != nullptr;  // a failed job's remaining chunks are not started
    lock.unlock();
    std::exception_ptr error;
    if (!skip) {
      InstallState state(job.state);
      int64_t n = job.end - job.begin;
      profiler::Scope event(profiler::Kind::Parallel, "parallel_for chunk");
      if (event) {
        event.arg("chunk", c);
        event.arg("of", job.chunks);
      }
      try {
        job.fn(job.ctx, job.begin + n * c / job.chunks, job.begin + n * (c + 1) / job.chunks);
      } catch (...) {
        error = std::current_exception();
      }
    }
    lock.lock();
    if (error && !job.error) job.error = error;
    if (job.unfinished.fetch_sub(1, std::memory_order_release) == 1) job.done.notify_one();
  }

  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (stop_) return;
      if (!queue_.empty()) {
        run_chunk(*queue_.front(), lock);  // every queued job has a chunk left
        continue;
      }
      lock.unlock();
      spin_until([&] { return pending_.load(std::memory_order_relaxed) > 0; });
      lock.lock();
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    }
  }

  int size_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::vector<Job*> queue_;          // jobs with chunks left to claim, oldest first
  std::atomic<int64_t> pending_{0};  // chunks left to claim in queue_, for the idle spin
  bool stop_ = false;
  std::vector<std::thread> workers_;  // last: they start after the members above exist
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
  if (!g_pool) g_pool = std::make_shared<Pool>(default_threads());
  return g_pool;
}

std::mutex g_blas_mu;
int g_blas_scopes = 0;  // open BlasThreadsScopes, all threads (guarded by g_blas_mu)
int g_blas_saved = 1;   // OpenBLAS's count when the first one opened

}  // namespace

bool in_parallel_region() { return t_in_region; }

void set_num_threads(int n) {
  auto fresh = std::make_shared<Pool>(std::max(1, n));
  std::shared_ptr<Pool> old;
  {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    old = std::exchange(g_pool, std::move(fresh));
  }
  // Callers still running on the old pool hold it; the last of them joins its workers.
}

int num_threads() { return pool()->size(); }

BlasThreadsScope::BlasThreadsScope() {
  std::lock_guard<std::mutex> lock(g_blas_mu);
  if (g_blas_scopes++ > 0) return;
  g_blas_saved = openblas_get_num_threads();
  if (g_blas_saved != 1) openblas_set_num_threads(1);
}

BlasThreadsScope::~BlasThreadsScope() {
  std::lock_guard<std::mutex> lock(g_blas_mu);
  if (--g_blas_scopes > 0) return;
  if (g_blas_saved != 1 && openblas_get_num_threads() == 1) openblas_set_num_threads(g_blas_saved);
}

namespace detail {
void parallel_run(int64_t begin, int64_t end, int64_t grain, ChunkFn fn, void* ctx) {
  int64_t n = end - begin;
  if (t_in_region || n <= grain) return fn(ctx, begin, end);
  auto p = pool();
  // Round down, so that every chunk gets at least `grain` items.
  int64_t chunks = std::min<int64_t>(p->size(), n / std::max<int64_t>(grain, 1));
  if (chunks <= 1) return fn(ctx, begin, end);
  Job job(fn, ctx, begin, end, chunks);
  p->run(job);
  if (job.error) std::rethrow_exception(job.error);
}
}  // namespace detail

}  // namespace kiln
