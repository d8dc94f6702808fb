/* kv_pool.c - the GPU LLM's KV page pool and sequence table (kv_pool.h). */
#include "gpu/kv_pool.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

cosy_status kv_pool_init(kv_pool *p, int max_open, int pages_per_seq, int page_size) {
  memset(p, 0, sizeof *p);
  p->page_size = page_size;
  p->pages_per_seq = pages_per_seq;
  p->max_open = max_open;
  p->seqs = cosy_calloc((size_t)max_open, sizeof *p->seqs);
  p->bt = cosy_calloc((size_t)max_open * (size_t)pages_per_seq, sizeof(int32_t));
  if (!p->seqs || !p->bt) {
    kv_pool_free(p);
    return COSY_ERR_NO_MEMORY;
  }
  return COSY_OK;
}

cosy_status kv_pool_set_pages(kv_pool *p, int pages) {
  if (pages == 0) { /* drop them again (every sequence must be closed) */
    free(p->free_pages);
    p->free_pages = NULL;
    p->pages_total = p->n_free = 0;
    return COSY_OK;
  }
  if (p->free_pages || pages < 1)
    return cosy_err(COSY_ERR_INVALID_ARG, "kv_pool_set_pages: %d pages (set once, >= 1)", pages);
  int *fp = cosy_malloc(sizeof(int) * (size_t)pages);
  if (!fp) return COSY_ERR_NO_MEMORY;
  p->free_pages = fp;
  p->pages_total = pages;
  p->n_free = pages;
  for (int i = 0; i < pages; i++) fp[i] = pages - 1 - i; /* pops give 0, 1, 2, ... */
  return COSY_OK;
}

void kv_pool_free(kv_pool *p) {
  if (!p) return;
  free(p->free_pages);
  free(p->seqs);
  free(p->bt);
  memset(p, 0, sizeof *p);
}

int kv_pool_seq_ok(const kv_pool *p, int seq) {
  return p && p->seqs && seq >= 0 && seq < p->max_open && p->seqs[seq].open;
}

cosy_status kv_pool_open(kv_pool *p, int max_len, int *seq) {
  *seq = -1;
  if (max_len < 1 || max_len > p->pages_per_seq * p->page_size)
    return cosy_err(COSY_ERR_INVALID_ARG, "kv_pool_open: max_len %d not in [1, %d]", max_len,
                    p->pages_per_seq * p->page_size);
  const int need = (max_len + p->page_size - 1) / p->page_size;
  if (need > p->n_free)
    return cosy_err(COSY_ERR_GPU_NO_MEMORY,
                    "KV cache full: %d positions need %d pages, %d of %d are free", max_len, need,
                    p->n_free, p->pages_total);
  int s = 0;
  while (s < p->max_open && p->seqs[s].open) s++;
  if (s == p->max_open)
    return cosy_err(COSY_ERR_GPU_NO_MEMORY, "KV cache full: %d sequences are open already",
                    p->max_open);
  int32_t *row = p->bt + (size_t)s * p->pages_per_seq;
  for (int i = 0; i < need; i++) row[i] = p->free_pages[--p->n_free];
  p->seqs[s].open = 1;
  p->seqs[s].max_len = max_len;
  p->seqs[s].len = 0;
  p->seqs[s].n_pages = need;
  *seq = s;
  return COSY_OK;
}

void kv_pool_close(kv_pool *p, int seq) {
  if (!kv_pool_seq_ok(p, seq)) return;
  kv_seq *s = &p->seqs[seq];
  const int32_t *row = kv_pool_block_table(p, seq);
  for (int i = s->n_pages - 1; i >= 0; i--) p->free_pages[p->n_free++] = row[i];
  memset(s, 0, sizeof *s);
}
