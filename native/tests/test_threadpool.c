/* test_threadpool.c - ev_pool_for covers every index exactly once, in contiguous chunks that
 * are multiples of the grain, one per thread, chunk 0 on the caller; survives many tiny jobs,
 * jobs after the workers went to sleep, and create/free cycles. ev_pool_for_balanced covers every
 * index once in grain-aligned pieces and moves work to the threads that are free. Run under TSan: make tsan. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "test_util.h"
#include "threadpool.h"

enum { MAX_N = 5000, MAX_THREADS = 8 };

typedef struct record {
    atomic_int hits[MAX_N];
    int64_t start[MAX_THREADS], end[MAX_THREADS];   /* each slot written by its thread only */
    int calls[MAX_THREADS];
    pthread_t caller;
    atomic_int tid0_not_caller, bad_tid;
} record;

static void record_task(void *ctx, int64_t start, int64_t end, int tid) {
    record *r = ctx;
    if (tid < 0 || tid >= MAX_THREADS) {
        atomic_fetch_add(&r->bad_tid, 1);
        return;
    }
    if (tid == 0 && !pthread_equal(pthread_self(), r->caller)) atomic_fetch_add(&r->tid0_not_caller, 1);
    r->start[tid] = start;
    r->end[tid] = end;
    r->calls[tid]++;
    for (int64_t i = start; i < end; i++) atomic_fetch_add_explicit(&r->hits[i], 1, memory_order_relaxed);
}

static record rec;

static int run_and_check(ev_pool *pool, int64_t n, int64_t grain) {
    memset(&rec, 0, sizeof rec);
    rec.caller = pthread_self();
    ev_pool_for(pool, n, grain, record_task, &rec);
    int bad = 0, nt = ev_pool_n_threads(pool);
    for (int64_t i = 0; i < n; i++) bad += atomic_load(&rec.hits[i]) != 1;
    bad += atomic_load(&rec.tid0_not_caller) + atomic_load(&rec.bad_tid);
    int64_t expect_start = 0;
    for (int t = 0; t < nt && t < MAX_THREADS; t++) {      /* contiguous, ordered by tid */
        if (rec.calls[t] == 0) continue;
        bad += rec.calls[t] != 1;
        bad += rec.start[t] != expect_start;
        bad += rec.start[t] % (grain < 1 ? 1 : grain) != 0;
        expect_start = rec.end[t];
    }
    if (n > 0) bad += expect_start != n;
    if (n > 0) bad += rec.calls[0] != 1;                    /* the caller always takes chunk 0 */
    return bad;
}

static void test_every_index_once(void) {
    const int threads[] = {1, 2, 3, 4, 8};
    const int64_t ns[] = {0, 1, 2, 3, 7, 16, 17, 100, 1023, 4999};
    const int64_t grains[] = {0, 1, 4, 16, 64, 10000};
    for (size_t a = 0; a < sizeof threads / sizeof threads[0]; a++) {
        ev_pool *pool = ev_pool_new(threads[a]);
        CHECK(pool != NULL && ev_pool_n_threads(pool) == threads[a]);
        int bad = 0;
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
            for (size_t c = 0; c < sizeof grains / sizeof grains[0]; c++)
                bad += run_and_check(pool, ns[b], grains[c]);
        CHECK_MSG(bad == 0, "threads=%d: %d violations", threads[a], bad);
        ev_pool_free(pool);
    }
}

static void test_work_is_spread(void) {
    ev_pool *pool = ev_pool_new(4);
    memset(&rec, 0, sizeof rec);
    rec.caller = pthread_self();
    ev_pool_for(pool, 400, 1, record_task, &rec);
    for (int t = 0; t < 4; t++) CHECK(rec.calls[t] == 1 && rec.end[t] - rec.start[t] == 100);
    ev_pool_free(pool);
}

static atomic_long total;

static void sum_task(void *ctx, int64_t start, int64_t end, int tid) {
    (void)ctx;
    (void)tid;
    long s = 0;
    for (int64_t i = start; i < end; i++) s += i;
    atomic_fetch_add(&total, s);
}

static void test_many_tiny_jobs(void) {
    ev_pool *pool = ev_pool_new(3);
    int bad = 0;
    for (int rep = 0; rep < 20000; rep++) {
        atomic_store(&total, 0);
        int64_t n = 1 + rep % 50;
        ev_pool_for(pool, n, 1, sum_task, NULL);
        bad += atomic_load(&total) != n * (n - 1) / 2;
    }
    CHECK_MSG(bad == 0, "%d tiny jobs summed wrongly", bad);
    ev_pool_free(pool);
}

static void test_jobs_after_workers_sleep(void) {
    ev_pool *pool = ev_pool_new(3);
    int bad = 0;
    for (int rep = 0; rep < 6; rep++) {
        struct timespec ts = {0, 20 * 1000 * 1000};          /* 20 ms: past the spin phase */
        nanosleep(&ts, NULL);
        bad += run_and_check(pool, 300, 16);
    }
    CHECK_MSG(bad == 0, "%d violations after sleeping", bad);
    ev_pool_free(pool);
}

static void test_create_free_cycles(void) {
    int ok = 1;
    for (int i = 0; i < 50; i++) {
        ev_pool *pool = ev_pool_new(1 + i % 4);
        ok &= pool != NULL;
        if (i % 2) ok &= run_and_check(pool, 64, 8) == 0;
        ev_pool_free(pool);                                  /* joins workers, asleep or not */
    }
    CHECK(ok);
    ev_pool_free(NULL);
    CHECK(ev_pool_new(0) == NULL && ev_pool_new(-3) == NULL);
    CHECK(ev_pool_n_threads(NULL) == 1);
    memset(&rec, 0, sizeof rec);                             /* a NULL pool runs inline */
    rec.caller = pthread_self();
    ev_pool_for(NULL, 10, 1, record_task, &rec);
    CHECK(rec.calls[0] == 1 && rec.end[0] == 10);
}

/* ---- ev_pool_for_balanced ---------------------------------------------------------------- */

enum { MAX_PIECES = MAX_N + 64 };

typedef struct piece_log {
    atomic_int hits[MAX_N];
    int64_t start[MAX_PIECES], end[MAX_PIECES];
    int tid[MAX_PIECES];
    atomic_int n_pieces, bad_tid;
    atomic_long items_of[MAX_THREADS];
    int64_t n;                  /* the job's size (hold_caller) */
    int hold_caller;            /* the caller's first piece waits until the others did the rest */
    atomic_int timed_out;
} piece_log;

static piece_log plog;

static void piece_task(void *ctx, int64_t start, int64_t end, int tid) {
    piece_log *l = ctx;
    if (tid < 0 || tid >= MAX_THREADS) {
        atomic_fetch_add(&l->bad_tid, 1);
        return;
    }
    int k = atomic_fetch_add(&l->n_pieces, 1);
    if (k < MAX_PIECES) {
        l->start[k] = start;
        l->end[k] = end;
        l->tid[k] = tid;
    }
    for (int64_t i = start; i < end; i++) atomic_fetch_add_explicit(&l->hits[i], 1, memory_order_relaxed);
    if (tid == 0 && l->hold_caller == 1) {   /* a slow caller: wait for the others (10 s cap) */
        l->hold_caller = 2;
        const int64_t rest = l->n - (end - start);
        long waited_ms = 0;
        for (;;) {
            long others = 0;
            for (int t = 1; t < MAX_THREADS; t++) others += atomic_load(&l->items_of[t]);
            if (others >= rest) break;
            if (waited_ms++ > 10000) {
                atomic_store(&l->timed_out, 1);
                break;
            }
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    atomic_fetch_add(&l->items_of[tid], end - start);
}

/* every index once; pieces start on a grain and are whole grains but the one that ends at n */
static int run_balanced_and_check(ev_pool *pool, int64_t n, int64_t grain) {
    memset(&plog, 0, sizeof plog);
    ev_pool_for_balanced(pool, n, grain, piece_task, &plog);
    const int64_t g = grain < 1 ? 1 : grain;
    int bad = atomic_load(&plog.bad_tid);
    for (int64_t i = 0; i < n; i++) bad += atomic_load(&plog.hits[i]) != 1;
    const int np = atomic_load(&plog.n_pieces);
    if (np > MAX_PIECES) return bad + 1;
    for (int k = 0; k < np; k++) {
        const int64_t len = plog.end[k] - plog.start[k];
        bad += len <= 0 || plog.start[k] % g != 0;
        bad += plog.end[k] != n && len % g != 0;
    }
    return bad;
}

static void test_balanced_every_index_once(void) {
    const int threads[] = {1, 2, 3, 4, 8};
    const int64_t ns[] = {0, 1, 2, 3, 7, 16, 17, 100, 1023, 4999};
    const int64_t grains[] = {0, 1, 4, 16, 64, 10000};
    for (size_t a = 0; a < sizeof threads / sizeof threads[0]; a++) {
        ev_pool *pool = ev_pool_new(threads[a]);
        int bad = 0;
        for (int rep = 0; rep < 3; rep++)
            for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
                for (size_t c = 0; c < sizeof grains / sizeof grains[0]; c++)
                    bad += run_balanced_and_check(pool, ns[b], grains[c]);
        CHECK_MSG(bad == 0, "balanced, threads=%d: %d violations", threads[a], bad);
        ev_pool_free(pool);
    }
    memset(&plog, 0, sizeof plog);                           /* a NULL pool runs inline */
    ev_pool_for_balanced(NULL, 10, 1, piece_task, &plog);
    CHECK(atomic_load(&plog.n_pieces) == 1 && plog.end[0] == 10);
}

/* a caller held up in its first piece (half of its chunk) does only that piece: the worker
 * does its own chunk and then steals the rest of the caller's, where ev_pool_for would have
 * left half of the job waiting on the caller */
static void test_balanced_moves_work_to_free_threads(void) {
    ev_pool *pool = ev_pool_new(2);
    memset(&plog, 0, sizeof plog);
    plog.n = 2048;
    plog.hold_caller = 1;
    ev_pool_for_balanced(pool, 2048, 16, piece_task, &plog);
    CHECK(atomic_load(&plog.timed_out) == 0);
    /* one piece at most, of at most 1024 / 2 (the worker may even steal before it starts) */
    int caller_pieces = 0;
    for (int k = 0; k < atomic_load(&plog.n_pieces); k++) caller_pieces += plog.tid[k] == 0;
    CHECK_MSG(caller_pieces <= 1 && atomic_load(&plog.items_of[0]) <= 512,
              "the caller did %d pieces, %ld items", caller_pieces, atomic_load(&plog.items_of[0]));
    CHECK(atomic_load(&plog.items_of[1]) == 2048 - atomic_load(&plog.items_of[0]));
    int bad = 0;
    for (int64_t i = 0; i < 2048; i++) bad += atomic_load(&plog.hits[i]) != 1;
    CHECK(bad == 0);
    ev_pool_free(pool);
}

static void test_balanced_and_static_jobs_mix(void) {
    ev_pool *pool = ev_pool_new(3);
    int bad = 0;
    for (int rep = 0; rep < 5000; rep++) {
        atomic_store(&total, 0);
        int64_t n = 1 + rep % 70;
        if (rep % 2) ev_pool_for_balanced(pool, n, 1 + rep % 5, sum_task, NULL);
        else ev_pool_for(pool, n, 1, sum_task, NULL);
        bad += atomic_load(&total) != n * (n - 1) / 2;
    }
    CHECK_MSG(bad == 0, "%d mixed jobs summed wrongly", bad);
    ev_pool_free(pool);
}

int main(void) {
    test_every_index_once();
    test_work_is_spread();
    test_many_tiny_jobs();
    test_jobs_after_workers_sleep();
    test_create_free_cycles();
    test_balanced_every_index_once();
    test_balanced_moves_work_to_free_threads();
    test_balanced_and_static_jobs_mix();
    return tu_report("test_threadpool");
}
