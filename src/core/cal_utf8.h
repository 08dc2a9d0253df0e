/*
 * cal_utf8 — UTF-8 as calipers reads and writes it, defined once: the JSON
 * writer and reader (where what is not UTF-8 becomes U+FFFD, byte by
 * byte) and the reports' test for controls (cal_view_control) all decode
 * with cal_utf8_decode.  Valid is RFC 3629's: the shortest form only, no
 * surrogates (U+D800-U+DFFF), nothing above U+10FFFF.
 *
 * Pure functions: no state, no allocation.
 */
#ifndef CAL_UTF8_H
#define CAL_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* What stands for a byte that is not UTF-8. */
#define CAL_UTF8_REPLACEMENT 0xFFFD

/* The length (1 to 4) of the valid UTF-8 sequence at p, with its code
   point in *cp unless cp is NULL; 0 if none starts there (a continuation
   byte, an overlong form, a surrogate, a code point above U+10FFFF, a
   sequence cut short).  Reads at most `avail` bytes, and none after the
   first that does not continue the sequence: text that ends with a NUL
   may pass 4. */
size_t cal_utf8_decode(const char *p, size_t avail, uint32_t *cp);

/* Write the code point cp (at most U+10FFFF) as UTF-8 at d, which has room
   for 4 bytes; return its length. */
size_t cal_utf8_encode(char *d, uint32_t cp);

#endif
