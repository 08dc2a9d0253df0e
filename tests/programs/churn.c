/* Native threads that malloc, realloc, memcpy and free without Python. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void *churn(void *arg)
{
    long n = *(long *)arg, done = 0;
    for (long i = 0; i < n; i++) {
        char *p = malloc(64 + (size_t)(i % 4096));
        char *q = calloc(1, 256);
        if (!p || !q)
            break;
        memcpy(q, p, 64);
        p = realloc(p, 8192);
        free(p);
        free(q);
        done++;
    }
    *(long *)arg = done;
    return NULL;
}

long churn_in_threads(int nthreads, long each)
{
    pthread_t t[16];
    long counts[16];
    long total = 0;
    if (nthreads > 16)
        nthreads = 16;
    for (int i = 0; i < nthreads; i++) {
        counts[i] = each;
        pthread_create(&t[i], NULL, churn, &counts[i]);
    }
    for (int i = 0; i < nthreads; i++) {
        pthread_join(t[i], NULL);
        total += counts[i];
    }
    return total;
}
