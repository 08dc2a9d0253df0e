/* The byte sampler against exponential gaps + Horvitz-Thompson weights:
 * bias and standard error of a line's estimated bytes (docs/INTERNALS.md,
 * "Memory").  cc -O2 -Isrc/core bench/bsamp_variance.c src/core/cal_bsamp.c
 *    src/core/cal_rand.c -lm -o /tmp/bsamp && /tmp/bsamp */
#include "cal_bsamp.h"
#include "cal_rand.h"
#include <math.h>
#include <stdio.h>
int main(void) {
    const int64_t mean = 256 << 10; const int64_t V = 50 << 20; const int trials = 2000;
    double s1=0,s2=0,e1=0,e2=0;
    cal_rand r; cal_rand_seed(&r, 7);
    for (int t = 0; t < trials; t++) {
        cal_bsamp b; cal_bsamp_init(&b, mean, (uint64_t)t * 7919 + 1);
        double left = cal_rand_exp(&r, (double)mean);
        double est = 0, este = 0; int64_t done = 0; int k = 0;
        while (done < V) {
            size_t n = (k++ % 3 == 0) ? 64 : 200;   /* line A: the 200-byte ones */
            uint64_t pts = cal_bsamp_take(&b, n);
            if (n == 200) est += (double)pts * mean;
            /* exponential gaps + Horvitz-Thompson */
            left -= n; int hit = 0;
            while (left <= 0) { hit = 1; left += cal_rand_exp(&r, (double)mean); }
            if (hit && n == 200) este += 200.0 / (1 - exp(-200.0 / mean));
            done += n;
        }
        s1 += est; s2 += est*est; e1 += este; e2 += este*este;
    }
    double truth = 0; { int64_t d=0; int k=0; while (d < V) { size_t n = (k++%3==0)?64:200; if (n==200) truth += n; d += n; } }
    double m = s1/trials, sd = sqrt(s2/trials - m*m), me = e1/trials, sde = sqrt(e2/trials - me*me);
    printf("truth %.0f  renewal: mean %.4f sd %.4f   exponential+HT: mean %.4f sd %.4f  ratio %.2f\n", truth, m/truth, sd/truth, me/truth, sde/truth, sde/sd);
}
