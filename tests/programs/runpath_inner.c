/* The library runpath_outer.c opens by its bare name. */
#include <stdlib.h>
#include <string.h>

void *grab(size_t n)
{
    void *p = malloc(n);
    if (p)
        memset(p, 1, n);
    return p;
}
