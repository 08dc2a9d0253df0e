/*
 * cal_map — an open-addressing hash map from 64-bit keys to 32-bit values.
 *
 * Keys may repeat (the string table stores hashes and resolves collisions by
 * comparing the strings): cal_map_find walks every slot holding `key` in turn.
 * Memory comes from malloc; the map is not thread-safe (its owner protects it).
 */
#ifndef CAL_MAP_H
#define CAL_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct cal_map {
    uint64_t *keys;
    uint32_t *vals; /* UINT32_MAX marks an empty slot */
    size_t cap;     /* power of two, or 0 */
    size_t len;
} cal_map;

#define CAL_MAP_NONE UINT32_MAX

void cal_map_init(cal_map *m);
void cal_map_clear(cal_map *m); /* frees storage; the map stays usable */

/* Iterate the values stored under `key`: start with *cursor = 0; each call
   returns the next value or CAL_MAP_NONE when there are no more. */
uint32_t cal_map_find(const cal_map *m, uint64_t key, size_t *cursor);

/* The first value under `key`, or CAL_MAP_NONE. */
uint32_t cal_map_get(const cal_map *m, uint64_t key);

/* Add (key, val); val must not be CAL_MAP_NONE.  Duplicates are kept.
   On success return 0; on allocation failure return -1 (map unchanged). */
int cal_map_put(cal_map *m, uint64_t key, uint32_t val);

/* A good 64-bit mix for integer keys, and FNV-1a for byte strings. */
uint64_t cal_hash_u64(uint64_t x);
uint64_t cal_hash_bytes(const void *data, size_t n);

#endif
