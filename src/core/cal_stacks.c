/* cal_stacks — see cal_stacks.h. */
#include "cal_stacks.h"

#include "cal_profile.h"

#include <stdlib.h>
#include <string.h>

const char *const cal_stacks_node_fields[CAL_STACKS_NODE_FIELDS] = {
    "parent",
    "frame",
    "line",
    "thread",
    "python_s",
    "native_s",
    "system_s",
    "waiting_s",
    "samples",
    "alloc_python_bytes",
    "alloc_native_bytes",
    "copied_bytes",
    "alloc_samples",
};

void cal_stacks_init(cal_stacks *s)
{
    memset(s, 0, sizeof(*s));
    cal_map_init(&s->frame_index);
    cal_map_init(&s->node_index);
}

void cal_stacks_free(cal_stacks *s)
{
    free(s->frames);
    free(s->nodes);
    cal_map_clear(&s->frame_index);
    cal_map_clear(&s->node_index);
    memset(s, 0, sizeof(*s));
}

/* Make room for one more element in *v (len elements of size elem, cap
   allocated).  0, or -1 on allocation failure. */
static int grow(void **v, size_t *cap, size_t len, size_t elem)
{
    if (len < *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 64;
    void *p = realloc(*v, n * elem);
    if (!p)
        return -1;
    *v = p;
    *cap = n;
    return 0;
}

uint32_t cal_stacks_frame(cal_stacks *s, uint32_t file, uint32_t name,
                          int32_t first_line, int library)
{
    library = library != 0;
    uint64_t h = cal_hash_u64(
        ((uint64_t)file << 32 | name) ^
        cal_hash_u64((uint64_t)(uint32_t)first_line << 1 | (uint64_t)library));
    size_t cursor = 0;
    uint32_t id;
    while ((id = cal_map_find(&s->frame_index, h, &cursor)) != CAL_MAP_NONE) {
        const cal_stack_frame *f = &s->frames[id];
        if (f->file == file && f->name == name && f->first_line == first_line &&
            f->library == library)
            return id;
    }
    if (grow((void **)&s->frames, &s->frames_cap, s->nframes, sizeof(*s->frames)) != 0)
        return CAL_STACKS_NONE;
    id = (uint32_t)s->nframes;
    if (cal_map_put(&s->frame_index, h, id) != 0)
        return CAL_STACKS_NONE;
    s->frames[s->nframes++] = (cal_stack_frame){file, name, first_line, library};
    return id;
}

/* A node's key: a root by its thread, any other by (parent, frame, line). */
static uint64_t node_key(uint32_t parent, uint32_t frame, int32_t line, uint32_t thread)
{
    if (parent == CAL_STACKS_NONE)
        return cal_hash_u64(0x9e3779b97f4a7c15ull ^ thread);
    return cal_hash_u64((uint64_t)parent << 32 | frame) ^
           cal_hash_u64((uint64_t)(uint32_t)line);
}

static uint32_t node_find_or_add(cal_stacks *s, uint32_t parent, uint32_t frame,
                                 int32_t line, uint32_t thread)
{
    uint64_t h = node_key(parent, frame, line, thread);
    size_t cursor = 0;
    uint32_t id;
    while ((id = cal_map_find(&s->node_index, h, &cursor)) != CAL_MAP_NONE) {
        const cal_stack_node *n = &s->nodes[id];
        if (n->parent == parent && n->frame == frame && n->line == line &&
            n->thread == thread)
            return id;
    }
    if (s->nnodes >= CAL_STACKS_MAX_NODES ||
        grow((void **)&s->nodes, &s->nodes_cap, s->nnodes, sizeof(*s->nodes)) != 0)
        return CAL_STACKS_NONE;
    id = (uint32_t)s->nnodes;
    if (cal_map_put(&s->node_index, h, id) != 0)
        return CAL_STACKS_NONE;
    cal_stack_node *n = &s->nodes[s->nnodes++];
    memset(n, 0, sizeof(*n));
    n->parent = parent;
    n->frame = frame;
    n->line = line;
    n->thread = thread;
    return id;
}

uint32_t cal_stacks_root(cal_stacks *s, uint32_t thread)
{
    return node_find_or_add(s, CAL_STACKS_NONE, CAL_STACKS_NONE, 0, thread);
}

uint32_t cal_stacks_child(cal_stacks *s, uint32_t parent, uint32_t frame, int32_t line)
{
    if (parent >= s->nnodes || frame >= s->nframes)
        return CAL_STACKS_NONE;
    return node_find_or_add(s, parent, frame, line, s->nodes[parent].thread);
}

void cal_stacks_add_times(cal_stacks *s, uint32_t node, const cal_times *t, int folded)
{
    if (node >= s->nnodes)
        return;
    cal_stack_node *n = &s->nodes[node];
    n->python_ns += t->python_ns;
    n->native_ns += t->native_ns;
    n->system_ns += t->system_ns;
    n->waiting_ns += t->waiting_ns;
    n->samples += t->samples;
    if (folded) {
        s->folded_ns += cal_times_all(t);
        s->folded_samples += t->samples;
    }
}

void cal_stacks_add_volume(cal_stacks *s, uint32_t node, const cal_volume *v,
                           int folded)
{
    if (node >= s->nnodes)
        return;
    cal_stack_node *n = &s->nodes[node];
    n->alloc_python += v->alloc_python;
    n->alloc_native += v->alloc_native;
    n->copied += v->copied;
    n->alloc_samples += v->samples;
    if (folded) {
        s->folded_bytes += v->alloc_python + v->alloc_native + v->copied;
        s->folded_samples += v->samples;
    }
}

/* ---- pruning for the written table ------------------------------------

   WHICH NODES ARE KEPT

   A node's weight is the largest of its inclusive shares: of the time, of
   the bytes allocated and of the bytes copied (each over the whole tree).
   A caller's inclusive figures are at least its callees', so its weight
   is too; ranking by weight, ties by index (a caller comes before its
   callees), every prefix of the ranking holds each node's callers: the
   kept nodes form a tree with the same roots.  What a flame graph or a
   pprof "top" shows is the heaviest stacks; the ones dropped are those
   that hold the least of every figure, and their figures stay with their
   callers, so nothing is lost from any kept node's inclusive figures. */

typedef struct ranked {
    double weight;
    uint32_t node;
} ranked;

static int ranked_cmp(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->weight != y->weight)
        return x->weight > y->weight ? -1 : 1;
    return x->node < y->node ? -1 : x->node > y->node;
}

static double share(int64_t part, int64_t whole)
{
    return whole > 0 ? (double)part / (double)whole : 0.0;
}

/* Mark in keep[] the roots and the heaviest nodes, at most max_nodes in
   all (roots first).  0, or -1 if memory ran out. */
static int choose_kept(const cal_stacks *s, size_t max_nodes, unsigned char *keep)
{
    size_t n = s->nnodes;
    int64_t *incl = calloc(3 * (n ? n : 1), sizeof(*incl));
    ranked *order = malloc((n ? n : 1) * sizeof(*order));
    if (!incl || !order) {
        free(incl);
        free(order);
        return -1;
    }
    int64_t total[3] = {0, 0, 0};
    for (size_t i = n; i-- > 0;) {
        const cal_stack_node *nd = &s->nodes[i];
        int64_t *mine = &incl[3 * i];
        mine[0] += nd->python_ns + nd->native_ns + nd->system_ns + nd->waiting_ns;
        mine[1] += nd->alloc_python + nd->alloc_native;
        mine[2] += nd->copied;
        for (int k = 0; k < 3; k++) {
            if (nd->parent == CAL_STACKS_NONE)
                total[k] += mine[k];
            else
                incl[3 * (size_t)nd->parent + (size_t)k] += mine[k];
        }
    }
    size_t kept = 0, nranked = 0;
    for (size_t i = 0; i < n; i++) {
        if (s->nodes[i].parent == CAL_STACKS_NONE) {
            keep[i] = 1;
            kept++;
            continue;
        }
        const int64_t *mine = &incl[3 * i];
        double w = share(mine[0], total[0]);
        for (int k = 1; k < 3; k++) {
            double x = share(mine[k], total[k]);
            if (x > w)
                w = x;
        }
        order[nranked++] = (ranked){w, (uint32_t)i};
    }
    qsort(order, nranked, sizeof(*order), ranked_cmp);
    for (size_t r = 0; r < nranked && kept < max_nodes; r++, kept++)
        keep[order[r].node] = 1;
    free(incl);
    free(order);
    return 0;
}

int cal_stacks_pruned(const cal_stacks *s, size_t max_nodes, cal_stacks *out,
                      uint32_t *map)
{
    cal_stacks_init(out);
    size_t n = s->nnodes;
    unsigned char *keep = calloc(n ? n : 1, 1);
    uint32_t *to = map ? map : malloc((n ? n : 1) * sizeof(*to));
    if (!keep || !to || choose_kept(s, max_nodes, keep) != 0)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        const cal_stack_node *nd = &s->nodes[i];
        if (!keep[i]) {
            to[i] = to[nd->parent]; /* its nearest kept caller: parents come first */
        } else if (nd->parent == CAL_STACKS_NONE) {
            to[i] = cal_stacks_root(out, nd->thread);
        } else {
            const cal_stack_frame *f = &s->frames[nd->frame];
            uint32_t frame =
                cal_stacks_frame(out, f->file, f->name, f->first_line, f->library);
            to[i] = frame == CAL_STACKS_NONE
                        ? CAL_STACKS_NONE
                        : cal_stacks_child(out, to[nd->parent], frame, nd->line);
        }
        if (to[i] == CAL_STACKS_NONE)
            goto fail;
        cal_times t = {nd->python_ns,
                       nd->native_ns,
                       nd->system_ns,
                       nd->waiting_ns,
                       nd->samples,
                       0,
                       0};
        cal_volume v = {nd->alloc_python, nd->alloc_native, nd->copied,
                        nd->alloc_samples};
        cal_stacks_add_times(out, to[i], &t, !keep[i]);
        cal_stacks_add_volume(out, to[i], &v, !keep[i]);
    }
    out->folded_ns += s->folded_ns;
    out->folded_bytes += s->folded_bytes;
    out->folded_samples += s->folded_samples;
    free(keep);
    if (to != map)
        free(to);
    return 0;
fail:
    free(keep);
    if (to != map)
        free(to);
    cal_stacks_free(out);
    cal_stacks_init(out);
    return -1;
}
