/* cal_utf8 — see cal_utf8.h. */
#include "cal_utf8.h"

size_t cal_utf8_decode(const char *s, size_t avail, uint32_t *cp)
{
    const unsigned char *p = (const unsigned char *)s;
    if (avail == 0)
        return 0;
    uint32_t c = p[0];
    size_t n;
    uint32_t min;
    if (c < 0x80) {
        n = 1;
        min = 0;
    } else if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        min = 0x10000;
    } else {
        return 0; /* a continuation byte, C0/C1 (always overlong), F5-FF */
    }
    if (n > 1)
        c &= 0x7Fu >> n;
    for (size_t i = 1; i < n; i++) {
        if (i >= avail || (p[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (p[i] & 0x3Fu);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    if (cp)
        *cp = c;
    return n;
}

size_t cal_utf8_encode(char *d, uint32_t cp)
{
    if (cp < 0x80) {
        d[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (char)(0xC0 | (cp >> 6));
        d[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (char)(0xE0 | (cp >> 12));
        d[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        d[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (char)(0xF0 | (cp >> 18));
    d[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    d[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    d[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
