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
 *      (iteratively: an explicit stack and a cursor per node, so a chain of
 *      20M objects cannot overflow the C stack);
 *   2. in reverse preorder, each node's semidominator is the least
 *      semi[eval(v)] over its predecessors v, where eval (Lengauer-Tarjan's
 *      EVAL with path compression, iterative too) gives the vertex of least
 *      semidominator on the forest path above v; then the node is linked
 *      under its DFS parent;
 *   3. in preorder, idom(w) starts as w's DFS parent and climbs the
 *      already-final dominator tree while it is above semi(w): the nearest
 *      common ancestor of parent and semidominator.
 * Time O(E log N), in practice near linear; memory 28 bytes a node plus
 * the predecessor CSR (4 a node, 4 an edge), freed before the retained
 * sizes (8 a node) are allocated.
 * Retained sizes are then summed bottom-up in reverse preorder (a node's
 * dominator precedes it in preorder).
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

/* The graph is complete: give back the slack that growing by half left
   in each array (a quarter of them on average; the hash set stays, for
   lookups). */
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
    shrink((void **)&g->roots, &g->roots_cap, g->nroots, 4);
}

int cal_heapgraph_finish(cal_heapgraph *g, size_t first)
{
    while (g->expanded < g->n)
        cal_heapgraph_next(g);
    if (!g->off && grow((void **)&g->off, 1, 4))
        return -1;
    g->off[g->n] = (uint32_t)g->nedges;
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
    free(seen);
    free(queue);
    trim(g);
    return 0;
fail:
    free(seen);
    free(queue);
    return -1;
}

/* Lengauer-Tarjan's EVAL with path compression, iteratively: the vertex
   of least semi on the forest path from v up to (not including) its
   tree's root; v itself when v is a root.  `stack` holds m. */
static uint32_t eval(uint32_t v, uint32_t *ancestor, uint32_t *label,
                     const uint32_t *semi, uint32_t *stack)
{
    if (ancestor[v] == NONE)
        return v;
    size_t top = 0;
    for (uint32_t x = v; ancestor[ancestor[x]] != NONE; x = ancestor[x])
        stack[top++] = x;
    /* From the vertex nearest the root down to v: each takes its
       ancestor's label if smaller, and skips to its ancestor's ancestor. */
    while (top) {
        uint32_t x = stack[--top], a = ancestor[x];
        if (semi[label[a]] < semi[label[x]])
            label[x] = label[a];
        ancestor[x] = ancestor[a];
    }
    return label[v];
}

int cal_heapgraph_dominators(cal_heapgraph *g)
{
    size_t n = g->n, m1 = n + 1; /* preorder numbers: 0 the virtual root */
    int rc = -1;
    free(g->idom);
    free(g->retained);
    g->retained = NULL; /* allocated once the temporaries below are freed */
    g->idom = malloc((n ? n : 1) * sizeof *g->idom);
    uint32_t *pre = malloc((n ? n : 1) * sizeof *pre);
    uint32_t *vertex = malloc(m1 * 4), *parent = malloc(m1 * 4);
    uint32_t *semi = malloc(m1 * 4), *label = malloc(m1 * 4);
    uint32_t *ancestor = malloc(m1 * 4), *stack = malloc(m1 * 4);
    uint32_t *poff = calloc(n + 1, 4), *preds = malloc((g->nedges ? g->nedges : 1) * 4);
    if (!g->idom || !pre || !vertex || !parent || !semi || !label || !ancestor ||
        !stack || !poff || !preds)
        goto fail;

    /* 1. Depth-first preorder; semi holds each vertex's edge cursor. */
    memset(pre, 0xff, n * sizeof *pre);
    uint32_t m = 1;
    size_t top = 0;
    vertex[0] = NONE;
    parent[0] = 0;
    semi[0] = 0;
    stack[top++] = 0;
    while (top) {
        uint32_t t = stack[top - 1], v = vertex[t];
        const uint32_t *succ = t == 0 ? g->roots : g->edges + g->off[v];
        uint32_t len = t == 0 ? (uint32_t)g->nroots : g->off[v + 1] - g->off[v];
        uint32_t w = NONE;
        while (semi[t] < len && w == NONE) {
            uint32_t c = succ[semi[t]++];
            if (pre[c] == NONE)
                w = c;
        }
        if (w == NONE) {
            top--;
            continue;
        }
        pre[w] = m;
        vertex[m] = w;
        parent[m] = t;
        semi[m] = 0;
        stack[top++] = m++;
    }
    for (size_t r = 0; r < g->nroots; r++)
        if (pre[g->roots[r]] != NONE)
            pre[g->roots[r]] |= ROOT_BIT;

    /* Predecessors (reachable ones only), as CSR. */
    for (size_t v = 0; v < n; v++)
        if (pre[v] != NONE)
            for (uint32_t e = g->off[v]; e < g->off[v + 1]; e++)
                poff[g->edges[e] + 1]++;
    for (size_t v = 0; v < n; v++)
        poff[v + 1] += poff[v];
    uint32_t *fill = g->idom; /* scratch: next free slot per node */
    memcpy(fill, poff, n * 4);
    for (size_t v = 0; v < n; v++)
        if (pre[v] != NONE)
            for (uint32_t e = g->off[v]; e < g->off[v + 1]; e++)
                preds[fill[g->edges[e]]++] = (uint32_t)v;

    /* 2. Semidominators, in reverse preorder. */
    for (uint32_t i = 0; i < m; i++) {
        semi[i] = i;
        label[i] = i;
        ancestor[i] = NONE;
    }
    for (uint32_t i = m - 1; i >= 1; i--) {
        uint32_t w = vertex[i];
        uint32_t s = (pre[w] & ROOT_BIT) ? 0 : semi[i];
        for (uint32_t k = poff[w]; k < poff[w + 1] && s; k++) {
            uint32_t j = pre[preds[k]] & ~ROOT_BIT;
            uint32_t u = eval(j, ancestor, label, semi, stack);
            if (semi[u] < s)
                s = semi[u];
        }
        semi[i] = s;
        ancestor[i] = parent[i]; /* link */
    }

    /* 3. Immediate dominators (in parent[], in place), in preorder. */
    for (uint32_t i = 1; i < m; i++)
        while (parent[i] > semi[i])
            parent[i] = parent[parent[i]];

    /* The retained sizes need only vertex[] and parent[]: the rest goes
       first, so that the pass's peak is not the results' 8 bytes a node
       more. */
    free(pre);
    free(semi);
    free(label);
    free(ancestor);
    free(stack);
    free(poff);
    free(preds);
    pre = semi = label = ancestor = stack = poff = preds = NULL;
    g->retained = malloc((n ? n : 1) * sizeof *g->retained);
    if (!g->retained)
        goto fail;
    for (size_t v = 0; v < n; v++) {
        g->idom[v] = CAL_HEAP_NONE;
        g->retained[v] = 0;
    }
    for (uint32_t i = 1; i < m; i++) {
        uint32_t v = vertex[i];
        g->idom[v] = parent[i] == 0 ? CAL_HEAP_ROOT : vertex[parent[i]];
        g->retained[v] = g->size[v];
    }
    for (uint32_t i = m - 1; i >= 1; i--)
        if (parent[i] != 0)
            g->retained[vertex[parent[i]]] += g->retained[vertex[i]];
    rc = 0;

fail: /* rc is still -1: the results go too */
    free(pre);
    free(vertex);
    free(parent);
    free(semi);
    free(label);
    free(ancestor);
    free(stack);
    free(poff);
    free(preds);
    if (rc != 0) {
        free(g->idom);
        free(g->retained);
        g->idom = NULL;
        g->retained = NULL;
    }
    return rc;
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
