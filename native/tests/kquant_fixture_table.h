/* kquant_fixture_table.h - the K-quant / IQ4 types under test with their fixture blocks
 * (kquant_fixtures.h, written by gen_kquant_fixtures.py), for test_kquants.c and
 * test_kquants_simd.c. */
#ifndef EDGEVLM_KQUANT_FIXTURE_TABLE_H
#define EDGEVLM_KQUANT_FIXTURE_TABLE_H

#include <stdint.h>

#include "kquant_fixtures.h"
#include "types.h"

/* the types under test with their fixture blocks (kquant_fixtures.h) */
static const struct {
    int32_t type;
    const uint8_t *blocks;
    const uint64_t *hashes;
    int n_blocks;
} FIXTURES[] = {
    {EV_TYPE_Q2_K, kqf_q2_k, kqf_q2_k_hash, KQF_Q2_K_BLOCKS},
    {EV_TYPE_Q3_K, kqf_q3_k, kqf_q3_k_hash, KQF_Q3_K_BLOCKS},
    {EV_TYPE_Q4_K, kqf_q4_k, kqf_q4_k_hash, KQF_Q4_K_BLOCKS},
    {EV_TYPE_Q5_K, kqf_q5_k, kqf_q5_k_hash, KQF_Q5_K_BLOCKS},
    {EV_TYPE_Q6_K, kqf_q6_k, kqf_q6_k_hash, KQF_Q6_K_BLOCKS},
    {EV_TYPE_IQ4_NL, kqf_iq4_nl, kqf_iq4_nl_hash, KQF_IQ4_NL_BLOCKS},
    {EV_TYPE_IQ4_XS, kqf_iq4_xs, kqf_iq4_xs_hash, KQF_IQ4_XS_BLOCKS},
};
#define N_FIXTURES ((int)(sizeof FIXTURES / sizeof FIXTURES[0]))

#endif
