/*
 * test_heapgraph — unit tests of src/core/cal_heapgraph.c, with their own
 * main (make test-c and test-sanitize build and run them beside
 * test_core).  The dominators, retained sizes, type totals and paths of
 * random graphs with cycles are compared with brute-force definitions:
 * d dominates v when v is unreachable from the roots once d is removed.
 * Heap dump files (cal_heapfile): a round trip, every truncation, and
 * random byte mutations (under the sanitizers in make test-sanitize).
 */
#include "cal_binfile.h"
#include "cal_heapfile.h"
#include "cal_heapgraph.h"
#include "cal_rand.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failures;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
            failures++;                                                                \
        } else {                                                                       \
            passed++;                                                                  \
        }                                                                              \
    } while (0)

/* A random graph of n nodes: BFS-ordered building as the scanner does it
   (node i's edges added when i is expanded), edges to random targets. */
typedef struct spec {
    size_t n;
    uint32_t *deg, *to; /* to: n * 6 */
    uint64_t *size;
    uint32_t *type;
} spec;

static void build(cal_heapgraph *g, const spec *s, size_t nexplicit)
{
    cal_heapgraph_init(g);
    for (size_t i = 0; i < s->n; i++) {
        uint32_t node;
        int added;
        CHECK(cal_heapgraph_intern(g, 0x1000 + 16 * (uint64_t)i, &node, &added) == 0);
        CHECK(added && node == i);
        g->size[node] = s->size[i];
        g->type[node] = s->type[i];
    }
    for (size_t r = 0; r < nexplicit; r++)
        CHECK(cal_heapgraph_add_root(g, (uint32_t)r) == 0);
    int64_t v;
    while ((v = cal_heapgraph_next(g)) >= 0)
        for (uint32_t k = 0; k < s->deg[v]; k++)
            CHECK(cal_heapgraph_edge(g, s->to[v * 6 + k]) == 0);
    CHECK(cal_heapgraph_finish(g, nexplicit) == 0);
}

/* Reachable from the roots with node `skip` removed (n: none removed). */
static void reach_without(const cal_heapgraph *g, size_t skip, uint8_t *seen)
{
    uint32_t *queue = malloc(g->n * sizeof *queue + 4);
    size_t head = 0, tail = 0;
    memset(seen, 0, g->n);
    for (size_t r = 0; r < g->nroots; r++) {
        uint32_t x = g->roots[r];
        if (x != skip && !seen[x]) {
            seen[x] = 1;
            queue[tail++] = x;
        }
    }
    while (head < tail) {
        uint32_t v = queue[head++];
        for (uint32_t e = g->off[v]; e < g->off[v + 1]; e++) {
            uint32_t w = g->edges[e];
            if (w != skip && !seen[w]) {
                seen[w] = 1;
                queue[tail++] = w;
            }
        }
    }
    free(queue);
}

static void check_against_brute_force(cal_heapgraph *g, uint32_t ntypes)
{
    size_t n = g->n;
    uint8_t *all = malloc(n + 1), *seen = malloc(n + 1);
    uint8_t *dom = calloc(n * n + 1, 1); /* dom[d * n + v]: d dominates v */
    reach_without(g, n, all);
    for (size_t v = 0; v < n; v++)
        CHECK(all[v]); /* finish() made every node reachable */
    for (size_t d = 0; d < n; d++) {
        reach_without(g, d, seen);
        for (size_t v = 0; v < n; v++)
            dom[d * n + v] = v == d || (all[v] && !seen[v]);
    }
    /* The pass's own peak: 16 bytes a node, 4 an edge and 4 a root above
       the graph, results included (cal_heapgraph.c, "The pass's
       memory"), counted by the graph. */
    size_t before = cal_heapgraph_bytes(g);
    g->peak = 0;
    CHECK(cal_heapgraph_dominators(g) == 0);
    CHECK(g->peak >= cal_heapgraph_bytes(g));
    CHECK(g->peak <= before + 16 * n + 20 + 4 * (g->nedges + g->nroots));
    for (size_t v = 0; v < n; v++) {
        /* idom: the strict dominator every other strict dominator dominates */
        uint32_t want = CAL_HEAP_ROOT;
        for (size_t d = 0; d < n; d++) {
            if (d == v || !dom[d * n + v])
                continue;
            int nearest = 1;
            for (size_t e = 0; e < n; e++)
                if (e != v && e != d && dom[e * n + v] && !dom[e * n + d])
                    nearest = 0;
            if (nearest)
                want = (uint32_t)d;
        }
        CHECK(g->idom[v] == want);
        uint64_t ret = 0;
        for (size_t w = 0; w < n; w++)
            if (dom[v * n + w])
                ret += g->size[w];
        CHECK(g->retained[v] == ret);
    }
    /* Type totals: retained by a type = bytes of the nodes some node of
       that type dominates (or is). */
    uint64_t *count = calloc(ntypes, 8), *size = calloc(ntypes, 8);
    uint64_t *ret = calloc(ntypes, 8);
    CHECK(cal_heapgraph_by_type(g, ntypes, count, size, ret) == 0);
    for (uint32_t t = 0; t < ntypes; t++) {
        uint64_t c = 0, s = 0, r = 0;
        for (size_t w = 0; w < n; w++) {
            if (g->type[w] == t) {
                c++;
                s += g->size[w];
            }
            int held = 0;
            for (size_t d = 0; d < n && !held; d++)
                held = g->type[d] == t && dom[d * n + w];
            if (held)
                r += g->size[w];
        }
        CHECK(count[t] == c && size[t] == s && ret[t] == r);
    }
    /* Paths: real edges, a root first, as short as a plain BFS says. */
    for (size_t v = 0; v < n; v++) {
        uint32_t *path;
        size_t len;
        CHECK(cal_heapgraph_path(g, (uint32_t)v, &path, &len) == 0);
        CHECK(len >= 1 && path[len - 1] == v);
        int isroot = 0;
        for (size_t r = 0; r < g->nroots; r++)
            isroot |= g->roots[r] == path[0];
        CHECK(isroot);
        for (size_t k = 0; k + 1 < len; k++) {
            int edge = 0;
            for (uint32_t e = g->off[path[k]]; e < g->off[path[k] + 1]; e++)
                edge |= g->edges[e] == path[k + 1];
            CHECK(edge);
        }
        /* distance by brute force: layers from the roots */
        size_t dist = 0;
        uint8_t *layer = calloc(n, 1), *next = calloc(n, 1);
        for (size_t r = 0; r < g->nroots; r++)
            layer[g->roots[r]] = 1;
        while (!layer[v]) {
            memcpy(next, layer, n);
            for (size_t u = 0; u < n; u++)
                if (layer[u])
                    for (uint32_t e = g->off[u]; e < g->off[u + 1]; e++)
                        next[g->edges[e]] = 1;
            memcpy(layer, next, n);
            dist++;
        }
        CHECK(len == dist + 1);
        free(layer);
        free(next);
        free(path);
    }
    /* Largest: by retained, non-increasing, and nothing left out beats the last. */
    uint32_t top[5];
    size_t k = cal_heapgraph_largest(g, 5, 1, top);
    CHECK(k == (n < 5 ? n : 5));
    for (size_t i = 0; i + 1 < k; i++)
        CHECK(g->retained[top[i]] >= g->retained[top[i + 1]]);
    for (size_t v = 0; v < n && k == 5; v++) {
        int in = 0;
        for (size_t i = 0; i < k; i++)
            in |= top[i] == v;
        CHECK(in || g->retained[v] <= g->retained[top[k - 1]]);
    }
    free(count);
    free(size);
    free(ret);
    free(all);
    free(seen);
    free(dom);
}

static void test_random_graphs(void)
{
    cal_rand r;
    cal_rand_seed(&r, 23);
    for (int round = 0; round < 300; round++) {
        spec s;
        s.n = 1 + cal_rand_next(&r) % 40;
        s.deg = calloc(s.n, 4);
        s.to = calloc(s.n * 6, 4);
        s.size = calloc(s.n, 8);
        s.type = calloc(s.n, 4);
        for (size_t i = 0; i < s.n; i++) {
            s.deg[i] = (uint32_t)(cal_rand_next(&r) % (round % 3 == 0 ? 3 : 6));
            for (uint32_t k = 0; k < s.deg[i]; k++)
                s.to[i * 6 + k] = (uint32_t)(cal_rand_next(&r) % s.n);
            s.size[i] = 1 + cal_rand_next(&r) % 1000;
            s.type[i] = (uint32_t)(cal_rand_next(&r) % 4);
        }
        size_t nexplicit = cal_rand_next(&r) % 3;
        if (nexplicit > s.n)
            nexplicit = s.n;
        cal_heapgraph g;
        build(&g, &s, nexplicit);
        CHECK(g.n == s.n);
        for (size_t i = 0; i < s.n; i++)
            CHECK(cal_heapgraph_lookup(&g, 0x1000 + 16 * (uint64_t)i) == (int64_t)i);
        CHECK(cal_heapgraph_lookup(&g, 0x1008) == -1);
        check_against_brute_force(&g, 4);
        cal_heapgraph_free(&g);
        free(s.deg);
        free(s.to);
        free(s.size);
        free(s.type);
    }
}

/* A chain 0 -> 1 -> ... -> n-1 with a back edge: deep enough that a
   recursive DFS or EVAL would overflow the C stack. */
static void test_deep_chain(void)
{
    size_t n = 2000000;
    cal_heapgraph g;
    cal_heapgraph_init(&g);
    for (size_t i = 0; i < n; i++) {
        uint32_t node;
        int added;
        CHECK(cal_heapgraph_intern(&g, 8 * (uint64_t)(i + 1), &node, &added) == 0);
        g.size[node] = 2;
        g.type[node] = (uint32_t)(i & 1);
    }
    CHECK(cal_heapgraph_add_root(&g, 0) == 0);
    int64_t v;
    while ((v = cal_heapgraph_next(&g)) >= 0) {
        if ((size_t)v + 1 < n)
            CHECK(cal_heapgraph_edge(&g, (uint32_t)v + 1) == 0);
        if (v % 1000 == 999)
            CHECK(cal_heapgraph_edge(&g, (uint32_t)v - 500) == 0);
    }
    CHECK(cal_heapgraph_finish(&g, 1) == 0);
    CHECK(g.nroots == 1);
    CHECK(cal_heapgraph_dominators(&g) == 0);
    CHECK(g.idom[0] == CAL_HEAP_ROOT && g.idom[n - 1] == n - 2);
    CHECK(g.retained[0] == 2 * n && g.retained[n - 1] == 2);
    uint64_t count[2], size[2], ret[2];
    CHECK(cal_heapgraph_by_type(&g, 2, count, size, ret) == 0);
    CHECK(count[0] == n / 2 && ret[0] == 2 * n && ret[1] == 2 * n - 2);
    uint32_t *path;
    size_t len;
    CHECK(cal_heapgraph_path(&g, (uint32_t)n - 1, &path, &len) == 0);
    CHECK(len == n && path[0] == 0);
    free(path);
    cal_heapgraph_free(&g);
}

/* Roots completed by finish(): unreferenced nodes after `first`, then one
   node per cycle nothing reaches. */
static void test_finish_roots(void)
{
    cal_heapgraph g;
    cal_heapgraph_init(&g);
    uint32_t node;
    int added;
    for (uint64_t a = 1; a <= 6; a++)
        CHECK(cal_heapgraph_intern(&g, a, &node, &added) == 0 && added);
    CHECK(cal_heapgraph_intern(&g, 3, &node, &added) == 0 && !added && node == 2);
    CHECK(cal_heapgraph_add_root(&g, 0) == 0);
    /* 0 -> 1; 2 (unreferenced) -> 3; 4 <-> 5 (a cycle alone), 5 -> 5 */
    const int to[6][2] = {{1, -1}, {-1, -1}, {3, -1}, {-1, -1}, {5, -1}, {4, 5}};
    int64_t v;
    while ((v = cal_heapgraph_next(&g)) >= 0)
        for (int k = 0; k < 2; k++)
            if (to[v][k] >= 0)
                CHECK(cal_heapgraph_edge(&g, (uint32_t)to[v][k]) == 0);
    CHECK(cal_heapgraph_finish(&g, 2) == 0);
    CHECK(g.nroots == 3 && g.roots[0] == 0 && g.roots[1] == 2 && g.roots[2] == 4);
    cal_heapgraph_free(&g);
}

/* A file's view of graph g: type names "t0".."t3", node 1 named, every
   third node sampled at one of two lines. */
static void file_of(cal_heapgraph *g, cal_heapfile *f, char **strings)
{
    static uint32_t types[4] = {0, 1, 2, 3}, names[2] = {1, 4}, lines[4] = {5, 7, 5, 9};
    cal_heapfile_init(f);
    f->meta_json = "{\"k\": [1, 2]}";
    f->strings = strings;
    f->nstrings = 6;
    f->types = types;
    f->ntypes = 4;
    f->g = *g;
    f->names = names;
    f->nnames = g->n > 1;
    f->lines = lines;
    f->nlines = 2;
    f->line_of = calloc(g->n, 4);
    for (size_t v = 0; v < g->n; v += 3)
        f->line_of[v] = 1 + (uint32_t)(v & 1);
}

static void test_heapfile(void)
{
    cal_rand r;
    cal_rand_seed(&r, 7);
    char *strings[6] = {"t0", "t1", "t2", "t3", "name", "f.py"};
    spec s = {30, calloc(30, 4), calloc(30 * 6, 4), calloc(30, 8), calloc(30, 4)};
    for (size_t i = 0; i < s.n; i++) {
        s.deg[i] = (uint32_t)(cal_rand_next(&r) % 4);
        for (uint32_t k = 0; k < s.deg[i]; k++)
            s.to[i * 6 + k] = (uint32_t)(cal_rand_next(&r) % s.n);
        s.size[i] = 1 + cal_rand_next(&r) % 100;
        s.type[i] = (uint32_t)(cal_rand_next(&r) % 4) | (i == 5 ? CAL_HEAP_MERGED : 0);
    }
    cal_heapgraph g;
    build(&g, &s, 1);
    cal_heapfile f;
    file_of(&g, &f, strings);
    cal_buf b;
    CHECK(cal_heapfile_encode(&f, &b) == 0);
    free(f.line_of);
    /* Round trip: the same graph, and the same bytes again. */
    cal_heapfile d;
    char err[512];
    CHECK(cal_heapfile_decode(b.data, b.len, &d, err, sizeof err) == 0);
    CHECK(d.g.n == g.n && d.g.nedges == g.nedges && d.g.nroots == g.nroots);
    CHECK(memcmp(d.g.edges, g.edges, g.nedges * 4) == 0);
    CHECK(memcmp(d.g.off, g.off, (g.n + 1) * 4) == 0);
    CHECK(memcmp(d.g.size, g.size, g.n * 8) == 0 &&
          memcmp(d.g.type, g.type, g.n * 4) == 0);
    CHECK(d.nnames == 1 && d.names[0] == 1 &&
          strcmp(d.strings[d.names[1]], "name") == 0);
    CHECK(d.line_of && d.line_of[3] == 2 && d.line_of[1] == 0);
    CHECK(strcmp(d.meta_json, "{\"k\": [1, 2]}") == 0);
    cal_buf again;
    CHECK(cal_heapfile_encode(&d, &again) == 0);
    CHECK(again.len == b.len && memcmp(again.data, b.data, b.len) == 0);
    cal_buf_free(&again);
    cal_heapfile_free(&d);
    /* Every truncation is refused, in one line. */
    for (size_t n = 0; n < b.len; n++) {
        CHECK(cal_heapfile_decode(b.data, n, &d, err, sizeof err) == -1);
        CHECK(strstr(err, "truncated") || strstr(err, "not a calipers heap dump"));
        CHECK(!strchr(err, '\n') && d.g.n == 0);
    }
    /* Mutations, half of them with the checksum made right: refused with a
       reason, or a heap that encodes and decodes again. */
    char *m = malloc(b.len);
    int accepted = 0;
    for (int round = 0; round < 20000; round++) {
        memcpy(m, b.data, b.len);
        for (int k = 1 + (int)(cal_rand_next(&r) % 4); k > 0; k--)
            m[cal_rand_next(&r) % b.len] = (char)cal_rand_next(&r);
        if (round & 1) {
            uint64_t c = cal_binfile_checksum(m, b.len - 8);
            for (int k = 0; k < 8; k++)
                m[b.len - 8 + k] = (char)(c >> (8 * k));
        }
        if (cal_heapfile_decode(m, b.len, &d, err, sizeof err) != 0) {
            CHECK(err[0] && !strchr(err, '\n'));
            continue;
        }
        accepted++;
        CHECK(cal_heapgraph_dominators(&d.g) == 0);
        cal_buf e;
        CHECK(cal_heapfile_encode(&d, &e) == 0);
        cal_buf_free(&e);
        cal_heapfile_free(&d);
    }
    CHECK(accepted > 100);
    free(m);
    cal_buf_free(&b);
    /* What the format cannot hold is not written. */
    file_of(&g, &f, strings);
    f.types = (uint32_t[4]){0, 1, 2, 9};
    CHECK(cal_heapfile_encode(&f, &b) == -1);
    free(f.line_of);
    cal_heapgraph_free(&g);
    free(s.deg);
    free(s.to);
    free(s.size);
    free(s.type);
}

int main(void)
{
    test_random_graphs();
    test_deep_chain();
    test_finish_roots();
    test_heapfile();
    printf("%d passed, %d failed\n", passed, failures);
    return failures ? 1 : 0;
}
