/* kv_pool.h - the GPU LLM's paged KV cache bookkeeping on the host: the free-page stack, the
 * table of open sequences and their block tables. Pure host state: the device pool itself (one
 * fp32 allocation, lib/gpu/llm.c) and the device copy of the block tables are lib/gpu/llm.c's;
 * what the kernels see (a page id per block-table entry, slot = page * page_size + pos % page_size)
 * is computed here.
 *
 * A sequence reserves ceil(max_len / page_size) pages when it opens (so a later step never runs
 * out) and gives them back when it closes. Pages are handed out from a stack that starts
 * 0, 1, 2, ...; a closed sequence's pages go back in reverse order, so the next open gets the same
 * pages in the same order. Sequence ids are the lowest free entry of [0, max_open). */
#ifndef COSY_GPU_KV_POOL_H
#define COSY_GPU_KV_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "cosyvoice.h"

typedef struct kv_seq {
  int open, max_len, len, n_pages;
} kv_seq;

typedef struct kv_pool {
  int page_size;     /* positions per page */
  int pages_per_seq; /* entries per block table (a sequence's most pages) */
  int max_open;      /* sequences open at once at most */
  int pages_total, n_free;
  int *free_pages;   /* [pages_total] stack; the top n_free entries are free */
  kv_seq *seqs;      /* [max_open] */
  int32_t *bt;       /* [max_open][pages_per_seq] block tables (page ids) */
} kv_pool;

/* The sequence table for max_open sequences of at most pages_per_seq pages of page_size
 * positions; no pages yet (kv_pool_set_pages). COSY_ERR_NO_MEMORY on allocation failure. */
cosy_status kv_pool_init(kv_pool *p, int max_open, int pages_per_seq, int page_size);
/* The pool's pages: ids 0 .. pages-1, all free (pages >= 1, set once); pages = 0 drops them
 * again (no sequence open). */
cosy_status kv_pool_set_pages(kv_pool *p, int pages);
void kv_pool_free(kv_pool *p);

/* Opens a sequence of at most max_len positions (1 <= max_len <= pages_per_seq * page_size): takes
 * its pages, fills its block table, *seq = its id (-1 on failure). COSY_ERR_GPU_NO_MEMORY
 * ("KV cache full") when too few pages are free or max_open sequences are open. */
cosy_status kv_pool_open(kv_pool *p, int max_len, int *seq);
/* Gives the sequence's pages back and frees its id; an id that is not open is ignored. */
void kv_pool_close(kv_pool *p, int seq);
/* 1 when seq is an open sequence's id. */
int kv_pool_seq_ok(const kv_pool *p, int seq);
/* The sequence's entry (positions stored, max_len, pages): seq must be open. */
static inline kv_seq *kv_pool_seq(kv_pool *p, int seq) { return &p->seqs[seq]; }
/* The sequence's block table: pages_per_seq entries, the first n_pages in use. */
static inline const int32_t *kv_pool_block_table(const kv_pool *p, int seq) {
  return p->bt + (size_t)seq * p->pages_per_seq;
}
/* The cache slot of position pos of the sequence: page * page_size + pos % page_size. */
static inline int32_t kv_pool_slot(const kv_pool *p, int seq, int pos) {
  return kv_pool_block_table(p, seq)[pos / p->page_size] * p->page_size + pos % p->page_size;
}

#endif
