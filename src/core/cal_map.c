/* cal_map — see cal_map.h.  Linear probing, load factor <= 1/2. */
#include "cal_map.h"

#include <stdlib.h>
#include <string.h>

void cal_map_init(cal_map *m) { memset(m, 0, sizeof(*m)); }

void cal_map_clear(cal_map *m)
{
    free(m->keys);
    free(m->vals);
    cal_map_init(m);
}

uint64_t cal_hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

uint64_t cal_hash_bytes(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint32_t cal_map_find(const cal_map *m, uint64_t key, size_t *cursor)
{
    if (m->cap == 0)
        return CAL_MAP_NONE;
    size_t mask = m->cap - 1;
    size_t i = (cal_hash_u64(key) + *cursor) & mask;
    while (m->vals[i] != CAL_MAP_NONE) {
        (*cursor)++;
        if (m->keys[i] == key)
            return m->vals[i];
        i = (i + 1) & mask;
    }
    return CAL_MAP_NONE;
}

uint32_t cal_map_get(const cal_map *m, uint64_t key)
{
    size_t cursor = 0;
    return cal_map_find(m, key, &cursor);
}

static void insert_slot(uint64_t *keys, uint32_t *vals, size_t cap, uint64_t key,
                        uint32_t val)
{
    size_t mask = cap - 1;
    size_t i = cal_hash_u64(key) & mask;
    while (vals[i] != CAL_MAP_NONE)
        i = (i + 1) & mask;
    keys[i] = key;
    vals[i] = val;
}

int cal_map_put(cal_map *m, uint64_t key, uint32_t val)
{
    if ((m->len + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        uint64_t *keys = malloc(cap * sizeof(*keys));
        uint32_t *vals = malloc(cap * sizeof(*vals));
        if (!keys || !vals) {
            free(keys);
            free(vals);
            return -1;
        }
        memset(vals, 0xff, cap * sizeof(*vals));
        for (size_t i = 0; i < m->cap; i++)
            if (m->vals[i] != CAL_MAP_NONE)
                insert_slot(keys, vals, cap, m->keys[i], m->vals[i]);
        free(m->keys);
        free(m->vals);
        m->keys = keys;
        m->vals = vals;
        m->cap = cap;
    }
    insert_slot(m->keys, m->vals, m->cap, key, val);
    m->len++;
    return 0;
}
