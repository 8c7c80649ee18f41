// The CPU backends' thread pool and scratch buffers. Unlike an OpenMP region, a call returns as soon as its tasks are
// done: it never waits for a worker that the OS has not scheduled yet (on a loaded 2-core machine that wait was a whole
// time slice, ~4 ms, per region: 10x a decode call). Late workers find no task left and go back to sleep.
#include <atomic>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "src/cpu/parallel.h"
#include "src/cpu/placement.h"

namespace moex::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
}

thread_local bool t_in_task = false;  // a task that calls parallel_for again runs that loop alone

struct Job {
    int64_t n = 0;
    int max_helpers = 0;
    void (*call)(void*, int64_t) = nullptr;
    void* ctx = nullptr;
    std::atomic<int64_t> next{0}, done{0};
    std::atomic<int> helpers{0};
    std::mutex error_mutex;
    std::exception_ptr error;

    // Claims and runs tasks until none is left. `call` is only reached for i < n, which cannot happen once the
    // submitting thread has returned (it waits for done == n), so a late worker never touches a dead frame.
    void work() {
        t_in_task = true;
        for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) {
            try {
                call(ctx, i);
            } catch (...) {
                std::lock_guard<std::mutex> lock(error_mutex);
                if (!error) error = std::current_exception();
            }
            if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == n) done.notify_all();
        }
        t_in_task = false;
    }
};

class ThreadPool {
   public:
    void run(int64_t n, int threads, void (*call)(void*, int64_t), void* ctx) {
        std::unique_lock<std::mutex> submit(submit_, std::defer_lock);
        if (t_in_task || !submit.try_lock()) {  // nested, or another thread has the pool: run alone (same results)
            for (int64_t i = 0; i < n; ++i) call(ctx, i);
            return;
        }
        static thread_local const int submitter_cpu = pin_thread_slot(0);  // MOEX_CPU_PIN=1: slot 0 of placement.h
        (void)submitter_cpu;
        grow(threads - 1);
        auto job = std::make_shared<Job>();
        job->n = n, job->max_helpers = threads - 1, job->call = call, job->ctx = ctx;
        {
            std::lock_guard<std::mutex> lock(job_mutex_);
            job_ = job;
        }
        generation_.fetch_add(1, std::memory_order_release);
        generation_.notify_all();
        job->work();
        for (int spin = 0; spin < 2000 && job->done.load(std::memory_order_acquire) < n; ++spin) cpu_relax();
        for (int64_t d; (d = job->done.load(std::memory_order_acquire)) < n;) job->done.wait(d);
        if (job->error) std::rethrow_exception(job->error);
    }

   private:
    void grow(int count) {
        while (int(workers_.size()) < count && workers_.size() < 256) {
            const int slot = int(workers_.size()) + 1;
            workers_.emplace_back([this, slot] {
                pin_thread_slot(slot);  // MOEX_CPU_PIN=1 only
                loop();
            });
        }
    }

    // Waits for a new job (spinning ~50 us first: a decode call posts 3-4 jobs back to back), then helps with it.
    void loop() {
        uint64_t seen = generation_.load(std::memory_order_acquire);
        for (;;) {
            for (int spin = 0; spin < 2000 && generation_.load(std::memory_order_acquire) == seen; ++spin) cpu_relax();
            generation_.wait(seen, std::memory_order_acquire);
            seen = generation_.load(std::memory_order_acquire);
            std::shared_ptr<Job> job;
            {
                std::lock_guard<std::mutex> lock(job_mutex_);
                job = job_;
            }
            if (job && job->helpers.fetch_add(1, std::memory_order_relaxed) < job->max_helpers) job->work();
        }
    }

    std::mutex submit_, job_mutex_;
    std::shared_ptr<Job> job_;
    std::atomic<uint64_t> generation_{0};
    std::vector<std::thread> workers_;  // never joined: the pool lives until the process exits
};

}  // namespace

void FloatBuffer::Free::operator()(float* p) const { std::free(p); }

// Buffers of 4 MiB and more are 2 MiB aligned and asked for transparent huge pages: the experts passes gather
// rows of them at random, and 4 KiB pages would add a TLB miss to most row accesses.
float* FloatBuffer::get(int64_t n) {
    if (n > size_) {
        const size_t huge = size_t(2) << 20, bytes = size_t(n) * sizeof(float);
        const size_t align = bytes >= 2 * huge ? huge : 64, rounded = (bytes + align - 1) / align * align;
        data_.reset();
        size_ = 0;
        data_.reset(static_cast<float*>(std::aligned_alloc(align, rounded)));
        if (!data_) throw std::bad_alloc();
#if defined(__linux__)
        if (align == huge) madvise(data_.get(), rounded, MADV_HUGEPAGE);
#endif
        size_ = n;
    }
    return data_.get();
}

float* thread_scratch(int slot, int64_t n) {
    thread_local FloatBuffer buffers[8];
    return buffers[slot].get(n);
}

void run_tasks(int64_t n, int threads, void (*call)(void* ctx, int64_t i), void* ctx) {
    static ThreadPool* pool = new ThreadPool();  // leaked on purpose: no destructor races at exit
    pool->run(n, threads, call, ctx);
}

}  // namespace moex::cpu
