/*
 * cal_stacks — the stack table: the frames samples found (a code location:
 * file, function, first line) and the tree of unique stacks, one root per
 * thread, with what was credited to each stack.
 *
 * A node is (parent, frame, line): the frame `frame` executing `line`,
 * called from the stack `parent`.  A thread's root has no frame; what a
 * thread did with no Python frame at all (a C thread between its calls into
 * Python, native threads) is credited to its root.  Each node holds its
 * *self* figures (samples whose innermost frame it is); a node's inclusive
 * figures are the sum over its subtree, which the writers and viewers
 * compute.
 *
 * Bounded twice.  In memory: at most CAL_STACKS_MAX_NODES nodes; once
 * full, a stack that needs a new node is credited to its deepest node that
 * exists (its nearest known caller).  Written: at most CAL_STACKS_WRITE_MAX
 * nodes, the ones that matter most (cal_stacks_pruned), the rest merged
 * into their nearest kept caller.  Either way the amount so folded is
 * counted (`folded`).
 *
 * Not thread-safe: the owner serialises access (the GIL, like cal_profile).
 */
#ifndef CAL_STACKS_H
#define CAL_STACKS_H

#include <stddef.h>
#include <stdint.h>

#include "cal_map.h"

#define CAL_STACKS_NONE UINT32_MAX
#define CAL_STACKS_MAX_NODES (1 << 18)
/* At most this many nodes are written: about 1 MB of JSON (a node is a
   line of about 100 bytes, 130 with memory figures). */
#define CAL_STACKS_WRITE_MAX 8000

struct cal_times;
struct cal_volume;

/* A written node's columns (docs/FORMAT.md, "stacks": `node_fields`), in
   order: what the JSON writer writes and the exports read. */
#define CAL_STACKS_NODE_FIELDS 13
extern const char *const cal_stacks_node_fields[CAL_STACKS_NODE_FIELDS];

typedef struct cal_stack_frame {
    uint32_t file, name; /* string ids of the profile */
    int32_t first_line;
    int library; /* outside the profiled files (not in the line table) */
} cal_stack_frame;

typedef struct cal_stack_node {
    uint32_t parent; /* CAL_STACKS_NONE for a thread's root */
    uint32_t frame;  /* CAL_STACKS_NONE for a thread's root */
    int32_t line;
    uint32_t thread; /* the profile's thread index */
    int64_t python_ns, native_ns, system_ns, waiting_ns, samples;
    int64_t alloc_python, alloc_native, copied, alloc_samples;
} cal_stack_node;

typedef struct cal_stacks {
    cal_stack_frame *frames;
    size_t nframes, frames_cap;
    cal_map frame_index;
    cal_stack_node *nodes;
    size_t nnodes, nodes_cap;
    cal_map node_index;
    /* Credited to an ancestor because the table was full. */
    int64_t folded_ns, folded_samples, folded_bytes;
} cal_stacks;

void cal_stacks_init(cal_stacks *s);
void cal_stacks_free(cal_stacks *s);

/* Find or add a frame; its index, or CAL_STACKS_NONE on allocation
   failure. */
uint32_t cal_stacks_frame(cal_stacks *s, uint32_t file, uint32_t name,
                          int32_t first_line, int library);

/* The root of a thread's tree (made on first use), or CAL_STACKS_NONE on
   allocation failure or when the table is full. */
uint32_t cal_stacks_root(cal_stacks *s, uint32_t thread);

/* The node for `frame` at `line` called from `parent` (made on first use).
   When it cannot be made (full, or out of memory) returns CAL_STACKS_NONE:
   the caller credits `parent` instead (cal_stacks_fold says so). */
uint32_t cal_stacks_child(cal_stacks *s, uint32_t parent, uint32_t frame, int32_t line);

/* Credit time, or allocation/copy volume, to a node's self figures.
   `folded` says the stack was cut short for want of room (the amount is
   also counted in the table's folded figures).  A NONE node is ignored. */
void cal_stacks_add_times(cal_stacks *s, uint32_t node, const struct cal_times *t,
                          int folded);
void cal_stacks_add_volume(cal_stacks *s, uint32_t node, const struct cal_volume *v,
                           int folded);

/* A copy of `s` (into `out`, which this initialises) with at most
   `max_nodes` nodes: every thread's root, then the nodes that hold the
   largest share of the time, of the bytes allocated or of the bytes
   copied (inclusive), whichever share is largest.  A node dropped is
   merged into its nearest kept caller: its self figures are added there
   and counted as folded, so every kept node's inclusive figures and the
   totals are unchanged.  Only the frames of kept nodes are copied.
   `map` (NULL, or room for s->nnodes) receives each node's index in
   `out`: its own, or its nearest kept caller's.  0, or -1 if memory ran
   out (out is then empty). */
int cal_stacks_pruned(const cal_stacks *s, size_t max_nodes, cal_stacks *out,
                      uint32_t *map);

#endif
