/*
 * threadpool.c - the session's worker threads (see threadpool.h).
 *
 * One job at a time. ev_pool_for publishes the job and bumps `generation`; each worker runs
 * its chunk and decrements `pending`; the caller runs chunk 0 and then waits for pending == 0.
 * Workers spin on `generation` for a while after each job (decode issues hundreds of short
 * loops per token) and then sleep on a condition variable; the publisher signals it only when
 * somebody sleeps. Everything is allocated in ev_pool_new.
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
    int64_t n, chunk;

    _Alignas(64) atomic_uint generation;   /* bumped once per job; workers acquire it */
    _Alignas(64) atomic_int pending;       /* workers still running the current job */
    _Alignas(64) pthread_mutex_t mutex;    /* guards n_sleeping, quit and the condvar */
    pthread_cond_t wake;
    int n_sleeping;
    atomic_int quit;
};

static void run_chunk(struct ev_pool *p, int tid) {
    int64_t start = (int64_t)tid * p->chunk;
    int64_t end = start + p->chunk;
    if (end > p->n) end = p->n;
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
        if (!p->workers) {
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
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mutex);
    free(pool);
}

int ev_pool_n_threads(const ev_pool *pool) {
    return pool ? pool->n_threads : 1;
}

void ev_pool_for(ev_pool *pool, int64_t n, int64_t grain, ev_task_fn fn, void *ctx) {
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
