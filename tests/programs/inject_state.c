/* For test_attach.py's injection test: a loop whose values live in vector
   and general registers all along (any register of the main thread not
   put back as it was changes its result), and a raw read(2) that shows an
   EINTR Python's own calls would retry. */
#include <errno.h>
#include <unistd.h>

typedef double v4 __attribute__((vector_size(32)));

double spin(long n)
{
    v4 a = {1.0, 2.0, 3.0, 4.0}, b = {0.5, 0.25, 0.125, 0.0625};
    unsigned long x = 88172645463325252ul;
    for (long i = 0; i < n; i++) {
        a = a * 0.9999999 + b;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b = b + (double)(x & 0xff) * 1e-12;
    }
    return a[0] + a[1] + a[2] + a[3] + (double)(x & 0xffff);
}

long read_one(int fd)
{
    char c;
    long r = read(fd, &c, 1);
    return r < 0 ? -errno : r;
}
