/*
 * cal_heapgraph — the heap scanner's graph and its analyses (see the
 * header).  Plain C, no Python, no globals; one owner at a time.
 *
 * HOW IT WORKS
 *
 * Storage.  Per node: its address (8 bytes), shallow size (8), type id
 * (4), edge offset (4) and 1.4 to 2.9 hash slots (4 each; the set keeps
 * at most 70% of its slots full, linear probing on a mixed address); per
 * edge, its target (4).  The scanner adds nodes as it discovers them and
 * expands them in that order, so the node array is its breadth-first
 * queue and the edges of node i are appended while i is expanded: the
 * CSR array is built in one pass, without sorting.
 *
 * Interning.  Most of the walk's time was two cache misses per edge, one
 * after the other: the target's hash slot, then the address of the node
 * the slot names (to compare).  The edges of a batch of nodes are
 * interned together (cal_heapgraph_add_batch), with each target's slot
 * prefetched 48 edges ahead and the address its slot names 16 ahead, so
 * that the misses overlap: the walk of 1.1M objects went from 0.29 s to
 * 0.17 s.  (A 32-bit fingerprint in each slot, so as not to read the
 * addresses of the other nodes a probe passes, saved 7% more for 7.6 more
 * bytes a node: not kept.)
 *
 * Dominators.  The semi-NCA algorithm (Georgiadis, Tarjan, Werneck,
 * "Finding dominators in practice", JGAA 10(1), 2006; the semidominator
 * theory of Lengauer and Tarjan, "A fast algorithm for finding dominators
 * in a flowgraph", TOPLAS 1(1), 1979):
 *   1. number the nodes in depth-first preorder from the virtual root
 *      (iteratively: a cursor per vertex, and the way back up is the DFS
 *      parent, so a chain of 20M objects cannot overflow the C stack);
 *   2. in reverse preorder, each vertex's semidominator is the least
 *      eval(v) over its predecessors v, where eval (Lengauer-Tarjan's
 *      EVAL with path compression, iterative too) gives the least
 *      semidominator on the forest path above v (the value, not the
 *      vertex holding it: only the value is read); then the vertex is
 *      linked under its DFS parent;
 *   3. in preorder, idom(w) starts as w's DFS parent and climbs the
 *      already-final dominator tree while it is above semi(w): the nearest
 *      common ancestor of parent and semidominator.
 * Time O(E log N), in practice near linear.  Retained sizes are then
 * summed bottom-up in reverse preorder (a node's dominator precedes it in
 * preorder).
 *
 * The pass's memory.  Its peak is the scanner's (docs/INTERNALS.md,
 * "Heap scanner"), so it holds four arrays of n + 1 indices and the
 * predecessors, and each array serves in turn:
 *   pre     node -> preorder number; in step 2 the forest's ancestors; at
 *           the end the idom result, by node;
 *   vertex  preorder number -> node, to the end;
 *   parent  DFS parents; in step 3 the idoms, by preorder number;
 *   poff    the DFS cursors; then the predecessors' offsets, by preorder
 *           number: once vertex i's predecessors are read, poff[i + 1]
 *           holds i's eval value (Lengauer-Tarjan's label);
 *   preds   the predecessors, as preorder numbers (the virtual root is
 *           each root's), one an edge and one a root: once read, their
 *           space holds the semidominators (every vertex has one
 *           predecessor at least, its DFS parent, so vertex i's slot,
 *           np - m + i, is among those read by then).
 * EVAL's stack is the path itself: its ancestor pointers reversed on the
 * way up, and set to the tree's root on the way down.  The predecessors
 * and offsets go before the idoms are written by node, and parent[]
 * before the retained sizes (8 a node) are allocated: 16 bytes a node and
 * 4 an edge at the most, on top of the graph (before: 36 a node and 4 an
 * edge, in nine arrays).
 *
 * Shortest paths are a breadth-first search from the virtual root.
 */
#include "cal_heapgraph.h"

#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX
#define ROOT_BIT 0x80000000u

void cal_heapgraph_init(cal_heapgraph *g) { memset(g, 0, sizeof *g); }

/* The slot an address hashes to: cal_hash_u64's mix (murmur3's
   finaliser), inlined here, where it runs once or more per edge. */
static inline size_t slot_of(uint64_t x, size_t mask)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (size_t)x & mask;
}

void cal_heapgraph_free(cal_heapgraph *g)
{
    free(g->addr);
    free(g->size);
    free(g->type);
    free(g->off);
    free(g->edges);
    free(g->roots);
    free(g->slots);
    free(g->idom);
    free(g->retained);
    cal_heapgraph_init(g);
}

size_t cal_heapgraph_bytes(const cal_heapgraph *g)
{
    size_t b = g->cap * (8 + 8 + 4 + 4) + 4 + g->edges_cap * 4 + g->roots_cap * 4 +
               g->slots_cap * 4;
    if (g->idom)
        b += g->n * 4;
    if (g->retained)
        b += g->n * 8;
    return b;
}

/* Count `extra` bytes of temporaries beside the arrays in the peak. */
static void note_peak(cal_heapgraph *g, size_t extra)
{
    size_t b = cal_heapgraph_bytes(g) + extra;
    if (b > g->peak)
        g->peak = b;
}

/* Grow a malloc'd array to `cap` elements of `elem` bytes.  0 or -1. */
static int grow(void **p, size_t cap, size_t elem)
{
    void *q = realloc(*p, cap * elem);
    if (!q)
        return -1;
    *p = q;
    return 0;
}

int64_t cal_heapgraph_lookup(const cal_heapgraph *g, uint64_t addr)
{
    if (!g->slots_cap)
        return -1;
    size_t mask = g->slots_cap - 1;
    for (size_t i = slot_of(addr, mask);; i = (i + 1) & mask) {
        uint32_t s = g->slots[i];
        if (!s)
            return -1;
        if (g->addr[s - 1] == addr)
            return s - 1;
    }
}

static int rehash(cal_heapgraph *g, size_t cap)
{
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    size_t mask = cap - 1;
    for (size_t k = 0; k < g->n; k++) {
        size_t i = slot_of(g->addr[k], mask);
        while (slots[i])
            i = (i + 1) & mask;
        slots[i] = (uint32_t)k + 1;
    }
    note_peak(g, cap * sizeof *slots); /* the old set and the new */
    free(g->slots);
    g->slots = slots;
    g->slots_cap = cap;
    return 0;
}

int cal_heapgraph_intern(cal_heapgraph *g, uint64_t addr, uint32_t *node, int *added)
{
    *added = 0;
    if ((g->n + 1) * 10 > g->slots_cap * 7 &&
        rehash(g, g->slots_cap ? 2 * g->slots_cap : 1024) != 0)
        return -1;
    size_t mask = g->slots_cap - 1, i = slot_of(addr, mask);
    for (;; i = (i + 1) & mask) {
        uint32_t s = g->slots[i];
        if (!s)
            break;
        if (g->addr[s - 1] == addr) {
            *node = s - 1;
            return 0;
        }
    }
    if (g->n >= CAL_HEAP_MAX_NODES)
        return -1;
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap + g->cap / 2 : 1024;
        if (grow((void **)&g->addr, cap, 8) || grow((void **)&g->size, cap, 8) ||
            grow((void **)&g->type, cap, 4) || grow((void **)&g->off, cap + 1, 4))
            return -1;
        g->cap = cap;
        note_peak(g, 0);
    }
    uint32_t k = (uint32_t)g->n++;
    g->addr[k] = addr;
    g->size[k] = 0;
    g->type[k] = 0;
    g->slots[i] = k + 1;
    *node = k;
    *added = 1;
    return 0;
}

int64_t cal_heapgraph_next(cal_heapgraph *g)
{
    if (g->expanded >= g->n)
        return -1;
    g->off[g->expanded] = (uint32_t)g->nedges;
    return (int64_t)g->expanded++;
}

int cal_heapgraph_edge(cal_heapgraph *g, uint32_t to)
{
    if (g->nedges == g->edges_cap) {
        size_t cap = g->edges_cap ? g->edges_cap + g->edges_cap / 2 : 4096;
        if (cap > UINT32_MAX)
            cap = UINT32_MAX;
        if (cap == g->nedges || grow((void **)&g->edges, cap, 4))
            return -1;
        g->edges_cap = cap;
        note_peak(g, 0);
    }
    g->edges[g->nedges++] = to;
    return 0;
}

/* Start the loads of what interning `addr` will read: its hash slot, and
   (once that slot has arrived: `deep`) the address of the node in it. */
static inline void prefetch_intern(const cal_heapgraph *g, uint64_t addr, int deep)
{
    if (!g->slots_cap)
        return;
    const uint32_t *slot = &g->slots[slot_of(addr, g->slots_cap - 1)];
    if (!deep)
        __builtin_prefetch(slot);
    else if (*slot)
        __builtin_prefetch(&g->addr[*slot - 1]);
}

/* How far ahead the batch prefetches: far enough for a miss to arrive
   (a few hundred cycles; an intern that hits the cache takes tens). */
#define AHEAD 48

int cal_heapgraph_add_batch(cal_heapgraph *g, size_t count, const uint32_t *deg,
                            const uint64_t *addrs)
{
    size_t total = 0, k = 0;
    for (size_t b = 0; b < count; b++)
        total += deg[b];
    for (size_t b = 0; b < count; b++) {
        if (cal_heapgraph_next(g) < 0)
            return -1;
        for (uint32_t d = 0; d < deg[b]; d++, k++) {
            if (k + AHEAD < total)
                prefetch_intern(g, addrs[k + AHEAD], 0);
            if (k + AHEAD / 3 < total)
                prefetch_intern(g, addrs[k + AHEAD / 3], 1);
            uint32_t node;
            int added;
            if (cal_heapgraph_intern(g, addrs[k], &node, &added) != 0 ||
                cal_heapgraph_edge(g, node) != 0)
                return -1;
        }
    }
    return 0;
}

int cal_heapgraph_add_root(cal_heapgraph *g, uint32_t node)
{
    if (g->nroots == g->roots_cap) {
        size_t cap = g->roots_cap ? 2 * g->roots_cap : 64;
        if (grow((void **)&g->roots, cap, 4))
            return -1;
        g->roots_cap = cap;
        note_peak(g, 0);
    }
    g->roots[g->nroots++] = node;
    return 0;
}

/* Mark in `seen` (one byte a node) what the roots from roots[from] on
   reach, breadth first; `queue` holds n.  Returns how many were new. */
static size_t reach(const cal_heapgraph *g, size_t from, uint8_t *seen, uint32_t *queue)
{
    size_t head = 0, tail = 0;
    for (size_t r = from; r < g->nroots; r++)
        if (!seen[g->roots[r]]) {
            seen[g->roots[r]] = 1;
            queue[tail++] = g->roots[r];
        }
    while (head < tail) {
        uint32_t v = queue[head++];
        for (uint32_t e = g->off[v]; e < g->off[v + 1]; e++) {
            uint32_t w = g->edges[e];
            if (!seen[w]) {
                seen[w] = 1;
                queue[tail++] = w;
            }
        }
    }
    return tail;
}

/* Shrink an array of `elem`-byte elements from *cap to n (n > 0): a
   failed shrink keeps the larger one. */
static void shrink(void **p, size_t *cap, size_t n, size_t elem)
{
    if (n == 0 || n >= *cap)
        return;
    void *q = realloc(*p, n * elem);
    if (q) {
        *p = q;
        *cap = n;
    }
}

/* The nodes and edges are complete: give back the slack that growing by
   half left in their arrays (a quarter of them on average; the hash set
   stays, for lookups).  The roots are trimmed once complete. */
static void trim(cal_heapgraph *g)
{
    size_t cap = g->cap, c;
    if (g->n && g->n < cap) {
        c = cap;
        shrink((void **)&g->addr, &c, g->n, 8);
        c = cap;
        shrink((void **)&g->size, &c, g->n, 8);
        c = cap;
        shrink((void **)&g->type, &c, g->n, 4);
        c = cap + 1;
        shrink((void **)&g->off, &c, g->n + 1, 4);
        g->cap = g->n; /* a failed shrink leaves more, never less */
    }
    shrink((void **)&g->edges, &g->edges_cap, g->nedges, 4);
}

int cal_heapgraph_finish(cal_heapgraph *g, size_t first)
{
    while (g->expanded < g->n)
        cal_heapgraph_next(g);
    if (!g->off && grow((void **)&g->off, 1, 4))
        return -1;
    g->off[g->n] = (uint32_t)g->nedges;
    trim(g); /* before the temporaries below, not on top of them */
    uint8_t *seen = calloc(g->n ? g->n : 1, 1);
    uint32_t *queue = malloc((g->n ? g->n : 1) * sizeof *queue);
    if (!seen || !queue)
        goto fail;
    /* Pointed at by another node: seen = 1 (self-edges do not count). */
    for (size_t v = 0; v < g->n; v++)
        for (uint32_t e = g->off[v]; e < g->off[v + 1]; e++)
            if (g->edges[e] != v)
                seen[g->edges[e]] = 1;
    for (size_t v = first; v < g->n; v++)
        if (!seen[v] && cal_heapgraph_add_root(g, (uint32_t)v) != 0)
            goto fail;
    memset(seen, 0, g->n);
    reach(g, 0, seen, queue);
    for (size_t v = 0; v < g->n; v++)
        if (!seen[v]) {
            if (cal_heapgraph_add_root(g, (uint32_t)v) != 0)
                goto fail;
            reach(g, g->nroots - 1, seen, queue);
        }
    note_peak(g, g->n * 5); /* seen[] and queue[] */
    free(seen);
    free(queue);
    shrink((void **)&g->roots, &g->roots_cap, g->nroots, 4);
    return 0;
fail:
    free(seen);
    free(queue);
    return -1;
}

/* The analysis's temporary arrays: malloc'd, and counted in *tmp and in
   the graph's peak while they live. */
static void *tmp_alloc(cal_heapgraph *g, size_t *tmp, size_t count, size_t elem)
{
    void *p = malloc((count ? count : 1) * elem);
    if (p) {
        *tmp += count * elem;
        note_peak(g, *tmp);
    }
    return p;
}

static void tmp_free(size_t *tmp, void *p, size_t count, size_t elem)
{
    if (p)
        *tmp -= count * elem;
    free(p);
}

/* Lengauer-Tarjan's EVAL with path compression, for a vertex j linked
   into the forest (j > i, the vertex being processed: the vertices are
   linked in reverse preorder, so "linked" is "after i").  It returns the
   least semidominator on the forest path from j up to, not including,
   its tree's root, and compresses the path: each vertex on it then points
   at that root.  best[x] is the least semidominator of the vertices from
   x up to, not including, ancestor[x] (Lengauer-Tarjan's label, as its
   value).  The path is walked up with its ancestor pointers reversed, and
   down again along them, so that no stack is needed. */
static uint32_t eval(uint32_t j, uint32_t i, uint32_t *ancestor, uint32_t *best)
{
    uint32_t x = j, below = NONE;
    while (ancestor[x] > i) { /* x's ancestor is linked: climb */
        uint32_t a = ancestor[x];
        ancestor[x] = below;
        below = x;
        x = a;
    }
    /* x is the last linked vertex of the path; root, its tree's root. */
    uint32_t root = ancestor[x], above = best[x];
    while (below != NONE) {
        uint32_t y = below;
        below = ancestor[y];
        if (above < best[y])
            best[y] = above;
        above = best[y];
        ancestor[y] = root;
    }
    return above;
}

int cal_heapgraph_dominators(cal_heapgraph *g)
{
    size_t n = g->n, tmp = 0, npreds = g->nedges + g->nroots;
    uint32_t m = 1; /* preorder numbers: 0 the virtual root */
    free(g->idom);
    free(g->retained);
    g->idom = NULL;
    g->retained = NULL;
    if (npreds > UINT32_MAX)
        return -1;
    /* Four arrays of n + 1 indices and the predecessors (one index an edge
       and one a root) are all the pass holds at once: see the header
       comment for what each holds in turn. */
    uint32_t *pre = tmp_alloc(g, &tmp, n + 1, 4);
    uint32_t *vertex = tmp_alloc(g, &tmp, n + 1, 4);
    uint32_t *parent = tmp_alloc(g, &tmp, n + 1, 4);
    uint32_t *poff = tmp_alloc(g, &tmp, n + 2, 4);
    uint32_t *preds = NULL;
    uint64_t *retained = NULL;
    if (!pre || !vertex || !parent || !poff)
        goto fail;

    /* 1. Depth-first preorder, from the virtual root: poff[t] is vertex
       t's cursor in its successors, and the path back is parent[]. */
    uint32_t *cursor = poff;
    memset(pre, 0xff, n * sizeof *pre);
    vertex[0] = NONE;
    parent[0] = 0;
    cursor[0] = 0;
    for (uint32_t t = 0;;) {
        uint32_t v = vertex[t];
        const uint32_t *succ = t == 0 ? g->roots : g->edges + g->off[v];
        uint32_t len = t == 0 ? (uint32_t)g->nroots : g->off[v + 1] - g->off[v];
        uint32_t w = NONE;
        while (cursor[t] < len && w == NONE) {
            uint32_t c = succ[cursor[t]++];
            if (pre[c] == NONE)
                w = c;
        }
        if (w != NONE) {
            pre[w] = m;
            vertex[m] = w;
            parent[m] = t;
            cursor[m] = 0;
            t = m++;
        } else if (t != 0) {
            t = parent[t];
        } else {
            break;
        }
    }

    /* Predecessors by preorder number, as CSR: the virtual root is one of
       each root's.  Counted into poff[t], summed, then each written at
       --poff[t], so that poff[t] ends as the start of t's and poff[t + 1]
       as its end. */
    memset(poff, 0, ((size_t)m + 1) * sizeof *poff);
    for (size_t r = 0; r < g->nroots; r++)
        poff[pre[g->roots[r]]]++;
    for (size_t v = 0; v < n; v++)
        if (pre[v] != NONE)
            for (uint32_t e = g->off[v]; e < g->off[v + 1]; e++)
                poff[pre[g->edges[e]]]++;
    for (uint32_t t = 1; t < m; t++)
        poff[t] += poff[t - 1];
    uint32_t np = poff[m - 1];
    poff[m] = np;
    preds = tmp_alloc(g, &tmp, np, 4);
    if (!preds)
        goto fail;
    for (size_t r = 0; r < g->nroots; r++)
        preds[--poff[pre[g->roots[r]]]] = 0;
    for (size_t v = 0; v < n; v++)
        if (pre[v] != NONE)
            for (uint32_t e = g->off[v]; e < g->off[v + 1]; e++)
                preds[--poff[pre[g->edges[e]]]] = pre[v];

    /* 2. Semidominators, in reverse preorder.  Vertex i's predecessors
       are read once, when i is processed; after, that part of preds and
       poff[i + 1] are free, and hold i's semidominator (at
       preds[np - m + i]: every vertex but the virtual root has a
       predecessor, its DFS parent, so that slot is past poff[i]) and
       best(i) (at poff[i + 1]).  pre[] is done with: it holds the
       ancestors in the forest (read only for linked vertices). */
    uint32_t *ancestor = pre, *best = poff + 1;
    size_t semi = (size_t)np - m; /* i's at preds[semi + i] (mod 2^64) */
    for (uint32_t i = m - 1; i >= 1; i--) {
        uint32_t s = i;
        for (uint32_t k = poff[i], end = poff[i + 1]; k < end && s; k++) {
            uint32_t j = preds[k];
            uint32_t u = j > i ? eval(j, i, ancestor, best) : j;
            if (u < s)
                s = u;
        }
        preds[semi + i] = s;
        best[i] = s;
        ancestor[i] = parent[i]; /* link */
    }

    /* 3. Immediate dominators (in parent[], in place), in preorder. */
    for (uint32_t i = 1; i < m; i++)
        while (parent[i] > preds[semi + i])
            parent[i] = parent[parent[i]];

    /* The results, by node: idom takes pre[]'s array, and the retained
       sizes are allocated once only vertex[] is left beside it. */
    tmp_free(&tmp, preds, np, 4);
    tmp_free(&tmp, poff, n + 2, 4);
    preds = poff = NULL;
    uint32_t *idom = pre;
    for (size_t v = 0; v < n; v++)
        idom[v] = CAL_HEAP_NONE;
    for (uint32_t i = 1; i < m; i++)
        idom[vertex[i]] = parent[i] == 0 ? CAL_HEAP_ROOT : vertex[parent[i]];
    tmp_free(&tmp, parent, n + 1, 4);
    parent = NULL;
    retained = tmp_alloc(g, &tmp, n, 8);
    if (!retained)
        goto fail;
    memset(retained, 0, n * sizeof *retained);
    for (uint32_t i = 1; i < m; i++)
        retained[vertex[i]] = g->size[vertex[i]];
    for (uint32_t i = m - 1; i >= 1; i--) {
        uint32_t v = vertex[i];
        if (idom[v] != CAL_HEAP_ROOT)
            retained[idom[v]] += retained[v];
    }
    free(vertex);
    if (n) {
        uint32_t *fit = realloc(idom, n * sizeof *idom); /* drop the n + 1th */
        if (fit)
            idom = fit;
    }
    g->idom = idom;
    g->retained = retained;
    return 0;

fail:
    free(pre);
    free(vertex);
    free(parent);
    free(poff);
    free(preds);
    free(retained);
    return -1;
}

int cal_heapgraph_path(const cal_heapgraph *g, uint32_t target, uint32_t **path,
                       size_t *len)
{
    *path = NULL;
    *len = 0;
    if (target >= g->n)
        return 0;
    uint32_t *from = malloc(g->n * sizeof *from), *queue = malloc(g->n * sizeof *queue);
    if (!from || !queue) {
        free(from);
        free(queue);
        return -1;
    }
    memset(from, 0xff, g->n * sizeof *from);
    size_t head = 0, tail = 0;
    for (size_t r = 0; r < g->nroots; r++)
        if (from[g->roots[r]] == NONE) {
            from[g->roots[r]] = CAL_HEAP_NONE; /* a root: where paths begin */
            queue[tail++] = g->roots[r];
        }
    int found = from[target] != NONE;
    while (head < tail && !found) {
        uint32_t v = queue[head++];
        for (uint32_t e = g->off[v]; e < g->off[v + 1]; e++) {
            uint32_t w = g->edges[e];
            if (from[w] == NONE) {
                from[w] = v;
                queue[tail++] = w;
                if (w == target) {
                    found = 1;
                    break;
                }
            }
        }
    }
    int rc = 0;
    if (found) {
        size_t k = 1;
        for (uint32_t v = target; from[v] != CAL_HEAP_NONE; v = from[v])
            k++;
        uint32_t *p = malloc(k * sizeof *p);
        if (p) {
            size_t i = k;
            for (uint32_t v = target;; v = from[v]) {
                p[--i] = v;
                if (from[v] == CAL_HEAP_NONE)
                    break;
            }
            *path = p;
            *len = k;
        } else {
            rc = -1;
        }
    }
    free(from);
    free(queue);
    return rc;
}

int cal_heapgraph_by_type(const cal_heapgraph *g, uint32_t ntypes, uint64_t *count,
                          uint64_t *size, uint64_t *retained)
{
    memset(count, 0, ntypes * sizeof *count);
    memset(size, 0, ntypes * sizeof *size);
    for (size_t v = 0; v < g->n; v++) {
        uint32_t t = g->type[v];
        if (t < ntypes) {
            count[t]++;
            size[t] += g->size[v];
        }
    }
    if (!retained)
        return 0;
    memset(retained, 0, ntypes * sizeof *retained);
    if (!g->idom)
        return 0;
    /* A node counts for its type unless a strict dominator of it has the
       same type (its bytes are in that one's already): a depth-first walk
       of the dominator tree, iterative, with a count per type of the
       nodes of that type on the current path. */
    size_t n = g->n;
    uint32_t *coff = calloc(n + 2, sizeof *coff), *kids = malloc((n ? n : 1) * 4);
    uint32_t *stack = malloc((n + 1) * sizeof *stack), *cursor = malloc((n + 1) * 4);
    uint32_t *active = calloc(ntypes ? ntypes : 1, sizeof *active);
    if (!coff || !kids || !stack || !cursor || !active) {
        free(coff);
        free(kids);
        free(stack);
        free(cursor);
        free(active);
        return -1;
    }
    /* Children CSR; index n stands for the virtual root. */
    for (size_t v = 0; v < n; v++)
        if (g->idom[v] != CAL_HEAP_NONE)
            coff[(g->idom[v] == CAL_HEAP_ROOT ? n : g->idom[v]) + 1]++;
    for (size_t v = 0; v <= n; v++)
        coff[v + 1] += coff[v];
    uint32_t *fill = cursor; /* scratch before the walk */
    memcpy(fill, coff, (n + 1) * 4);
    for (size_t v = 0; v < n; v++)
        if (g->idom[v] != CAL_HEAP_NONE)
            kids[fill[g->idom[v] == CAL_HEAP_ROOT ? n : g->idom[v]]++] = (uint32_t)v;
    size_t top = 0;
    stack[top] = (uint32_t)n;
    cursor[top++] = coff[n];
    while (top) {
        uint32_t v = stack[top - 1];
        if (cursor[top - 1] < coff[v + 1]) {
            uint32_t w = kids[cursor[top - 1]++], t = g->type[w];
            if (t < ntypes) {
                if (!active[t])
                    retained[t] += g->retained[w];
                active[t]++;
            }
            stack[top] = w;
            cursor[top++] = coff[w];
            continue;
        }
        top--;
        if (v != n && g->type[v] < ntypes)
            active[g->type[v]]--;
    }
    free(coff);
    free(kids);
    free(stack);
    free(cursor);
    free(active);
    return 0;
}

/* Sift-down for a min-heap of node indices keyed by key(). */
static uint64_t key_of(const cal_heapgraph *g, int by_retained, uint32_t v)
{
    return by_retained ? g->retained[v] : g->size[v];
}

static int less(const cal_heapgraph *g, int r, uint32_t a, uint32_t b)
{
    uint64_t ka = key_of(g, r, a), kb = key_of(g, r, b);
    return ka < kb || (ka == kb && a > b);
}

static void sift_down(const cal_heapgraph *g, int r, uint32_t *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, s = i;
        if (l < n && less(g, r, h[l], h[s]))
            s = l;
        if (l + 1 < n && less(g, r, h[l + 1], h[s]))
            s = l + 1;
        if (s == i)
            return;
        uint32_t t = h[i];
        h[i] = h[s];
        h[s] = t;
        i = s;
    }
}

size_t cal_heapgraph_largest(const cal_heapgraph *g, size_t k, int by_retained,
                             uint32_t *out)
{
    if (by_retained && !g->retained)
        return 0;
    size_t n = 0;
    for (size_t v = 0; v < g->n && k; v++) {
        if (g->type[v] & CAL_HEAP_MERGED)
            continue;
        if (n < k) {
            out[n++] = (uint32_t)v;
            if (n == k)
                for (size_t i = k / 2 + 1; i-- > 0;)
                    sift_down(g, by_retained, out, n, i);
        } else if (less(g, by_retained, out[0], (uint32_t)v)) {
            out[0] = (uint32_t)v;
            sift_down(g, by_retained, out, n, 0);
        }
    }
    if (n < k)
        for (size_t i = n / 2 + 1; i-- > 0;)
            sift_down(g, by_retained, out, n, i);
    /* Pop the heap: smallest to the end, so out ends largest first. */
    for (size_t end = n; end > 1; end--) {
        uint32_t t = out[0];
        out[0] = out[end - 1];
        out[end - 1] = t;
        sift_down(g, by_retained, out, end - 1, 0);
    }
    return n;
}
