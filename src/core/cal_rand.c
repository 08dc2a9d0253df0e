/* cal_rand — see cal_rand.h.  xorshift64* (Vigna 2016). */
#include "cal_rand.h"

#include <math.h>

void cal_rand_seed(cal_rand *r, uint64_t seed)
{
    /* splitmix64 to spread a weak seed over all bits; never zero. */
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    r->s = z ? z : 0x2545F4914F6CDD1Dull;
}

uint64_t cal_rand_next(cal_rand *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

double cal_rand_unit(cal_rand *r)
{
    /* 53 random bits, shifted into (0, 1]. */
    return ((double)(cal_rand_next(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

double cal_rand_exp(cal_rand *r, double mean) { return -mean * log(cal_rand_unit(r)); }
