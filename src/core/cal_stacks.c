/* cal_stacks — see cal_stacks.h. */
#include "cal_stacks.h"

#include "cal_profile.h"

#include <stdlib.h>
#include <string.h>

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
