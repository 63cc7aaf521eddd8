/*
 * nc_common.h - what both counting harnesses (harness.c: decode dots, prefill.c: many-token
 * products) need to be read the same way by bench/neon_counts.py: the region markers it finds
 * by symbol, the loop whose count checks the tracer, and one reproducible random stream.
 * Included once per program (the functions are defined here, each program is one file).
 */
#ifndef NC_COMMON_H
#define NC_COMMON_H

#include <stdint.h>

/* the counted region: every instruction executed between these two calls */
__attribute__((noipa)) void nc_region_begin(void) { __asm__ volatile("nop"); }
__attribute__((noipa)) void nc_region_end(void) { __asm__ volatile("nop\n\tnop"); }

/* exactly 3 instructions an iteration (add, subs, b.ne) */
__attribute__((noipa)) void nc_known_loop(uint64_t n) {
    uint64_t acc = 0;
    __asm__ volatile("1:\n\tadd %0, %0, #1\n\tsubs %1, %1, #1\n\tb.ne 1b"
                     : "+r"(acc), "+r"(n) : : "cc");
}

/* The tracer check neon_counts.py reads first: two regions of 10 and 110 iterations, whose
 * counts must differ by exactly 300 instructions. */
static void nc_calibrate(void) {
    nc_region_begin();
    nc_known_loop(10);
    nc_region_end();
    nc_region_begin();
    nc_known_loop(110);
    nc_region_end();
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_u64(void) {   /* xorshift64 */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

#endif
