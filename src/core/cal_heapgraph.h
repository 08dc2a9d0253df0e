/*
 * cal_heapgraph — a heap as a compact graph, and what it says: who
 * dominates whom, how much each node keeps alive, the shortest path from
 * the roots to a node, totals by type.  Plain C, no Python; no globals;
 * not for the hot zone (the heap scanner fills it with the GIL held, the
 * analyses run after).  See docs/INTERNALS.md, "Heap scanner".
 *
 * Nodes are numbered in the order they are added, and their edges are
 * added in that same order (the node array is the scanner's breadth-first
 * queue), so the edges sit in one CSR array.  A virtual root, outside the
 * numbering, points at the root set.  All arrays come from malloc.
 */
#ifndef CAL_HEAPGRAPH_H
#define CAL_HEAPGRAPH_H

#include <stddef.h>
#include <stdint.h>

/* idom of a node dominated by the virtual root alone, and of a node no
   root reaches. */
#define CAL_HEAP_ROOT UINT32_MAX
#define CAL_HEAP_NONE (UINT32_MAX - 1)
/* Type ids are below this bit; a node whose type id carries it was merged
   into another node (a "virtual object": its size went to its owner), and
   the totals leave it out. */
#define CAL_HEAP_MERGED 0x80000000u
/* The most nodes a graph holds (the top bit of an index is a flag in the
   dominator pass). */
#define CAL_HEAP_MAX_NODES 0x7ffffff0u

typedef struct cal_heapgraph {
    size_t n, cap;   /* nodes, allocated */
    uint64_t *addr;  /* each node's identity (an address), unique */
    uint64_t *size;  /* shallow bytes */
    uint32_t *type;  /* type id, maybe | CAL_HEAP_MERGED */
    uint32_t *off;   /* cap + 1: node i's edges are edges[off[i]..off[i+1]) */
    uint32_t *edges; /* targets */
    size_t nedges, edges_cap;
    size_t expanded; /* nodes whose edges were begun (cal_heapgraph_next) */
    uint32_t *roots; /* the virtual root's successors */
    size_t nroots, roots_cap;
    uint32_t *slots;  /* hash set: node index + 1 per slot, 0 empty */
    size_t slots_cap; /* power of two */
    /* cal_heapgraph_dominators' results (NULL before) */
    uint32_t *idom;     /* immediate dominator, CAL_HEAP_ROOT or _NONE */
    uint64_t *retained; /* bytes freed if the node went (0 if unreached) */
    /* The most bytes the arrays above and the temporaries of
       cal_heapgraph_finish and _dominators took at once (a realloc's
       moment with both copies aside): the scanner's peak. */
    size_t peak;
} cal_heapgraph;

void cal_heapgraph_init(cal_heapgraph *g);
void cal_heapgraph_free(cal_heapgraph *g);

/* The node of `addr`, or -1. */
int64_t cal_heapgraph_lookup(const cal_heapgraph *g, uint64_t addr);

/* The node of `addr`, added (size 0, type 0) when new: *added says which.
   0, or -1 when out of memory or nodes (the graph unchanged). */
int cal_heapgraph_intern(cal_heapgraph *g, uint64_t addr, uint32_t *node, int *added);

/* The next node whose edges are to be added, in the order nodes were
   added, or -1 when every node has its edges.  cal_heapgraph_edge then
   adds edges to it until the next call. */
int64_t cal_heapgraph_next(cal_heapgraph *g);
/* An edge from the node last given by cal_heapgraph_next.  0 or -1. */
int cal_heapgraph_edge(cal_heapgraph *g, uint32_t to);
/* The edges of the next `count` nodes to expand, at once: the k-th node
   of the batch (the one cal_heapgraph_next would give) has deg[k]
   targets, given by address in addrs (concatenated, in order); a target
   not yet a node becomes one.  The graph is the one interning them one
   by one makes; faster, because the hash slots of the targets ahead, and
   the addresses those slots point to, are prefetched, so that the cache
   misses of a batch overlap instead of following each other.  0, or -1
   when out of memory or nodes (the batch maybe half added). */
int cal_heapgraph_add_batch(cal_heapgraph *g, size_t count, const uint32_t *deg,
                            const uint64_t *addrs);

/* Add `node` to the root set.  0 or -1. */
int cal_heapgraph_add_root(cal_heapgraph *g, uint32_t node);

/* Close the edge lists (every node must have been given by
   cal_heapgraph_next), then complete the root set: every node at or after
   `first` that no other node points at becomes a root; then, while some
   node is unreachable from the roots (a cycle nothing outside points at),
   the first such node becomes one.  Last, the arrays are trimmed to what
   they hold.  0 or -1. */
int cal_heapgraph_finish(cal_heapgraph *g, size_t first);

/* The dominator tree (idom) and the retained sizes, from the virtual
   root.  Iterative semi-NCA (see the .c file): time O(E log N), memory
   16 bytes a node and 4 an edge (and 4 a root) at the most, besides the
   graph, results included.  0, or -1 when out of memory or when the
   edges and roots are more than UINT32_MAX. */
int cal_heapgraph_dominators(cal_heapgraph *g);

/* A shortest path from the virtual root to `target`: *path (malloc'd,
   free it) holds *len nodes, a root first and `target` last; *len is 0
   when no root reaches it.  0 or -1. */
int cal_heapgraph_path(const cal_heapgraph *g, uint32_t target, uint32_t **path,
                       size_t *len);

/* Totals per type id below `ntypes` (the arrays hold ntypes each, zeroed
   here): count, shallow bytes and, when the dominators are known and
   `retained` is not NULL, the bytes retained by the type (the retained
   sizes of its nodes that no node of the same type dominates).  Merged
   nodes are left out.  0 or -1. */
int cal_heapgraph_by_type(const cal_heapgraph *g, uint32_t ntypes, uint64_t *count,
                          uint64_t *size, uint64_t *retained);

/* The (at most) k nodes with the most retained bytes (by_retained, the
   dominators known) or shallow bytes, largest first, ties by index; merged
   nodes left out.  Returns how many were written to out. */
size_t cal_heapgraph_largest(const cal_heapgraph *g, size_t k, int by_retained,
                             uint32_t *out);

/* Bytes the graph's arrays take now. */
size_t cal_heapgraph_bytes(const cal_heapgraph *g);

#endif
