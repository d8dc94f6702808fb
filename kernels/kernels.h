/* kernels.h - launchers of the CUDA kernels (internal; plain C, callable from C and C++).
 *
 * One .cu file per op family (kernels/norm.cu, rope.cu, act.cu, embed.cu, attention.cu, gemm.cu,
 * sample.cu here; gemv, paged_kv, bf16_split, dit_elementwise, conv_pos, euler, flow_pack with a
 * header of the same name); each starts with a comment giving the math, the shapes, the thread
 * mapping and the numerics. Conventions shared by every launcher:
 *
 *  - The first argument is the stream; the launch is asynchronous on it. The return value is the
 *    launch status: cudaErrorInvalidValue for arguments a caller could get wrong (NULL pointers,
 *    negative sizes, unsupported shapes), else cudaGetLastError() after the launch. Nothing here
 *    allocates (except cosy_gemm_create), synchronizes, prints or exits. Zero rows/elements is a
 *    valid no-op that returns cudaSuccess.
 *  - Tensors are row-major, dimensions listed outermost first: "[M][K]" is M rows of K elements.
 *    A "stride" is the distance in elements between consecutive rows, so a launcher can work on a
 *    column slice of a wider buffer (e.g. the q, k and v parts of one fused QKV projection).
 *  - Storage types are chosen per tensor with cosy_kdtype: fp32, or bf16 (bfloat16, stored as its
 *    16-bit pattern, cosy_bf16). All arithmetic is fp32 (norm statistics, softmax, RoPE angles,
 *    accumulations); bf16 outputs are rounded to nearest-even once, at the store.
 *  - Small per-channel parameters (norm weights, AdaLN scale/shift/gate rows, Snake alpha, biases)
 *    are always fp32.
 *  - Device pointers must be aligned to their element size. The paged KV caches (and the decode
 *    workspace) must be 16-byte aligned (cudaMalloc gives 256); the prefill/DiT attention and
 *    gemm check the alignment of what they get and fall back to slower code where it is less.
 */
#ifndef COSY_KERNELS_H
#define COSY_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kdevice.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t cosy_bf16; /* bit pattern of a bfloat16 */

typedef enum cosy_kdtype {
  COSY_KDT_F32 = 0,
  COSY_KDT_BF16 = 1
} cosy_kdtype;

/* Size in bytes of one element of dt (0 for an unknown value). */
size_t cosy_kdtype_size(cosy_kdtype dt);

/* ============================== norm.cu ====================================================== */

/* RMSNorm (Qwen2): y[r][i] = w[i] * x[r][i] / sqrt(mean_i(x[r][i]^2) + eps).
 * x [rows][H] (x_dt), w [H] fp32, y [rows][H] (y_dt). y may equal x when the types match. */
cudaError_t cosy_k_rmsnorm(cudaStream_t s, cosy_kdtype x_dt, const void *x, const float *w,
                           cosy_kdtype y_dt, void *y, int rows, int H, float eps);

/* Fused residual add + RMSNorm: h[r][i] += delta[r][i] (stored in h's type); then
 * y = rmsnorm(h) computed from the stored h. h [rows][H] (h_dt, read and written),
 * delta [rows][H] (delta_dt), w [H] fp32, y [rows][H] (y_dt). */
cudaError_t cosy_k_add_rmsnorm(cudaStream_t s, cosy_kdtype h_dt, void *h, cosy_kdtype delta_dt,
                               const void *delta, const float *w, cosy_kdtype y_dt, void *y,
                               int rows, int H, float eps);

/* LayerNorm without affine + adaptive modulation (DiT AdaLN):
 *   y[b][n][d] = (x[b][n][d] - mean) / sqrt(var + eps) * (1 + scale[b*mod_stride + d])
 *                + shift[b*mod_stride + d]
 * with mean/var (biased) over d of row (b, n). x, y [B][N][D]; scale/shift fp32 rows of the
 * modulation vector (e.g. scale = emb + 1*D, shift = emb + 0*D with mod_stride 6*D for the chunk
 * order of a DiT block). scale and shift may both be NULL (plain LayerNorm). y may equal x. */
cudaError_t cosy_k_layernorm_mod(cudaStream_t s, cosy_kdtype x_dt, const void *x,
                                 cosy_kdtype y_dt, void *y, const float *scale,
                                 const float *shift, int mod_stride, int B, int N, int D,
                                 float eps);

/* ============================== rope.cu ====================================================== */

/* NeoX-style RoPE (Qwen2, rotate_half), in place on q and k:
 *   for each token t, head h, i < hd/2, with a = pos[t] * inv_freq[i]:
 *     x1 = x[i], x2 = x[i + hd/2];  x[i] = x1 cos a - x2 sin a;  x[i + hd/2] = x2 cos a + x1 sin a
 * q [n_tok][q_stride] with head h at columns h*hd (n_qh heads), k [n_tok][k_stride] likewise
 * (n_kh heads; k may be NULL when n_kh is 0). pos [n_tok] int32 (device). inv_freq [hd/2] fp32
 * (device) or NULL for inv_freq[i] = fp32(1 / theta^(2i/hd)) (evaluated in double). hd even,
 * <= 256. */
cudaError_t cosy_k_rope_neox(cudaStream_t s, cosy_kdtype dt, void *q, int q_stride, int n_qh,
                             void *k, int k_stride, int n_kh, const int32_t *pos, int n_tok,
                             int hd, float theta, const float *inv_freq);

/* Interleaved RoPE of the DiT (x-transformers), in place on the first rot_dim channels only:
 *   row (b, n), pair i < rot_dim/2, a = n * inv_freq[i]:
 *     x[2i] = x[2i] cos a - x[2i+1] sin a;  x[2i+1] = x[2i+1] cos a + x[2i] sin a
 * x [B][N][stride] (channels >= rot_dim untouched; for the DiT rot_dim = 64 = head 0 only).
 * Applied to x and, when x2 != NULL, to x2 of the same shape (q and k in one launch).
 * inv_freq [rot_dim/2] fp32 (device; the checkpoint's buffer) or NULL for 1/theta^(2i/rot_dim). */
cudaError_t cosy_k_rope_interleaved(cudaStream_t s, cosy_kdtype dt, void *x, void *x2,
                                    int stride, int B, int N, int rot_dim, float theta,
                                    const float *inv_freq);

/* ============================== act.cu ======================================================= */

/* y[r][i] = silu(gate[r*in_stride + i]) * up[r*in_stride + i], y [rows][n] contiguous.
 * (For a fused gate|up projection: gate = gu, up = gu + n, in_stride = 2n.) */
cudaError_t cosy_k_silu_mul(cudaStream_t s, cosy_kdtype in_dt, const void *gate, const void *up,
                            int in_stride, cosy_kdtype out_dt, void *y, int rows, int n);

/* Elementwise over n values (y may equal x when the types match):
 *   silu(x) = x / (1 + e^-x); gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
 *   mish(x) = x tanh(softplus(x)); leaky_relu(x) = x > 0 ? x : slope x. */
cudaError_t cosy_k_silu(cudaStream_t s, cosy_kdtype in_dt, const void *x, cosy_kdtype out_dt,
                        void *y, int64_t n);
cudaError_t cosy_k_gelu_tanh(cudaStream_t s, cosy_kdtype in_dt, const void *x,
                             cosy_kdtype out_dt, void *y, int64_t n);
cudaError_t cosy_k_mish(cudaStream_t s, cosy_kdtype in_dt, const void *x, cosy_kdtype out_dt,
                        void *y, int64_t n);
cudaError_t cosy_k_leaky_relu(cudaStream_t s, cosy_kdtype in_dt, const void *x,
                              cosy_kdtype out_dt, void *y, int64_t n, float slope);

/* Snake (HiFT): y = x + 1/(alpha_c + 1e-9) * sin(alpha_c x)^2 with alpha per channel c.
 * Layout [B][C][T] (channels_last = 0, PyTorch's conv layout) or [B][T][C] (channels_last = 1). */
cudaError_t cosy_k_snake(cudaStream_t s, cosy_kdtype in_dt, const void *x, cosy_kdtype out_dt,
                         void *y, const float *alpha, int B, int C, int T, int channels_last);

/* Gated residual (DiT): h[b][n][d] += gate[b*gate_stride + d] * a[b][n][d].
 * h [B][N][D] (h_dt, read and written), a [B][N][D] (a_dt), gate fp32. */
cudaError_t cosy_k_gated_residual(cudaStream_t s, cosy_kdtype h_dt, void *h, cosy_kdtype a_dt,
                                  const void *a, const float *gate, int gate_stride, int B, int N,
                                  int D);

/* y[r][c] += bias[c] for y [rows][stride] (first cols columns); used by gemm's fallback. */
cudaError_t cosy_k_add_bias(cudaStream_t s, cosy_kdtype dt, void *y, int stride,
                            const float *bias, int rows, int cols);
/* y[r][c] = gelu_tanh(y[r][c] + bias[c]) (bias NULL: + 0) for y [rows][stride] (first cols
 * columns), fp32 math, one rounding at a bf16 store; used by cosy_k_gemm_gelu's fallback. */
cudaError_t cosy_k_add_bias_gelu(cudaStream_t s, cosy_kdtype dt, void *y, int stride,
                                 const float *bias, int rows, int cols);

/* ============================== embed.cu ===================================================== */

/* Embedding gather: out[i*out_stride + d] = table[ids[i]][d] for d < dim.
 * table [n_rows][dim] (table_dt), ids [n_ids] int32 (device). An id outside [0, n_rows) gives a
 * zero row and sets *err_flag = 1 (err_flag: device int, may be NULL; it is never cleared here). */
cudaError_t cosy_k_embed(cudaStream_t s, cosy_kdtype table_dt, const void *table, int n_rows,
                         int dim, const int32_t *ids, int n_ids, cosy_kdtype out_dt, void *out,
                         int out_stride, int *err_flag);

/* ============================== attention.cu ================================================= */
/* All attention kernels: head_dim 64, GQA with q head h reading kv head h / (n_qh / n_kh),
 * softmax(scale * q.k) in fp32 (online, exp2 based), fp32 accumulation of p.v. bf16 inputs
 * go through tensor cores (mma.sync m16n8k16, P rounded to bf16 like FlashAttention) where the
 * strides allow 16-byte loads, otherwise and for fp32 through plain fp32 FMA code. */

/* Paged KV cache layout (per layer, one for K and one for V):
 *   cache[page][page_size][n_kh][64]   (cache_dt = the attention's dt)
 * Token t of sequence s lives in page block_table[s*max_pages + t/page_size], row t%page_size. */

/* Bytes of workspace cosy_k_paged_decode needs for these sizes (0: none needed): split
 * counters (a fixed region for 65535 sequences x n_kh, about 0.5 MB at n_kh = 2, so calls of any
 * n_seq can share one workspace), then fp32 partial results. */
size_t cosy_k_paged_decode_workspace(int n_seq, int n_qh, int n_kh, int max_ctx);

/* Paged decode attention, one query token per sequence (flash-decoding split over the context
 * when it is long): out[s][h*64 + d] = sum_t softmax_t(scale q[s,h].k[s,t,kvh]) v[s,t,kvh][d]
 * over t < seq_lens[s].
 * q [n_seq][q_stride] (head h at h*64), out [n_seq][out_stride]; seq_lens [n_seq] int32 device,
 * each in [0, max_ctx] (0 gives a zero output row), block_table [n_seq][max_pages] int32 device.
 * max_ctx (host) bounds every seq_len and sets the split; workspace is device memory of at least
 * cosy_k_paged_decode_workspace(n_seq, n_qh, n_kh, max_ctx) bytes (may be NULL when that is 0),
 * ZEROED before its first use (cudaMemset); every call leaves it zeroed again (its split counters
 * return to 0), so one workspace serves any number of calls and graph replays, one at a time.
 * n_qh / n_kh <= 8. One kernel launch; the grid depends only on host arguments, so the call can
 * be graph-captured. pdl: bit 1 (pdl & 1): launched as a programmatic dependent of the previous
 * kernel on the stream (see gemv.h), letting the next kernel launch early, where dev->pdl;
 * COSY_K_DECODE_EARLY (pdl & 2): the loads the previous kernel cannot affect (seq_lens,
 * block_table, the K rows of every token but the newest, t = seq_lens[s] - 1, and prefetches of
 * their V rows) are issued before the kernel waits for the previous one; q and the newest K/V
 * rows after. Pass it with bit 1 only where the previous kernel triggers its dependents after
 * its own griddepcontrol.wait (gemv.h: cosy_k_llm_gemv_tc, the q|k|v projection that writes q
 * and the newest rows) and nothing earlier writes those inputs (every kernel two or more
 * launches back has then completed); without bit 1 (a plain launch) it is always safe. The
 * output is bit-identical either way. Other bits: cudaErrorInvalidValue. dev (kdevice.h,
 * NULL = a device with neither): with dev->clusters, 2..8 splits merge inside a thread-block
 * cluster, else through the workspace (both exact to fp32 rounding; attention.cu). */
#define COSY_K_DECODE_EARLY 2 /* cosy_k_paged_decode's pdl: the early loads (above) */
cudaError_t cosy_k_paged_decode(cudaStream_t s, cosy_kdtype dt, const void *q, int q_stride,
                                const void *k_cache, const void *v_cache,
                                const int32_t *block_table, int max_pages,
                                const int32_t *seq_lens, int n_seq, int n_qh, int n_kh,
                                int head_dim, int page_size, int max_ctx, float scale, void *out,
                                int out_stride, void *workspace, size_t workspace_bytes, int pdl,
                                const cosy_kdev *dev);

/* Paged causal prefill attention of several sequences packed in one batch, fp32, one launch,
 * keys and values read straight from the paged cache (the layout above, fp32). Segment g is
 * query rows [row0, row0 + n) of q / out; they are positions Lk - n .. Lk - 1 of the sequence
 * whose block-table row is block_tables[seq * pages_per_seq ..] (its first Lk tokens' K/V are in
 * the cache, including these rows'; 1 <= n <= Lk <= pages_per_seq * page_size), and the row at
 * position p attends keys 0..p:
 *   out[row][h*64 + d] = sum_{j <= p} softmax_j(scale q[row,h].k[j,kvh]) v[j,kvh][d],
 *   kvh = h / (n_qh / n_kh).
 * tiles: int32 pairs (segment, first query of the tile within the segment), COSY_K_PREFILL_TILE
 * queries a tile (the segment's queries t0 .. min(t0 + 16, n) - 1); every query row of a segment
 * must be in exactly one tile. segs [n_seg] and tiles [2 n_tiles] are device memory (their
 * contents are trusted); the grid depends only on n_tiles and n_kh, so the call can be
 * graph-captured. q [.][q_stride], out [.][out_stride] fp32, both 16-byte aligned with strides a
 * multiple of 4; head_dim 64, n_qh / n_kh <= 8. A row's result depends only on its own query,
 * position and keys, never on the other segments or tiles of the call (same bits alone or
 * packed). Shared memory ~62 KB a block at 14/2 heads: cudaErrorInvalidValue when that exceeds
 * dev->smem_block (dev NULL: 48 KB). No thread-block clusters. */
typedef struct cosy_k_prefill_seg {
  int32_t row0; /* first query row in q and out */
  int32_t n;    /* query rows */
  int32_t Lk;   /* keys: the rows are positions Lk - n .. Lk - 1 */
  int32_t seq;  /* block-table row */
} cosy_k_prefill_seg;
#define COSY_K_PREFILL_TILE 16
cudaError_t cosy_k_paged_prefill(cudaStream_t s, const float *q, int q_stride,
                                 const float *k_cache, const float *v_cache,
                                 const int32_t *block_tables, int pages_per_seq,
                                 const cosy_k_prefill_seg *segs, int n_seg, const int32_t *tiles,
                                 int n_tiles, int n_qh, int n_kh, int head_dim, int page_size,
                                 float scale, float *out, int out_stride, const cosy_kdev *dev);

/* DiT attention over B sequences of N frames, n_heads x 64, multi-head (no GQA):
 * chunk = 0: full attention; chunk > 0: block-causal, query i attends keys
 * j < (i/chunk + 1) * chunk (chunks counted from frame 0; the DiT uses 50).
 * q, k, v [B][N][in_stride] (head h at column h*64), out [B][N][out_stride]. */
cudaError_t cosy_k_attn_dit(cudaStream_t s, cosy_kdtype dt, const void *q, const void *k,
                            const void *v, int in_stride, void *out, int out_stride, int B, int N,
                            int n_heads, int head_dim, int chunk, float scale);

/* Block-causal (or full) DiT attention over a packed batch whose earlier keys sit in cache pages
 * (kernels/attention.cu). Segment g (a request's CFG row) has queries at packed rows
 * [q_row0, q_row0 + n_q) of qkv [.][3D] bf16 (q | k | v column blocks, already biased and
 * rotated) for absolute frames [cached, cached + n_q); its keys are frames [0, Lk): frames below
 * `cached` are rows of cache pages (page ptab[f / page_frames], row f % page_frames, at element
 * offset pool + page * page_elems + layer_off + (2 row + kv) * page_frames * D + (f % page_frames)
 * * D, kv = 0 for K, 1 for V), later frames are the packed rows q_row0 + (f - cached). Query
 * frame i sees keys f < min(Lk, (i / chunk + 1) chunk) (full: f < Lk). out [.][D] bf16 at the
 * query rows. 16 heads of 64 in the model; head_dim must be 64. dev_off: NULL, or a device
 * int64 added to layer_off when the kernel runs (keep the sum a multiple of 8), so that one
 * captured launch serves every Euler step. */
typedef struct cosy_k_dit_seg {
  int32_t q_row0, n_q, cached, Lk;
  int32_t ptab0;     /* index of the segment's first page id in ptab */
  int32_t row;       /* CFG row (0 conditional, 1 unconditional) */
  int32_t full;      /* 1: full attention */
  int32_t pad_;
} cosy_k_dit_seg;
cudaError_t cosy_k_attn_dit_paged(cudaStream_t s, const cosy_bf16 *qkv, int D, int n_heads,
                                  const cosy_k_dit_seg *segs, const int32_t *tiles, int n_tiles,
                                  const cosy_bf16 *pool, int64_t page_elems, int64_t layer_off,
                                  const int64_t *dev_off, int page_frames, const int32_t *ptab,
                                  cosy_bf16 *out, int chunk,
                                  float scale);
/* tiles: int32 pairs (segment, first query of the tile within the segment), 64 queries a tile */
#define COSY_K_DIT_TILE 64
/* The same attention by a leaner kernel (cosy_k_attn_dit_paged_v2, kernels/attention.cu): the
 * same arguments and, row for row, the same bits as cosy_k_attn_dit_paged (the one-block
 * kernel's key-tile step, dit_tile_step, and its end), with tiles of tile_q queries:
 * COSY_K_DIT_TILE (64, blocks of 4 warps; the same tile list) or COSY_K_DIT_TILE_WIDE (128,
 * blocks of 8 warps: each staged K/V tile serves twice the queries; a list of 128-query tiles:
 * pairs (segment, first query), 128 queries a tile). Batch-invariant as cosy_k_attn_dit_paged: a
 * row's bits depend only on its query, its segment's keys up to its own last key and chunk (so
 * also not on tile_q). out must be 4-byte aligned (two outputs a store). cudaErrorInvalidValue
 * for another tile_q, an unaligned out, page_frames * D >= 2^31 and cosy_k_attn_dit_paged's bad
 * arguments. */
#define COSY_K_DIT_TILE_WIDE 128
cudaError_t cosy_k_attn_dit_paged_v2(cudaStream_t s, const cosy_bf16 *qkv, int D, int n_heads,
                                     const cosy_k_dit_seg *segs, const int32_t *tiles, int n_tiles,
                                     const cosy_bf16 *pool, int64_t page_elems, int64_t layer_off,
                                     const int64_t *dev_off, int page_frames, const int32_t *ptab,
                                     cosy_bf16 *out, int chunk, float scale, int tile_q);
/* cosy_k_attn_dit_paged_v2 (which keeps the double buffer) with its K/V pipeline chosen:
 * stages 2 (a double buffer, 36 KB of shared memory a 64-query block), 4 (three key tiles in
 * flight, 72 KB) or 0 (the rule the packed flow runs: 4 at 64-query tiles where the grid has at
 * most 2 blocks a multiprocessor of dev and dev->smem_block holds them, else 2; 2 without dev).
 * The same bits at every value. */
cudaError_t cosy_k_attn_dit_paged_v2_stages(
    cudaStream_t s, const cosy_bf16 *qkv, int D, int n_heads, const cosy_k_dit_seg *segs,
    const int32_t *tiles, int n_tiles, const cosy_bf16 *pool, int64_t page_elems,
    int64_t layer_off, const int64_t *dev_off, int page_frames, const int32_t *ptab,
    cosy_bf16 *out, int chunk, float scale, int tile_q, int stages, const cosy_kdev *dev);
/* The same attention with each query tile's keys split over n_split blocks (1 .. 8): key tile
 * t (keys 64 t .. 64 t + 63 of the segment) goes to part t % n_split; the n_split parts of a
 * query tile are the blocks of one thread-block cluster and merge through distributed shared
 * memory in ascending part order (kernels/attention.cu). Same arguments and results as
 * cosy_k_attn_dit_paged up to rounding (the sums are ordered differently); a row's bits depend
 * only on its query, its segment's keys and n_split, never on its tile or the rest of the
 * batch, so keep n_split fixed for an engine. For small calls
 * (few tiles x 16 heads blocks on a large GPU) the chain of key tiles each block walks is
 * n_split times shorter. No workspace; the grid is (n_tiles * n_split, n_heads), so the call
 * can be graph-captured. n_split 1: the one-block kernel (same bits as cosy_k_attn_dit_paged).
 * cudaErrorNotSupported for n_split >= 2 without dev->clusters (dev NULL: none);
 * cudaErrorInvalidValue for n_split outside [1, 8] and cosy_k_attn_dit_paged's bad arguments. */
#define COSY_K_DIT_SPLIT_MAX 8
cudaError_t cosy_k_attn_dit_paged_split(cudaStream_t s, const cosy_bf16 *qkv, int D, int n_heads,
                                        const cosy_k_dit_seg *segs, const int32_t *tiles,
                                        int n_tiles, const cosy_bf16 *pool, int64_t page_elems,
                                        int64_t layer_off, const int64_t *dev_off,
                                        int page_frames, const int32_t *ptab, cosy_bf16 *out,
                                        int chunk, float scale, int n_split,
                                        const cosy_kdev *dev);

/* The same attention with each query tile's part count chosen from its own segment
 * (cosy_k_attn_dit_paged_auto, kernels/attention.cu): S = cosy_k_dit_auto_parts(segment's Lk),
 * key tile t to part t % S and the merge in ascending part order as in
 * cosy_k_attn_dit_paged_split, so a segment with few keys runs the one-block loop (S = 1: the
 * same bits as cosy_k_attn_dit_paged) and a long one gets up to 8 parts, in one launch over a
 * mixed batch. S depends only on the segment's key count: a row's bits depend on its query and
 * its segment's keys, never on its tile, the other segments, n_tiles, the grid or the SM count.
 * The launch is a grid of thread-block clusters of C blocks (C = the largest S of the call),
 * each cluster one item of the list cosy_k_dit_auto_items builds on the host from the call's
 * segments and tiles: int32 pairs (tile, first head * 16 + S), the cluster's C blocks serving
 * C / S heads of the tile with S parts each; at C = 1 (every segment short) it is the
 * one-block kernel's launch over the n_items / n_heads tiles. No workspace; graph-capturable
 * (the items are read on the device, so a captured launch serves any list of the same n_items
 * and C). cudaErrorNotSupported without dev->clusters (dev NULL: none); cudaErrorInvalidValue
 * for n_items < 0, C not 1, 2, 4 or 8, items NULL with n_items > 0, n_items not a multiple of
 * n_heads at C = 1, and cosy_k_attn_dit_paged's bad arguments. */
static inline int cosy_k_dit_auto_parts(int Lk) {
  /* key tiles of 64: fewer than 4, one part (the split's merge costs more than it saves);
   * then about 2 key tiles a part, at most COSY_K_DIT_SPLIT_MAX */
  const int K = Lk > 0 ? (Lk + COSY_K_DIT_TILE - 1) / COSY_K_DIT_TILE : 0;
  return K >= 11 ? 8 : K >= 6 ? 4 : K >= 4 ? 2 : 1;
}
/* The cluster items of a call (host code): segs and tiles as for cosy_k_attn_dit_paged (host
 * copies), items room for cap pairs (n_tiles * n_heads always suffices). Returns the number of
 * items and sets *csize to C; -1 if cap is too small or an argument is bad (a tile naming a
 * segment past n_segs, n_heads < 1). */
int cosy_k_dit_auto_items(const cosy_k_dit_seg *segs, int n_segs, const int32_t *tiles,
                          int n_tiles, int n_heads, int32_t *items, int cap, int *csize);
cudaError_t cosy_k_attn_dit_paged_auto(cudaStream_t s, const cosy_bf16 *qkv, int D, int n_heads,
                                       const cosy_k_dit_seg *segs, const int32_t *tiles,
                                       const int32_t *items, int n_items, int csize,
                                       const cosy_bf16 *pool, int64_t page_elems,
                                       int64_t layer_off, const int64_t *dev_off, int page_frames,
                                       const int32_t *ptab, cosy_bf16 *out, int chunk,
                                       float scale, const cosy_kdev *dev);

/* ============================== gemm.cu ====================================================== */

/* cuBLASLt handle + workspace + a small cache of matmul plans. One per thread (not thread-safe);
 * create it once, outside graph capture. */
typedef struct cosy_gemm cosy_gemm;

/* workspace_bytes 0 means 32 MiB. Returns cudaSuccess or the failing CUDA/cuBLAS status mapped
 * to a cudaError_t (cudaErrorMemoryAllocation, cudaErrorNotSupported, cudaErrorUnknown). */
cudaError_t cosy_gemm_create(cosy_gemm **out, size_t workspace_bytes);
void cosy_gemm_destroy(cosy_gemm *g);
/* Test only (the knob COSY_GEMM_SAN_INIT, bench/device_run.sh sanitize): on != 0 clears each
 * plain GEMM's output rows before the GEMM, so that compute-sanitizer's initcheck, which does not
 * see the bulk (TMA) stores of cuBLASLt's sm_90 kernels, checks our kernels that read a GEMM's
 * output for what they read beyond it instead of reporting those stores. */
void cosy_gemm_set_san_init(cosy_gemm *g, int on);
/* Measurement only (bench/bench_kernels.c): the row buckets plans are made for: 2 (the default)
 * one per power of two of M, 0 a heuristic query per M, 1 one algorithm for every M > 64, 3
 * four buckets per octave. Set it before the first GEMM. */
void cosy_gemm_set_bucket(cosy_gemm *g, int mode);
/* The cublasStatus_t of the last cuBLAS call that failed in g (0 when none). */
int cosy_gemm_last_cublas_status(const cosy_gemm *g);
/* cuBLASLt heuristic queries the handle has made (plans are built per row bucket: gemm.cu) */
long cosy_gemm_heuristic_queries(const cosy_gemm *g);
/* Build the plans that cosy_k_gemm would build for this shape, these pointers' alignments and
 * every row bucket up to M_max (gemm.cu), so that the first calls of each size pay no heuristic
 * query (an engine does this at creation), and launch each bucket's
 * algorithm once on s at min(bucket, M_max) rows, with x's and y's first rows zeroed first, so
 * that CUDA loads its kernel now: x and y must hold M_max rows and may be overwritten. Same
 * argument rules as cosy_k_gemm; M_max <= 64 does nothing; M_max = -1: the plan of
 * cosy_k_gemm_inv (no launch). */
cudaError_t cosy_gemm_prewarm(cosy_gemm *g, cudaStream_t s, int M_max, int N, int K,
                              cosy_kdtype ab_dt, const void *x, int ldx, const void *w,
                              const float *bias, cosy_kdtype y_dt, void *y, int ldy,
                              int accumulate);

/* cosy_k_gemm_inv calls whose shared algorithm did not fit their M (then chosen for that M:
 * that call's rows are not batch-invariant); 0 expected */
long cosy_gemm_inv_fallbacks(const cosy_gemm *g);
/* cosy_gemm_prewarm for cosy_k_gemm_gelu's plans (the epilogue is part of a plan's key). */
cudaError_t cosy_gemm_prewarm_gelu(cosy_gemm *g, cudaStream_t s, int M_max, int N, int K,
                                   cosy_kdtype ab_dt, const void *x, int ldx, const void *w,
                                   const float *bias, const void *bias_y, cosy_kdtype y_dt,
                                   void *y, int ldy);
/* cosy_k_gemm_gelu plans built without the fused epilogue because cuBLASLt offered no algorithm
 * for it or refused it at run time (they run as GEMM + cosy_k_add_bias_gelu); 0 expected */
long cosy_gemm_epi_fallbacks(const cosy_gemm *g);
/* cosy_k_gemm_gelu plans fused with bias_y (the bias in y's type) because cuBLASLt offered no
 * algorithm for the fp32 bias */
long cosy_gemm_epi_bias_y(const cosy_gemm *g);
/* Test only: how cosy_k_gemm_gelu calls from now on run (plans of their own per mode): 1 (the
 * default) the fused form with the fp32 bias, else with bias_y, else the fallback; 0 the fallback
 * (GEMM, then cosy_k_add_bias_gelu; not counted); 2 the fused form with bias_y only. */
void cosy_gemm_set_gelu_epi(cosy_gemm *g, int mode);

/* y = x W^T (+ bias) (+ y when accumulate): y[m][n] = sum_k x[m][k] W[n][k] + bias[n] (+ y[m][n]).
 * x [M][ldx] (first K columns used), W [N][K] contiguous (a Linear weight [out][in]), both
 * ab_dt; bias [N] fp32 or NULL; y [M][ldy] (y_dt). fp32 accumulation (CUBLAS_COMPUTE_32F: true
 * fp32 for fp32 inputs, no TF32). Supported: ab bf16 -> y bf16 or fp32; ab fp32 -> y fp32. */
cudaError_t cosy_k_gemm(cosy_gemm *g, cudaStream_t s, int M, int N, int K, cosy_kdtype ab_dt,
                        const void *x, int ldx, const void *w, const float *bias,
                        cosy_kdtype y_dt, void *y, int ldy, int accumulate);
/* y = gelu_tanh(x W^T + bias), gelu_tanh(u) = 0.5 u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3))):
 * cosy_k_gemm's shapes and types (no accumulate), bias [N] fp32 or NULL, bias and GELU applied
 * in fp32 to the fp32 accumulator and y rounded once (cuBLASLt's CUBLASLT_EPILOGUE_GELU_BIAS).
 * bias_y (optional, NULL: none): the same bias stored in y_dt, used only where cuBLASLt refuses
 * the fp32 bias in the fused form (cosy_gemm_epi_bias_y); where it refuses both, GEMM then
 * cosy_k_add_bias_gelu with the fp32 bias (cosy_gemm_epi_fallbacks). */
cudaError_t cosy_k_gemm_gelu(cosy_gemm *g, cudaStream_t s, int M, int N, int K, cosy_kdtype ab_dt,
                             const void *x, int ldx, const void *w, const float *bias,
                             const void *bias_y, cosy_kdtype y_dt, void *y, int ldy);
/* cosy_k_gemm with one algorithm for every M of a shape (the heuristic's first candidate
 * without split-K at M = 2048 rows): a row's result is the same whatever
 * M computes it (batch-invariant; the LLM's prefill). cosy_gemm_prewarm with M_max = -1 builds
 * that algorithm's plan. */
cudaError_t cosy_k_gemm_inv(cosy_gemm *g, cudaStream_t s, int M, int N, int K, cosy_kdtype ab_dt,
                            const void *x, int ldx, const void *w, const float *bias,
                            cosy_kdtype y_dt, void *y, int ldy, int accumulate);

/* ============================== sample.cu ==================================================== */

/* out[r][i] = x[r][i] - max_r - log(sum_i exp(x[r][i] - max_r)) in fp32.
 * x [rows][in_stride] (in_dt, first n columns), out [rows][n] fp32. */
cudaError_t cosy_k_log_softmax(cudaStream_t s, cosy_kdtype in_dt, const void *x, int in_stride,
                               float *out, int rows, int n);

/* Top-k per row: the k largest of x[r][0..n), descending, ties by ascending index (a stable
 * descending sort's first k). x [rows][stride] fp32; vals [rows][k] fp32, idx [rows][k] int32.
 * 1 <= k <= 64, k <= n. NaNs are never selected; if fewer than k non-NaN values exist the tail is
 * (-inf, -1). */
cudaError_t cosy_k_topk(cudaStream_t s, const float *x, int stride, int rows, int n, int k,
                        float *vals, int32_t *idx);

/* RAS sampling on the GPU: exactly the algorithm of lib/ref/sampling.h (cosy_sample_ras), one
 * row per request, with the request's xoshiro256** state carried in and out, so the host and the
 * GPU draw the same sequence of uniforms. Limits of this kernel: n <= COSY_K_RAS_MAX_N,
 * top_k <= COSY_K_RAS_MAX_K, win_size <= COSY_K_RAS_MAX_HIST (otherwise sample on the host). */
#define COSY_K_RAS_MAX_N 8192
#define COSY_K_RAS_MAX_K 1024
#define COSY_K_RAS_MAX_HIST 32

typedef struct cosy_k_ras_row {
  uint64_t rng[4];     /* in: xoshiro256** state; out: the state after this row's draws */
  float temperature;   /* > 0 */
  float top_p;         /* (0, 1] */
  float tau_r;         /* >= 0 */
  int32_t top_k;       /* 1 .. COSY_K_RAS_MAX_K (clamped to n) */
  int32_t win_size;    /* 0 .. COSY_K_RAS_MAX_HIST */
  int32_t n_allowed;   /* ids >= n_allowed are masked (ignore_eos: 6561; else n) */
  int32_t n_hist;      /* entries of hist used: the LAST min(history, win_size) tokens, oldest
                          first */
  int32_t token;       /* out: the sampled id, or -1 when the row has a NaN (status 1) or no
                          finite log-prob among the allowed ids (status 2) */
  int32_t status;      /* out: 0 ok, 1 NaN, 2 nothing finite */
  int32_t hist[COSY_K_RAS_MAX_HIST];
} cosy_k_ras_row;

/* 1 when cosy_k_ras_sample supports these sizes. */
int cosy_k_ras_supported(int n, int top_k, int win_size);

/* For each r < rows: logp = log_softmax(logits[r][0..n)) (logits rows stride floats apart,
 * fp32; cosy_k_log_softmax's formula), written to logp_out [rows][n] unless NULL; then sample
 * rows[r].token from logp exactly as cosy_sample_ras would from that logp row, and advance
 * rows[r].rng; rows is device memory, read and written in place. One block of 1024 threads per
 * row. Differences from the host sampler on the same logp can only come from fp32 expf rounding
 * (1-2 ulp) and the order of double-precision sums, i.e. only for a uniform within ~1e-7
 * relative of a boundary between two tokens. (Given log-probs instead of logits, logp_out
 * equals them to rounding: log_softmax is idempotent.) */
cudaError_t cosy_k_ras_sample(cudaStream_t s, const float *logits, int stride, int rows, int n,
                              float *logp_out, cosy_k_ras_row *rows_io);

#ifdef __cplusplus
}
#endif

#endif
