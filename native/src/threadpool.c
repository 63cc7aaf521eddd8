/*
 * threadpool.c - the session's worker threads (see threadpool.h).
 *
 * One job at a time. ev_pool_for publishes the job and bumps `generation`; each worker runs
 * its chunk and decrements `pending`; the caller runs chunk 0 and then waits for pending == 0.
 * Workers spin on `generation` for a while after each job (decode issues hundreds of short
 * loops per token) and then sleep on a condition variable; the publisher signals it only when
 * somebody sleeps. Everything is allocated in ev_pool_new.
 *
 * ev_pool_for_balanced starts from the same chunks, but each thread goes through its own in
 * pieces (half of what it has left, whole grains) and, when done, takes the back half of what
 * another thread has not started yet, so threads of unequal speed finish together while each
 * still reads its rows as one sequential stream. A decode product's two halves do not take the
 * same time (measured on a 2-vCPU Xeon, pinned AVX2 Q8_0 decode: the caller's half 2.4 %
 * slower than the worker's, each thread idle ~5 % of every product waiting for the other, and
 * a worker that waited out its spin on the 151936-row output product slept through the next
 * product's start). Handing out pieces from one shared counter instead (OpenMP's guided
 * schedule) balanced as well but made memory-bound decodes slower (Q4_0 -6 %): the threads
 * jump across the matrix and restart the hardware prefetcher's stream at every piece; ggml's
 * fixed 64-row pieces were slower still (Q8_0: -7 % against the shared counter's pieces).
 *
 * Spinning never calls sched_yield early: with any other runnable process on the CPU (a
 * background job, even at nice 19) a yield hands it a whole time slice (milliseconds) while
 * the job it waits for finishes in microseconds (2B Q8_0 decode, 2 threads, with a nice-19
 * fuzzer on the machine: 10.6 -> 11.6 tok/s, medians of 5). The caller yields only after
 * ~0.5 ms of spinning, when a worker has plainly been descheduled (more threads than CPUs).
 */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ROUNDS 10000          /* ~0.1-0.5 ms of polling before a worker sleeps */
#define CALLER_SPIN_ROUNDS 20000   /* ~0.5 ms; then the waiting caller yields its time slice,
                                      so an oversubscribed CPU runs the workers it waits for */

/* A thread's items not started yet, [lo, hi) as (lo << 32) | hi: the owner takes pieces
 * from lo, a thread that has run out moves hi down. One cache line each. */
typedef struct ev_range_slot {
    _Alignas(64) _Atomic uint64_t lo_hi;
} ev_range_slot;

#define RANGE_PACK(lo, hi) (((uint64_t)(lo) << 32) | (uint64_t)(hi))
#define RANGE_LO(v) ((int64_t)((v) >> 32))
#define RANGE_HI(v) ((int64_t)((v) & 0xffffffffu))
#define BALANCED_MAX_N 0xffffffffLL   /* larger jobs run as ev_pool_for's */

typedef struct ev_worker {
    struct ev_pool *pool;
    pthread_t thread;
    int tid;
    int started;
} ev_worker;

struct ev_pool {
    int n_threads;                 /* workers + the caller */
    ev_worker *workers;            /* [n_threads - 1] */

    /* the current job; written by the caller before `generation` is bumped (release) */
    ev_task_fn fn;
    void *ctx;
    int64_t n, chunk, grain;
    int balanced;                          /* 1: ev_pool_for_balanced's job */
    ev_range_slot *ranges;                 /* [n_threads] balanced: what each has not started */

    _Alignas(64) atomic_uint generation;   /* bumped once per job; workers acquire it */
    _Alignas(64) atomic_int pending;       /* workers still running the current job */
    _Alignas(64) pthread_mutex_t mutex;    /* guards n_sleeping, quit and the condvar */
    pthread_cond_t wake;
    int n_sleeping;
    atomic_int quit;
};

/* Thread t's chunk of ev_pool_for: [*start, *end), empty past n. */
static void chunk_of(const struct ev_pool *p, int t, int64_t *start, int64_t *end) {
    *start = (int64_t)t * p->chunk < p->n ? (int64_t)t * p->chunk : p->n;
    *end = *start + p->chunk < p->n ? *start + p->chunk : p->n;
}

/* The next piece of a range of `len` items: half of it in whole grains, at least one grain,
 * at most all of it. */
static int64_t piece_of(int64_t len, int64_t grain) {
    int64_t size = (len / 2 + grain - 1) / grain * grain;
    if (size < grain) size = grain;
    return size < len ? size : len;
}

/* Takes the next piece (piece_of) of slot's range. 0 when the range is empty. */
static int take_front(ev_range_slot *slot, int64_t grain, int64_t *start, int64_t *end) {
    uint64_t v = atomic_load_explicit(&slot->lo_hi, memory_order_acquire);
    for (;;) {
        const int64_t lo = RANGE_LO(v), hi = RANGE_HI(v);
        if (lo >= hi) return 0;
        const int64_t size = piece_of(hi - lo, grain);
        if (atomic_compare_exchange_weak_explicit(&slot->lo_hi, &v, RANGE_PACK(lo + size, hi),
                                                  memory_order_acq_rel, memory_order_acquire)) {
            *start = lo;
            *end = lo + size;
            return 1;
        }
    }
}

/* Claims the back half (whole grains; all of it when that is one grain) of the largest range
 * another thread has not started: [*start, *end). 0 when every range is empty. */
static int steal_back(struct ev_pool *p, int tid, int64_t *start, int64_t *end) {
    for (;;) {
        int victim = -1;
        int64_t most = 0;
        for (int t = 0; t < p->n_threads; t++) {
            const uint64_t v = atomic_load_explicit(&p->ranges[t].lo_hi, memory_order_acquire);
            if (t != tid && RANGE_HI(v) - RANGE_LO(v) > most) {
                most = RANGE_HI(v) - RANGE_LO(v);
                victim = t;
            }
        }
        if (victim < 0) return 0;
        uint64_t v = atomic_load_explicit(&p->ranges[victim].lo_hi, memory_order_acquire);
        const int64_t lo = RANGE_LO(v), hi = RANGE_HI(v);
        if (lo >= hi) continue;                          /* taken meanwhile: look again */
        const int64_t mid = lo + (hi - lo) / 2 / p->grain * p->grain;
        if (atomic_compare_exchange_strong_explicit(&p->ranges[victim].lo_hi, &v,
                                                    RANGE_PACK(lo, mid), memory_order_acq_rel,
                                                    memory_order_acquire)) {
            *start = mid;
            *end = hi;
            return 1;
        }
    }
}

/* Own range front to back, then stolen ones. A thief runs the first piece of what it stole
 * before the rest becomes stealable in its slot, so every steal does work (no ping-pong). */
static void run_balanced(struct ev_pool *p, int tid) {
    ev_range_slot *own = &p->ranges[tid];
    int64_t start, end;
    for (;;) {
        while (take_front(own, p->grain, &start, &end)) p->fn(p->ctx, start, end, tid);
        if (!steal_back(p, tid, &start, &end)) return;
        const int64_t size = piece_of(end - start, p->grain);
        atomic_store_explicit(&own->lo_hi, RANGE_PACK(start + size, end), memory_order_release);
        p->fn(p->ctx, start, start + size, tid);
    }
}

static void run_chunk(struct ev_pool *p, int tid) {
    if (p->balanced) {
        run_balanced(p, tid);
        return;
    }
    int64_t start, end;
    chunk_of(p, tid, &start, &end);
    if (start < end) p->fn(p->ctx, start, end, tid);
}

static void *worker_main(void *arg) {
    ev_worker *w = arg;
    struct ev_pool *p = w->pool;
    unsigned seen = 0;   /* the generation at creation: a job published before this thread
                            got to run is still seen as new */
    for (;;) {
        unsigned gen = seen;
        for (int i = 0; i < SPIN_ROUNDS; i++) {
            gen = atomic_load_explicit(&p->generation, memory_order_acquire);
            if (gen != seen || atomic_load_explicit(&p->quit, memory_order_relaxed)) break;
            CPU_RELAX();
        }
        if (gen == seen) {
            pthread_mutex_lock(&p->mutex);
            p->n_sleeping++;
            while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
                   !atomic_load_explicit(&p->quit, memory_order_relaxed))
                pthread_cond_wait(&p->wake, &p->mutex);
            p->n_sleeping--;
            pthread_mutex_unlock(&p->mutex);
        }
        if (atomic_load_explicit(&p->quit, memory_order_acquire)) break;
        seen = gen;
        run_chunk(p, w->tid);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
    return NULL;
}

static void stop_workers(struct ev_pool *p) {
    pthread_mutex_lock(&p->mutex);
    atomic_store_explicit(&p->quit, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mutex);
    for (int i = 0; i < p->n_threads - 1; i++)
        if (p->workers[i].started) pthread_join(p->workers[i].thread, NULL);
}

ev_pool *ev_pool_new(int n_threads) {
    if (n_threads < 1 || n_threads > 1024) return NULL;
    struct ev_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    atomic_init(&p->generation, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->quit, 0);
    if (pthread_mutex_init(&p->mutex, NULL) != 0) {
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->wake, NULL) != 0) {
        pthread_mutex_destroy(&p->mutex);
        free(p);
        return NULL;
    }
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        p->ranges = aligned_alloc(64, sizeof *p->ranges * (size_t)n_threads);
        if (!p->workers || !p->ranges) {
            ev_pool_free(p);
            return NULL;
        }
        for (int i = 0; i < n_threads - 1; i++) {
            p->workers[i].pool = p;
            p->workers[i].tid = i + 1;
            if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0) {
                ev_pool_free(p);
                return NULL;
            }
            p->workers[i].started = 1;
        }
    }
    return p;
}

void ev_pool_free(ev_pool *pool) {
    if (!pool) return;
    if (pool->workers) stop_workers(pool);
    free(pool->workers);
    free(pool->ranges);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mutex);
    free(pool);
}

int ev_pool_n_threads(const ev_pool *pool) {
    return pool ? pool->n_threads : 1;
}

static void pool_run(ev_pool *pool, int64_t n, int64_t grain, ev_task_fn fn, void *ctx,
                     int balanced) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int nt = pool ? pool->n_threads : 1;
    int64_t n_grains = (n + grain - 1) / grain;
    if (nt == 1 || n_grains == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    struct ev_pool *p = pool;
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = (n_grains + nt - 1) / nt * grain;
    p->grain = grain;
    p->balanced = balanced && n <= BALANCED_MAX_N;
    if (p->balanced)   /* the chunks of ev_pool_for, published by `generation` below */
        for (int t = 0; t < nt; t++) {
            int64_t lo, hi;
            chunk_of(p, t, &lo, &hi);
            atomic_store_explicit(&p->ranges[t].lo_hi, RANGE_PACK(lo, hi), memory_order_relaxed);
        }
    atomic_store_explicit(&p->pending, nt - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mutex);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    if (p->n_sleeping > 0) pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mutex);

    run_chunk(p, 0);
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) != 0;) {
        if (spins < CALLER_SPIN_ROUNDS) {
            spins++;
            CPU_RELAX();
        } else {
            sched_yield();
        }
    }
}

void ev_pool_for(ev_pool *pool, int64_t n, int64_t grain, ev_task_fn fn, void *ctx) {
    pool_run(pool, n, grain, fn, ctx, 0);
}

void ev_pool_for_balanced(ev_pool *pool, int64_t n, int64_t grain, ev_task_fn fn, void *ctx) {
    pool_run(pool, n, grain, fn, ctx, 1);
}
