/*
 * cal_rand — a tiny PRNG (xoshiro-style xorshift64*) and exponential draws,
 * for randomised sampling intervals that cannot alias with program loops.
 * State is explicit; not thread-safe (one generator per owner).
 */
#ifndef CAL_RAND_H
#define CAL_RAND_H

#include <stdint.h>

typedef struct cal_rand {
    uint64_t s;
} cal_rand;

void cal_rand_seed(cal_rand *r, uint64_t seed);
uint64_t cal_rand_next(cal_rand *r);
/* Uniform in (0, 1]. */
double cal_rand_unit(cal_rand *r);
/* Exponentially distributed with the given mean. */
double cal_rand_exp(cal_rand *r, double mean);

#endif
