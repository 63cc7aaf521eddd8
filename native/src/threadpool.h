/*
 * threadpool.h - a session-owned pool of worker threads for data-parallel loops.
 *
 * ev_pool_for splits [0, n) into contiguous chunks (multiples of `grain`, one per thread, the
 * caller's thread included) and returns when all are done; ev_pool_for_balanced lets a thread
 * done with its chunk take over part of another's. Workers spin briefly between calls
 * (decode issues hundreds of short loops per token) and then sleep on a condition variable, so
 * an idle session costs no CPU. No allocation after ev_pool_new.
 */
#ifndef EDGEVLM_THREADPOOL_H
#define EDGEVLM_THREADPOOL_H

#include <stdint.h>

typedef struct ev_pool ev_pool;

/* fn processes items [start, end) on thread `tid` (0 = the caller). Empty chunks are skipped.
 * One job at a time: ev_pool_for must not be called from inside fn, nor from two threads. */
typedef void (*ev_task_fn)(void *ctx, int64_t start, int64_t end, int tid);

/* NULL on failure. n_threads >= 1 (1 = no extra threads). */
ev_pool *ev_pool_new(int n_threads);
void ev_pool_free(ev_pool *pool);   /* accepts NULL */
int ev_pool_n_threads(const ev_pool *pool);
void ev_pool_for(ev_pool *pool, int64_t n, int64_t grain, ev_task_fn fn, void *ctx);

/* The same items and first chunks as ev_pool_for, but each thread runs its chunk front to
 * back in shrinking pieces (whole grains but the one that ends at n) and then takes the back
 * half of what another thread has not started, so threads of unequal speed finish together.
 * fn is called several times a thread (tid 0 need not run the first piece); for work whose
 * cost per call is small next to a piece's (decode-sized matrix products). */
void ev_pool_for_balanced(ev_pool *pool, int64_t n, int64_t grain, ev_task_fn fn, void *ctx);

#endif
