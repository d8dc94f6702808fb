/* attention.cu - scaled dot-product attention for the LLM (paged decode, packed causal prefill
 * from the paged K/V) and the DiT (block-causal or full, contiguous or over cached pages).
 *
 * Math (every kernel): o[i] = sum_j softmax_j(scale * q[i].k[j]) v[j] over the allowed keys j,
 *   head_dim 64, GQA: q head h reads kv head h / (n_qh / n_kh).
 *   Allowed keys: decode j < seq_len; paged prefill j <= p
 *   (p = the row's position, Lk - n + its index in its segment); DiT block-causal
 *   j < (i / chunk + 1) * chunk (chunk 50), DiT full j < N.
 * Layouts: see kernels.h. Paged cache: cache[page][page_size][n_kh][64]; token t of sequence s
 *   is row t % page_size of page block_table[s][t / page_size].
 *
 * Thread mapping
 *   paged_decode (flash-decoding): grid (split, kv head, sequence), 256 threads; a split is
 *     DEC_SPLIT = 64 tokens (at most DEC_MAX_SPLITS = 128 splits: max_ctx <= 8192), so contexts
 *     longer than 64 positions are merged across splits (below). A block serves all n_qh/n_kh
 *     (<= 8) query heads of its kv head, so each K/V row is read once per block: (0) one round
 *     of independent loads (the length, the block-table entry of token t % 64, q into shared
 *     memory), the cache row index of each of the split's tokens into shared memory and an L2
 *     prefetch of each V row; (1) four threads per token (token t/4), each with a 16-dim quarter
 *     of the K row, G partial dots against q (float4 reads of shared memory) completed by two
 *     xor shuffles; (2) one warp per query head takes max and sum of exp2; (3) warp w
 *     accumulates p * v over tokens w, w + 8, ... (all its V loads issued first; lane l owns
 *     dims 2l, 2l + 1; its 8 p read as two float4: sm.sc holds token jj at dec_sci(jj), warp
 *     jj % 8's tokens side by side), the 8 warps' partial sums added in shared memory. q sits in
 *     shared memory as four 16-float quarters 20 floats apart (dec_qi), so the four quarters
 *     step (1) reads at once fall in distinct banks. With one split the block writes the
 *     normalized output. A block whose split lies past its sequence's end (split >=
 *     dec_used_splits(len): the grid's split count follows max_ctx, the context bucket) leaves
 *     right after reading the length: its (m, l, o) would be (-inf, 0, 0), an exact no-op in
 *     either merge, which therefore reads only the used splits (the same bits as merging all).
 *     With 2..8 splits on a device
 *     with thread-block clusters (kdevice.h: the description the caller passes, never the
 *     runtime's answer, so a test profile without clusters takes the other path) the splits of
 *     one (sequence, kv head) form a cluster and merge through distributed shared memory (a
 *     cluster barrier waits only for the blocks that have not exited): one round of loads
 *     brings every used split's (m, l) of the G heads, a warp a head forms M, the weights
 *     2^(m - M) and L in split order, then each output loads its S parts at once and adds them
 *     in split order. Otherwise each block writes (m, l, unnormalized o), fences, and bumps the
 *     (sequence, kv head) counter in the workspace; the block that arrives last (of the used
 *     splits) merges the splits of its G heads (three rounds of L2 loads, see
 *     decode_combine_if_last) and resets the counter to zero, so one launch does the whole
 *     attention and every graph replay finds the counters at zero. Compiled for DEC_MINB = 6
 *     blocks an SM (40 registers, no spill on sm_90; 54-61 and 4 blocks unbounded). With pdl
 *     the kernel is a programmatic dependent: it lets its own dependents (the o projection's
 *     weight stream) launch at once and waits (griddepcontrol) before it reads
 *     anything, except with the launch flag COSY_K_DECODE_EARLY (kernels.h; the LLM's knob
 *     COSY_LLM_ATTN_EARLY, behind gemv_tc only). Then decode_early_loads does (0) and the K
 *     loads of (1), those the previous kernel cannot affect before the wait: the length, the
 *     block-table entry and cache row of token t / 4 (step (1)'s mapping), that token's K
 *     quarter into registers and a prefetch of its V row, except for the newest token (len - 1:
 *     the q|k|v projection writes its K and V rows), all from L2 (ld.global.cg); q and the
 *     newest token's K quarter after the wait. The same values in the same arithmetic: the same
 *     bits. Measured (bench/device_run.sh attnpre, H200): the decode step 1-2% faster; lib/gpu/llm.c
 *     sets it by default.
 *   paged_prefill (fp32, the LLM's packed prefill): one block of G = n_qh / n_kh warps per (tile
 *     of 16 query positions of one segment, kv head); warp w serves query head kvh * G + w for the
 *     16 positions, so each K/V row is staged once for all G heads. Tiles come from the caller's
 *     list (segment, first query), so one launch covers every segment. Shared memory: K and V
 *     tiles of 32 keys (rows padded to 68 floats), each warp's 16 pre-scaled Q rows and its P
 *     tile [32 keys][16 rows]; 62 KB at G = 7, 69 KB at G = 8 (dynamic, refused above
 *     dev->smem_block). Per key tile: the block stages K and V straight from the cache pages
 *     (block-table lookup per key, float4 loads; keys past the tile's last position are zeros),
 *     then lane (rg = lane / 8, kg = lane % 8) of a warp computes the scores of rows rg + 4i
 *     (i < 4) x keys kg + 8jj (jj < 4) (float4 reads of Q and K, dims in order 0..63), the row
 *     max over the 8 lanes kg by xor shuffles, the online-softmax rescale, P to shared memory,
 *     and O += P V for dims 4kg..4kg+3 and 32+4kg..32+4kg+3 of its 4 rows (keys in order). The
 *     row sums are added over the 8 lanes by a butterfly at the end. Every row is computed by
 *     the same sequence of operations whatever its tile or lane: key tiles start at key 0, the
 *     last one a row reaches depends only on its position, and the fully masked key tiles a
 *     longer row of the same query tile adds are exact no-ops for it (rescale by exp2(0) = 1,
 *     p = 0 against finite V), so a row's bits do not depend on the rest of the batch.
 *   attn_dit_paged (DiT over a packed batch with cached pages): the DiT tile below with paged
 *     addressing; attn_dit_paged_split gives each (query tile, head) a cluster of S = 2..8
 *     blocks, key tile t to block t % S, merged through distributed shared memory in part
 *     order (see the comment above PagedGeo: the split rule and why it is batch-invariant);
 *     attn_dit_paged_auto picks the part count S per segment from its key count alone
 *     (cosy_k_dit_auto_parts: 1 below 4 key tiles, up to 8) in one launch of clusters of C
 *     blocks (C = the call's largest S), each cluster C / S heads of one query tile with S parts.
 *   attn_dit_paged_v2 (the same attention with less work around it; the packed flow's default,
 *     the flow's knob COSY_FLOW_ATTN_V2): one block of NW warps per (query
 *     tile of 16 NW queries of one segment, head), NW = 4 (64-query tiles, 128 threads) or 8
 *     (128-query tiles, 256 threads: each staged K/V tile serves twice the queries, half the K/V
 *     traffic from L2 and half the staging work per query). Warp w owns tile rows 16w .. 16w + 15
 *     and runs, per key tile, the one-block kernel's step on them (dit_tile_step, the one function
 *     all the DiT tensor-core kernels call: S = Q K^T by fa_qk, -inf past the row's last key, row
 *     max of the raw scores by two xor shuffles, u = max scale log2(e), alpha = 2^(u_old - u),
 *     o *= alpha, p = bf16(2^(fma(s, scale log2(e), -u))), O += P V by fa_pv (mma order kk, then
 *     dt), l = fma(l, alpha, the tile's row sum of the rounded P by 4 more mma against ones); the
 *     end is the one-block kernel's too: out = bf16(o * (1 / l)).
 *     So a row's bits are the one-block kernel's (tests/test_kernels.c test_attn_dit_paged
 *     compares them element for element). What changes is the work around that arithmetic:
 *     (1) staging: thread t copies dims 8 (t % 8) .. + 7 of key rows t / 8 + i (NT / 8) (i < 4 at
 *     NW 4, < 2 at NW 8; 8 threads a 128-byte row: whole sectors, conflict-free 16-byte shared
 *     stores) of K and V by cp.async into S buffers (S - 1 tiles in flight: 2 as before, or 4 at
 *     64-query tiles where the grid has at most 2 blocks an SM, as a single request's flow calls
 *     do, so that their 2-8 key tiles wait one L2 round trip rather than one a tile; the launch
 *     bound then lets a thread keep 168 registers; cosy_k_attn_dit_paged_v2_stages), but the page of cached key f is
 *     f / page_frames by a 64-bit multiply-high with a constant the host computes (PagedGeo
 *     pf_magic: exact for every f), and each row's address (one of two bases plus a product) is
 *     computed once a warp: lane j + 4 i (j < 4) resolves row 4 w + j + i NT / 8, and the 8 lanes
 *     that copy a row take its address by a shuffle (no division, no per-copy branch tree, no
 *     repeated 64-bit arithmetic: ~45 instructions a row and thread before). (2) A warp none of
 *     whose rows is in the tile (16 w >= the tile's query count) only stages and meets the
 *     barriers; a warp whose rows all end at or before key tile kt (the last row's key end,
 *     whi <= kt) skips that tile's products: for each such row the one-block kernel's tile is an
 *     exact no-op (scores -inf, max unchanged, alpha = 2^0 = 1, p = 0 against finite V:
 *     o * 1 + 0 = o, l * 1 + 0 = l), so skipping it keeps the bits. (3) The mask
 *     (dit_tile_step<true, MASK>): none on a key tile every row of the warp sees whole (kt + 64
 *     <= the first row's key end, wlo: no score would change); otherwise a compare of each
 *     score's key index within the tile (a constant) with kend - kt - 2 t4 and a select; the
 *     other kernels keep the key-index form and mask every tile. (4) The output:
 *     two bf16 a 4-byte store (same rounding as st). Shared memory: the two K and V buffers, 36,864
 *     bytes static, at either NW; 128 registers (__launch_bounds__(32 NW, 16 / NW): 16 warps an
 *     SM either way; sm_90, CUDA 13.0: no spills at NW 4 or 8). (5) The first K/V tile's copies
 *     are issued before the Q loads, so the two latencies
 *     overlap. Batch invariance: as the one-block kernel's (a row's bits depend on
 *     neither its tile, nor the tile size, nor the batch). Keys a row does not see never reach
 *     it in a skipped tile (with non-finite V there, 0 * inf would have made it NaN).
 *   attn (DiT), bf16 with 16-byte-aligned strides: FlashAttention-2 style, one block of
 *     4 warps per (64-query tile, head, batch); each warp owns 16 query rows. K and V tiles of 64
 *     keys are staged in shared memory (rows padded to 72 elements: conflict-free fragment
 *     loads), their B fragments read with ldmatrix (V's transposed: .trans), four 8x8 matrices
 *     an instruction; S = Q K^T and O += P V use mma.sync.m16n8k16 (bf16 in, fp32 accumulate) with the
 *     standard fragment layouts, so S stays in registers, P is re-packed from the S accumulators
 *     into A fragments, and the online-softmax rescale of O happens in registers (one key tile:
 *     dit_tile_step, which the paged DiT kernels below call too).
 *   attn, fp32 (or unaligned bf16): one warp per (query row, head, batch); keys in chunks of 32,
 *     lane l scores key c + l (whole 64-wide dot), online softmax over the chunk, then the warp
 *     accumulates p_j v_j with lane l owning dims l and l + 32.
 * Numerics: scores are scaled by scale * log2(e) and exponentiated with exp2 (max-subtracted,
 *   fp32; the tensor-core path by ex2.approx.ftz, see dit_tile_step); fp32 accumulation
 *   everywhere. The tensor-core path rounds P to bf16 before P V (as FlashAttention does) and
 *   normalizes by the sum of the rounded P (summed by the tensor cores); expected relative L2 error
 *   vs fp64 ~3e-3 for bf16 data. The fp32 paths (paged prefill included) are plain fp32
 *   arithmetic (~1e-6).
 *   A sequence with no keys (decode seq_len 0) yields a zero output row.
 */
#include "kcommon.cuh"

#include <cooperative_groups.h>

#include <string.h>

using namespace cosyk;

namespace {

constexpr int HD = 64;
constexpr float LOG2E_F = 1.4426950408889634f;

/* ------------------------------------------------------------------------------------------ */
/* Paged decode                                                                                */

constexpr int DEC_THREADS = 256;
constexpr int DEC_WARPS = DEC_THREADS / 32;
constexpr int DEC_MAXG = 8;
constexpr int DEC_SPLIT = 64;        /* tokens per split (block) */
constexpr int DEC_MAX_SPLITS = 128;  /* max_ctx <= 8192 */
constexpr int DEC_CLUSTER_MAX = 8;   /* splits merged through distributed shared memory (sm_90) */
constexpr int DEC_MAX_SEQ = 65535;   /* sequences per call (grid z) */
constexpr int DEC_TPW = DEC_SPLIT / DEC_WARPS; /* tokens of a split each warp takes in step (3) */
constexpr int DEC_QLD = 80; /* a head's q in shared memory: four 16-float quarters 20 floats
                               apart, so the 4 quarters step (1) reads at once sit in 4 distinct
                               groups of banks */
constexpr int DEC_MINB = 6; /* blocks an SM the kernel is compiled for (40 registers; 4 at the 54-61
                              it takes unbounded) */
/* where step (3)'s warp w finds token jj's score / p in sm.sc: warp jj % 8's 8 tokens side by
 * side (u = jj / 8 at w * 8 + u), so the warp reads them as two float4 */
__host__ __device__ constexpr int dec_sci(int jj) { return (jj & 7) * DEC_TPW + (jj >> 3); }
/* the splits of a sequence of len tokens that hold any (at least one: split 0 writes a zero row
 * for len 0). The others are exact no-ops in every merge (m = -inf, l = 0, o = 0: weight 0, and
 * a term l w or o w of 0 leaves the sums' bits as they are), so their blocks leave at once and
 * the merges read only these. */
__host__ __device__ constexpr int dec_used_splits(int len, int n_splits) {
  return len <= DEC_SPLIT ? 1 : min(n_splits, (len + DEC_SPLIT - 1) / DEC_SPLIT);
}
/* where dim d of a head's q sits in its row of sm.qs */
__host__ __device__ constexpr int dec_qi(int d) { return (d >> 4) * 20 + (d & 15); }

/* The workspace of the global merge: the split counters first, one per (sequence, kv head) of
 * the largest call (DEC_MAX_SEQ sequences), then the partial results of this call. The counters'
 * place must not depend on the call's n_seq: calls of different batch sizes share one workspace,
 * and a counter region sized by n_seq would overlap the partials another call wrote there (a
 * larger call would then find non-zero counters and merge before all splits arrived). */
__host__ __device__ constexpr size_t dec_counter_bytes(int n_kh) {
  return ((size_t)DEC_MAX_SEQ * (size_t)n_kh * sizeof(unsigned) + 15) / 16 * 16;
}

template <typename T> struct DecodeArgs {
  const T *q;
  int q_stride;
  const T *kc, *vc;
  const int32_t *bt;
  int max_pages;
  const int32_t *lens;
  int n_qh, n_kh, page_size;
  int n_splits;
  float scale_log2;
  T *out;
  int out_stride;
  float *part_o;  /* [n_seq][n_qh][n_splits][64] */
  float *part_ml; /* [n_seq][n_qh][n_splits][2] = (max, sum) in the exp2 domain */
  unsigned *count; /* [n_seq][n_kh] splits finished; zero between launches */
};

/* 8 consecutive elements (16-byte aligned) as fp32 */
__device__ __forceinline__ void load8(const float *p, float f[8]) {
  const float4 a = reinterpret_cast<const float4 *>(p)[0];
  const float4 b = reinterpret_cast<const float4 *>(p)[1];
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
  f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}
__device__ __forceinline__ void load8(const bf16 *p, float f[8]) {
  const uint4 t = *reinterpret_cast<const uint4 *>(p);
  f[0] = __uint_as_float(t.x << 16); f[1] = __uint_as_float(t.x & 0xffff0000u);
  f[2] = __uint_as_float(t.y << 16); f[3] = __uint_as_float(t.y & 0xffff0000u);
  f[4] = __uint_as_float(t.z << 16); f[5] = __uint_as_float(t.z & 0xffff0000u);
  f[6] = __uint_as_float(t.w << 16); f[7] = __uint_as_float(t.w & 0xffff0000u);
}
/* 2 consecutive elements (aligned to their size) as fp32 */
__device__ __forceinline__ void load2(const float *p, float f[2]) {
  const float2 a = *reinterpret_cast<const float2 *>(p);
  f[0] = a.x;
  f[1] = a.y;
}
__device__ __forceinline__ void load2(const bf16 *p, float f[2]) {
  const unsigned t = *reinterpret_cast<const unsigned *>(p);
  f[0] = __uint_as_float(t << 16);
  f[1] = __uint_as_float(t & 0xffff0000u);
}

/* Shared memory of one decode block. */
struct DecSmem {
  float qs[DEC_MAXG][DEC_QLD];            /* q * scale * log2(e), dim d at dec_qi(d) */
  float sc[DEC_MAXG][DEC_SPLIT];          /* scores, then p; token jj at dec_sci(jj) */
  float red_o[DEC_WARPS][DEC_MAXG][HD];   /* per-warp p . v partial sums */
  float po[DEC_MAXG][HD];                 /* this split's unnormalized o (cluster merge) */
  float comb_w[DEC_MAXG * DEC_MAX_SPLITS]; /* global merge: m, then the weights 2^(m - M) */
  float comb_l[DEC_MAXG * DEC_MAX_SPLITS];
  int rowi[DEC_SPLIT];                    /* cache row (page * page_size + offset) per token */
  float mrow[DEC_MAXG], lrow[DEC_MAXG];
  float Lm[DEC_MAXG]; /* cluster merge: sum_sp l 2^(m - M) per head */
  int is_last;
};

/* Global merge, called by every thread of a split block after it wrote its partials: the last
 * of the n_splits blocks of (seq, kv head) merges them into out and resets the counter. Three
 * steps, each one round of L2 loads: the splits' (m, l) into shared memory; per head the max M
 * and L = sum l 2^(m - M) (one warp per head, L added in split order by one lane, the same order
 * as the cluster merge), the weights 2^(m - M) replacing m; then
 * out[g][d] = sum_s w_s o_s[d] / L (the split loads of one output are independent). */
template <typename T>
__device__ __forceinline__ void decode_combine_if_last(const DecodeArgs<T> &a, int seq, int kvh,
                                                       int h0, int G, int S, DecSmem &sm) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int NS = a.n_splits; /* the partials' stride; S (dec_used_splits) of them arrive */
  __threadfence(); /* this block's partials are visible device-wide before the count moves */
  __syncthreads();
  unsigned *cnt = a.count + (size_t)seq * a.n_kh + kvh;
  if (tid == 0) sm.is_last = atomicAdd(cnt, 1u) == (unsigned)(S - 1);
  __syncthreads();
  if (!sm.is_last) return;
  __threadfence();
  float *mw = sm.comb_w, *lw = sm.comb_l;
  const size_t hb = (size_t)seq * a.n_qh + h0; /* first head of this block */
  for (int e = tid; e < G * S; e += DEC_THREADS) {
    const size_t pi = (hb + e / S) * NS + e % S;
    mw[e] = __ldcg(a.part_ml + pi * 2);
    lw[e] = __ldcg(a.part_ml + pi * 2 + 1);
  }
  __syncthreads();
  if (warp < G) {
    float M = -INFINITY;
    for (int sp = lane; sp < S; sp += 32) M = fmaxf(M, mw[warp * S + sp]);
    M = warp_max(M);
    for (int sp = lane; sp < S; sp += 32)
      mw[warp * S + sp] = M == -INFINITY ? 0.f : exp2f(mw[warp * S + sp] - M);
    __syncwarp();
    /* L in split order, as the cluster merge adds it: the result does not depend on which
     * merge ran, i.e. on the context bucket (the longest sequence of the batch) */
    if (lane == 0) {
      float L = 0.f;
      for (int sp = 0; sp < S; ++sp) L = fmaf(lw[warp * S + sp], mw[warp * S + sp], L);
      sm.lrow[warp] = L;
    }
  }
  __syncthreads();
  for (int e = tid; e < G * HD; e += DEC_THREADS) {
    const int g = e / HD, d = e % HD;
    const float *po = a.part_o + (hb + g) * NS * HD + d;
    float O = 0.f;
#pragma unroll 4
    for (int sp = 0; sp < S; ++sp) O = fmaf(__ldcg(po + (size_t)sp * HD), mw[g * S + sp], O);
    const float L = sm.lrow[g];
    st(a.out + (size_t)seq * a.out_stride + (size_t)(h0 + g) * HD + d, L > 0.f ? O / L : 0.f);
  }
  if (tid == 0) *cnt = 0u; /* ready for the next launch (all S used splits have counted) */
}

/* 8 consecutive elements (16-byte aligned) as fp32, loaded from L2 (ld.global.cg: never through
 * the L1 cache, so a line another SM writes meanwhile is never seen stale; the same values) */
__device__ __forceinline__ void load8_cg(const float *p, float f[8]) {
  const float4 a = __ldcg(reinterpret_cast<const float4 *>(p));
  const float4 b = __ldcg(reinterpret_cast<const float4 *>(p) + 1);
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
  f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}
__device__ __forceinline__ void load8_cg(const bf16 *p, float f[8]) {
  const uint4 t = __ldcg(reinterpret_cast<const uint4 *>(p));
  f[0] = __uint_as_float(t.x << 16); f[1] = __uint_as_float(t.x & 0xffff0000u);
  f[2] = __uint_as_float(t.y << 16); f[3] = __uint_as_float(t.y & 0xffff0000u);
  f[4] = __uint_as_float(t.z << 16); f[5] = __uint_as_float(t.z & 0xffff0000u);
  f[6] = __uint_as_float(t.w << 16); f[7] = __uint_as_float(t.w & 0xffff0000u);
}

/* EARLY's step (0) (paged_decode_kernel below, the launch flag COSY_K_DECODE_EARLY): the same
 * loads as the plain step (0) and the K loads of step (1), but those that the previous kernel
 * cannot affect are issued before pdl_wait(). That kernel (the q|k|v projection) writes q and
 * each sequence's newest K and V rows (token len - 1); the caller passes the flag only where
 * every kernel two or more launches back has completed when this one starts (the previous
 * kernel triggers its dependents after its own griddepcontrol.wait), so the lengths and block
 * tables (decode_prep) and the older tokens' rows (earlier steps) are final. Before the wait:
 * the length, the block-table entry of token tok = tid / 4 (step (1)'s mapping: four threads
 * per token), its cache row (into sm.rowi), this thread's 16-element quarter of its K row into
 * kf (not for the newest token) and an L2 prefetch of line tid % 4 of its V row (not for the
 * newest); after: q, and the newest token's K quarter and V prefetch (the four threads that
 * hold it). These loads go to L2 (.cg), where every SM's writes meet: nothing passes through
 * the L1 cache before the wait, so no L1 line read early can hold part of a row (or anything
 * else) that the previous kernel writes when it is read after the wait. Returns n, the tokens
 * of this split (block-uniform). */
template <typename T>
__device__ __forceinline__ int decode_early_loads(const DecodeArgs<T> &a, DecSmem &sm,
                                                  float kf[16], int &len_out, bool may_leave) {
  const int split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z, tid = threadIdx.x;
  const int G = a.n_qh / a.n_kh, h0 = kvh * G;
  const int tok = tid >> 2, qd = (tid & 3) * 16;
  const size_t tok_stride = (size_t)a.n_kh * HD;
  const int len = __ldcg(a.lens + seq);
  const int j0 = split * DEC_SPLIT;
  const int n = max(0, min(len, j0 + DEC_SPLIT) - j0);
  const int jt = j0 + tok;
  const int32_t bte =
      __ldcg(a.bt + (size_t)seq * a.max_pages + min(jt / a.page_size, a.max_pages - 1));
  len_out = len;
  if (may_leave && split >= dec_used_splits(len, a.n_splits)) return -1; /* block-uniform */
  const int r = bte * a.page_size + jt % a.page_size; /* used only below the length */
  const bool newest = tok < n && jt == len - 1;       /* written by the previous kernel */
  if (tok < n && (tid & 3) == 0) sm.rowi[tok] = r;
  const T *kp = a.kc + (size_t)r * tok_stride + (size_t)kvh * HD + qd;
  if (tok < n && !newest) {
    load8_cg(kp, kf);
    load8_cg(kp + 8, kf + 8);
  } else {
#pragma unroll
    for (int e = 0; e < 16; ++e) kf[e] = 0.f;
  }
  const int voff = (tid & 3) * 128; /* a 128-byte line of the V row (2 of fp32, 1 of bf16) */
  const char *vp =
      reinterpret_cast<const char *>(a.vc + (size_t)r * tok_stride + (size_t)kvh * HD) + voff;
  const bool vline = tok < n && voff < (int)(HD * sizeof(T));
  if (vline && !newest) asm volatile("prefetch.global.L2 [%0];" ::"l"(vp));
  pdl_wait();
  for (int e = tid; n > 0 && e < G * HD; e += DEC_THREADS) /* an empty split needs no q */
    sm.qs[e / HD][dec_qi(e % HD)] =
        ld(a.q + (size_t)seq * a.q_stride + (size_t)(h0 + e / HD) * HD + e % HD) * a.scale_log2;
  if (newest) {
    load8_cg(kp, kf);
    load8_cg(kp + 8, kf + 8);
    if (vline) asm volatile("prefetch.global.L2 [%0];" ::"l"(vp));
  }
  return n;
}

/* MERGE 0: one split (normalize in place); 1: global merge by the last block; 2: the splits of
 * one (kv head, sequence) form a thread-block cluster and merge through distributed shared
 * memory (sm_90 only). EARLY: step (0) and step (1)'s K loads by decode_early_loads (above),
 * most of them before pdl_wait(); the arithmetic is the same (the same values in the same
 * order), so the output bits are too. Without EARLY the code is what it was before the flag. */
template <typename T, int MERGE, bool EARLY>
__global__ void __launch_bounds__(DEC_THREADS, DEC_MINB) paged_decode_kernel(DecodeArgs<T> a) {
  __shared__ __align__(16) DecSmem sm;
  const int split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int G = a.n_qh / a.n_kh;
  const int h0 = kvh * G;
  pdl_trigger(); /* no-ops without a programmatic launch */
  float kfe[EARLY ? 16 : 1]; /* EARLY: this thread's quarter of its token's K row, for (1) */
  int n;                     /* tokens of this split; block-uniform */
  int len;                   /* the sequence's length */
  size_t tok_stride;         /* elements from one token's row to the next */
  if constexpr (EARLY) {
    n = decode_early_loads<T>(a, sm, kfe, len, MERGE != 0);
    if (n < 0) return; /* a split past the sequence's end (dec_used_splits) */
    tok_stride = (size_t)a.n_kh * HD;
  } else {
    pdl_wait();

    /* (0) one round of independent loads: the length, the block-table entry of token tid (index
     * clamped into the table; used only below the length) and q */
    len = a.lens[seq];
    const int j0 = split * DEC_SPLIT;
    const int32_t *bt = a.bt + (size_t)seq * a.max_pages;
    const int jt = j0 + (tid & (DEC_SPLIT - 1));
    const int32_t bte = bt[min(jt / a.page_size, a.max_pages - 1)];
    if (MERGE != 0 && split >= dec_used_splits(len, a.n_splits)) return; /* block-uniform */
    for (int e = tid; e < G * HD; e += DEC_THREADS)
      sm.qs[e / HD][dec_qi(e % HD)] =
          ld(a.q + (size_t)seq * a.q_stride + (size_t)(h0 + e / HD) * HD + e % HD) * a.scale_log2;
    n = max(0, min(len, j0 + DEC_SPLIT) - j0);
    tok_stride = (size_t)a.n_kh * HD;
    if (tid < n) {
      const int r = bte * a.page_size + jt % a.page_size;
      sm.rowi[tid] = r;
      /* the V row is needed after the softmax: start bringing it into L2 now */
      const char *vp =
          reinterpret_cast<const char *>(a.vc + (size_t)r * tok_stride + (size_t)kvh * HD);
#pragma unroll
      for (int off = 0; off < (int)(HD * sizeof(T)); off += 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(vp + off));
    }
  }
  __syncthreads();

  if (n > 0) {
    /* (1) scores: four threads per token, each a 16-dim quarter of its K row, G partial dots
     * against q (float4 reads of shared memory), completed by two xor shuffles */
    {
      const int tok = tid >> 2, qd = (tid & 3) * 16;
      float kf[16];
      if constexpr (EARLY) {
#pragma unroll
        for (int e = 0; e < 16; ++e) kf[e] = kfe[e];
      } else if (tok < n) {
        const T *kp = a.kc + (size_t)sm.rowi[tok] * tok_stride + (size_t)kvh * HD + qd;
        load8(kp, kf);
        load8(kp + 8, kf + 8);
      } else {
#pragma unroll
        for (int e = 0; e < 16; ++e) kf[e] = 0.f;
      }
      float acc[DEC_MAXG];
#pragma unroll
      for (int g = 0; g < DEC_MAXG; ++g) {
        acc[g] = 0.f;
        if (g < G) {
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const float4 q4 =
                *reinterpret_cast<const float4 *>(&sm.qs[g][dec_qi(qd) + 4 * c]);
            acc[g] = fmaf(q4.x, kf[4 * c], acc[g]);
            acc[g] = fmaf(q4.y, kf[4 * c + 1], acc[g]);
            acc[g] = fmaf(q4.z, kf[4 * c + 2], acc[g]);
            acc[g] = fmaf(q4.w, kf[4 * c + 3], acc[g]);
          }
        }
      }
#pragma unroll
      for (int g = 0; g < DEC_MAXG; ++g) {
        acc[g] += __shfl_xor_sync(0xffffffffu, acc[g], 1);
        acc[g] += __shfl_xor_sync(0xffffffffu, acc[g], 2);
      }
      if (tok < n) {
#pragma unroll
        for (int g = 0; g < DEC_MAXG; ++g)
          if (g < G && (g & 3) == (tid & 3)) sm.sc[g][dec_sci(tok)] = acc[g];
      }
    }
    __syncthreads();

    /* (2) softmax statistics, one warp per query head (8 warps >= G) */
    if (warp < G) {
      const int g = warp;
      float m = -INFINITY;
      for (int jj = lane; jj < n; jj += 32) m = fmaxf(m, sm.sc[g][dec_sci(jj)]);
      m = warp_max(m);
      float l = 0.f;
      for (int jj = lane; jj < n; jj += 32) {
        const float p = exp2f(sm.sc[g][dec_sci(jj)] - m);
        sm.sc[g][dec_sci(jj)] = p;
        l += p;
      }
      l = warp_sum(l);
      if (lane == 0) {
        sm.mrow[g] = m;
        sm.lrow[g] = l;
      }
    }
    __syncthreads();

    /* (3) p . v: warp w takes tokens w, w + 8, ... (all its V loads first: lane l reads dims
     * 2l, 2l + 1, one coalesced row per token), per head G two accumulators a lane, each over
     * the warp's tokens in order (its 8 p as two float4, dec_sci); the 8 warps' partial sums
     * are added in shared memory */
    {
      float vf[2 * DEC_TPW];
#pragma unroll
      for (int u = 0; u < DEC_TPW; ++u) {
        const int jj = warp + u * DEC_WARPS;
        if (jj < n) {
          load2(a.vc + (size_t)sm.rowi[jj] * tok_stride + (size_t)kvh * HD + 2 * lane,
                vf + 2 * u);
        } else {
          vf[2 * u] = vf[2 * u + 1] = 0.f;
        }
      }
#pragma unroll
      for (int g = 0; g < DEC_MAXG; ++g) {
        if (g < G) {
          const float4 pa = *reinterpret_cast<const float4 *>(&sm.sc[g][warp * DEC_TPW]);
          const float4 pb = *reinterpret_cast<const float4 *>(&sm.sc[g][warp * DEC_TPW + 4]);
          const float p[DEC_TPW] = {pa.x, pa.y, pa.z, pa.w, pb.x, pb.y, pb.z, pb.w};
          float o0 = 0.f, o1 = 0.f;
#pragma unroll
          for (int u = 0; u < DEC_TPW; ++u) {
            if (warp + u * DEC_WARPS < n) {
              o0 = fmaf(p[u], vf[2 * u], o0);
              o1 = fmaf(p[u], vf[2 * u + 1], o1);
            }
          }
          *reinterpret_cast<float2 *>(&sm.red_o[warp][g][2 * lane]) = make_float2(o0, o1);
        }
      }
    }
    __syncthreads();
  }

  for (int e = tid; e < G * HD; e += DEC_THREADS) {
    const int g = e / HD, d = e % HD;
    float o = 0.f;
    if (n > 0) {
#pragma unroll
      for (int w = 0; w < DEC_WARPS; ++w) o += sm.red_o[w][g][d];
    }
    if (MERGE == 0) {
      st(a.out + (size_t)seq * a.out_stride + (size_t)(h0 + g) * HD + d,
         n > 0 ? o / sm.lrow[g] : 0.f);
    } else if (MERGE == 1) {
      const size_t pi = ((size_t)seq * a.n_qh + h0 + g) * a.n_splits + split;
      a.part_o[pi * HD + d] = o;
      if (d == 0) {
        a.part_ml[pi * 2] = n > 0 ? sm.mrow[g] : -INFINITY;
        a.part_ml[pi * 2 + 1] = n > 0 ? sm.lrow[g] : 0.f;
      }
    } else {
      sm.po[g][d] = o;
    }
  }
  if (MERGE == 1)
    decode_combine_if_last<T>(a, seq, kvh, h0, G, dec_used_splits(len, a.n_splits), sm);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (MERGE == 2) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    if (tid < G && n == 0) {
      sm.mrow[tid] = -INFINITY;
      sm.lrow[tid] = 0.f;
    }
    cluster.sync(); /* every used split's po / mrow / lrow are written */
    const int S = dec_used_splits(len, a.n_splits); /* the blocks still here: ranks 0 .. S - 1 */
    /* every used split's (m, l) of the G heads into this block's comb_w / comb_l: one round of
     * distributed shared memory loads */
    for (int e = tid; e < G * S; e += DEC_THREADS) {
      const DecSmem *o = cluster.map_shared_rank(&sm, e % S);
      sm.comb_w[e] = o->mrow[e / S];
      sm.comb_l[e] = o->lrow[e / S];
    }
    __syncthreads();
    /* per head (warp g, lane sp < S): M = max_sp m, the weights 2^(m - M) replacing m (0 when
     * every split is empty: M = -inf), then L = sum_sp l w in split order (lane 0) */
    if (warp < G) {
      const float m = lane < S ? sm.comb_w[warp * S + lane] : -INFINITY;
      const float M = warp_max(m);
      if (lane < S) sm.comb_w[warp * S + lane] = M == -INFINITY ? 0.f : exp2f(m - M);
      __syncwarp();
      if (lane == 0) {
        float L = 0.f;
        for (int sp = 0; sp < S; ++sp)
          L = fmaf(sm.comb_l[warp * S + sp], sm.comb_w[warp * S + sp], L);
        sm.Lm[warp] = L;
      }
    }
    __syncthreads();
    /* out = sum_sp w o_sp / L, the S parts loaded at once, added in split order; the outputs
     * shared among the blocks of the cluster */
    const int per = (G * HD + S - 1) / S; /* outputs merged by each block of the cluster */
    const int r = (int)cluster.block_rank();
    for (int e = r * per + tid; e < min(G * HD, (r + 1) * per); e += DEC_THREADS) {
      const int g = e / HD, d = e % HD;
      float po[DEC_CLUSTER_MAX];
#pragma unroll
      for (int sp = 0; sp < DEC_CLUSTER_MAX; ++sp)
        po[sp] = sp < S ? cluster.map_shared_rank(&sm, sp)->po[g][d] : 0.f;
      float O = 0.f;
#pragma unroll
      for (int sp = 0; sp < DEC_CLUSTER_MAX; ++sp)
        if (sp < S) O = fmaf(po[sp], sm.comb_w[g * S + sp], O);
      const float L = sm.Lm[g];
      st(a.out + (size_t)seq * a.out_stride + (size_t)(h0 + g) * HD + d, L > 0.f ? O / L : 0.f);
    }
    cluster.sync(); /* no block leaves while another still reads its shared memory */
  }
#endif
}

/* splits of DEC_SPLIT tokens over max_ctx (the grid depends only on max_ctx) */
int decode_n_splits(int max_ctx) { return max_ctx <= 0 ? 1 : (max_ctx + DEC_SPLIT - 1) / DEC_SPLIT; }

/* ------------------------------------------------------------------------------------------ */
/* Paged prefill (fp32, packed segments)                                                       */

constexpr int PF_BQ = COSY_K_PREFILL_TILE; /* query positions of a tile: 16 rows per warp */
constexpr int PF_BK = 32;                  /* keys of one K/V tile */
constexpr int PF_LD = HD + 4;              /* padded fp32 row of Q, K, V in shared memory */
constexpr int PF_MAXG = 8;                 /* query heads per kv head: warps per block */

struct PrefillArgs {
  const float *q;
  int q_stride;
  const float *kc, *vc;
  const int32_t *bt;
  int pages_per_seq;
  const cosy_k_prefill_seg *segs;
  const int32_t *tiles;
  int n_kh, page_size;
  float scale_log2;
  float *out;
  int out_stride;
};

/* floats of shared memory for G query heads per kv head: K and V tiles, each warp's Q rows and
 * its P tile */
size_t prefill_smem_floats(int G) {
  return (size_t)2 * PF_BK * PF_LD + (size_t)G * PF_BQ * PF_LD + (size_t)G * PF_BK * PF_BQ;
}

__global__ void __launch_bounds__(PF_MAXG * 32) paged_prefill_kernel(PrefillArgs a) {
  extern __shared__ __align__(16) float pf_smem[];
  const int G = (int)(blockDim.x >> 5);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int rg = lane >> 3, kg = lane & 7; /* rows rg + 4i (i < 4); keys kg + 8jj, dims 4kg.. */
  const int kvh = blockIdx.y, h = kvh * G + warp;
  const cosy_k_prefill_seg sg = a.segs[a.tiles[2 * blockIdx.x]];
  const int t0 = a.tiles[2 * blockIdx.x + 1];
  const int nq = min(PF_BQ, sg.n - t0);
  const int p0 = sg.Lk - sg.n + t0; /* position of the tile's first query */
  const int kend_blk = p0 + nq;     /* keys any row of the tile attends */
  float *Ks = pf_smem, *Vs = Ks + PF_BK * PF_LD;
  float *Qs = Vs + PF_BK * PF_LD + (size_t)warp * PF_BQ * PF_LD;
  float *Ps = pf_smem + 2 * PF_BK * PF_LD + (size_t)G * PF_BQ * PF_LD + (size_t)warp * PF_BK * PF_BQ;
  const int32_t *bt = a.bt + (size_t)sg.seq * a.pages_per_seq;
  const size_t tok_stride = (size_t)a.n_kh * HD;

  /* this warp's query head, 16 rows, pre-scaled by scale * log2(e) (rows past n: zeros) */
  for (int c = lane; c < PF_BQ * (HD / 4); c += 32) {
    const int r = c >> 4, d = (c & 15) * 4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < nq)
      v = *reinterpret_cast<const float4 *>(a.q + (size_t)(sg.row0 + t0 + r) * a.q_stride +
                                            (size_t)h * HD + d);
    v.x *= a.scale_log2;
    v.y *= a.scale_log2;
    v.z *= a.scale_log2;
    v.w *= a.scale_log2;
    *reinterpret_cast<float4 *>(Qs + r * PF_LD + d) = v;
  }
  int kend[4]; /* row rg + 4i attends keys j < kend[i] (0: a row past n) */
#pragma unroll
  for (int i = 0; i < 4; ++i) kend[i] = rg + 4 * i < nq ? p0 + rg + 4 * i + 1 : 0;
  float o[4][8], m[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) o[i][e] = 0.f;
  }

  for (int kt = 0; kt < kend_blk; kt += PF_BK) {
    __syncthreads(); /* the previous tile (K, V, P) is no longer read; Q is written */
    /* stage keys kt .. kt + 31 of K and V (keys from kend_blk on: zeros) */
    for (int c = tid; c < 2 * PF_BK * (HD / 4); c += blockDim.x) {
      const int isv = c >= PF_BK * (HD / 4);
      const int e = isv ? c - PF_BK * (HD / 4) : c;
      const int r = e >> 4, d = (e & 15) * 4, j = kt + r;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (j < kend_blk) {
        const size_t slot = (size_t)bt[j / a.page_size] * a.page_size + j % a.page_size;
        v = *reinterpret_cast<const float4 *>((isv ? a.vc : a.kc) + slot * tok_stride +
                                              (size_t)kvh * HD + d);
      }
      *reinterpret_cast<float4 *>((isv ? Vs : Ks) + r * PF_LD + d) = v;
    }
    __syncthreads();

    /* S = Q K^T: rows rg + 4i, keys kg + 8jj; dims in order 0..63 */
    float sc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) sc[i][jj] = 0.f;
#pragma unroll 4
    for (int d = 0; d < HD; d += 4) {
      float4 qv[4], kv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        qv[i] = *reinterpret_cast<const float4 *>(Qs + (rg + 4 * i) * PF_LD + d);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj)
        kv[jj] = *reinterpret_cast<const float4 *>(Ks + (kg + 8 * jj) * PF_LD + d);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          float t = sc[i][jj];
          t = fmaf(qv[i].x, kv[jj].x, t);
          t = fmaf(qv[i].y, kv[jj].y, t);
          t = fmaf(qv[i].z, kv[jj].z, t);
          t = fmaf(qv[i].w, kv[jj].w, t);
          sc[i][jj] = t;
        }
    }

    /* online softmax per row (the row's 32 keys are on the 8 lanes kg of its row group) */
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int j = kt + kg + 8 * jj;
        sc[i][jj] = j < kend[i] ? sc[i][jj] : -INFINITY;
        mx = fmaxf(mx, sc[i][jj]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      const float mn = fmaxf(m[i], mx);
      const float mu = mn == -INFINITY ? 0.f : mn;
      const float al = exp2f(m[i] - mu);
      m[i] = mn;
      l[i] *= al;
#pragma unroll
      for (int e = 0; e < 8; ++e) o[i][e] *= al;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const float p = exp2f(sc[i][jj] - mu);
        l[i] += p;
        sc[i][jj] = p;
      }
    }
    /* P to this warp's tile: Ps[key][4 rg + i] holds row rg + 4i */
#pragma unroll
    for (int jj = 0; jj < 4; ++jj)
      *reinterpret_cast<float4 *>(Ps + (kg + 8 * jj) * PF_BQ + 4 * rg) =
          make_float4(sc[0][jj], sc[1][jj], sc[2][jj], sc[3][jj]);
    __syncwarp();

    /* O += P V: rows rg + 4i, dims 4kg..4kg+3 and 32+4kg..; keys in order 0..31 */
#pragma unroll 4
    for (int k = 0; k < PF_BK; ++k) {
      const float4 p = *reinterpret_cast<const float4 *>(Ps + k * PF_BQ + 4 * rg);
      const float4 va = *reinterpret_cast<const float4 *>(Vs + k * PF_LD + 4 * kg);
      const float4 vb = *reinterpret_cast<const float4 *>(Vs + k * PF_LD + 32 + 4 * kg);
      const float pr[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        o[i][0] = fmaf(pr[i], va.x, o[i][0]);
        o[i][1] = fmaf(pr[i], va.y, o[i][1]);
        o[i][2] = fmaf(pr[i], va.z, o[i][2]);
        o[i][3] = fmaf(pr[i], va.w, o[i][3]);
        o[i][4] = fmaf(pr[i], vb.x, o[i][4]);
        o[i][5] = fmaf(pr[i], vb.y, o[i][5]);
        o[i][6] = fmaf(pr[i], vb.z, o[i][6]);
        o[i][7] = fmaf(pr[i], vb.w, o[i][7]);
      }
    }
  }

  /* the row sums (a butterfly: the same bits on all 8 lanes), then the normalized rows */
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 4);
    const int r = rg + 4 * i;
    if (r < nq) {
      const float inv = 1.f / l[i];
      float *op = a.out + (size_t)(sg.row0 + t0 + r) * a.out_stride + (size_t)h * HD;
      *reinterpret_cast<float4 *>(op + 4 * kg) =
          make_float4(o[i][0] * inv, o[i][1] * inv, o[i][2] * inv, o[i][3] * inv);
      *reinterpret_cast<float4 *>(op + 32 + 4 * kg) =
          make_float4(o[i][4] * inv, o[i][5] * inv, o[i][6] * inv, o[i][7] * inv);
    }
  }
}

/* ------------------------------------------------------------------------------------------ */
/* DiT attention (contiguous K/V)                                                              */

struct AttnGeo {
  int Lq, Lk, n_qh, n_kh;
  int q_stride, kv_stride, o_stride;
  int64_t q_bstride, kv_bstride, o_bstride;
  int mode; /* 0 full, 2 block-causal (chunk) */
  int chunk;
  float scale_log2;
};

__device__ __forceinline__ int kv_end(const AttnGeo &g, int i) {
  int e = g.Lk;
  if (g.mode == 2) e = min(e, (i / g.chunk + 1) * g.chunk);
  return e;
}

constexpr int SIMPLE_WARPS = 4;

template <typename T>
__global__ void __launch_bounds__(SIMPLE_WARPS * 32)
attn_simple_kernel(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                   T *__restrict__ o, AttnGeo g) {
  __shared__ float qs[SIMPLE_WARPS][HD];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int i = blockIdx.x * SIMPLE_WARPS + warp;
  const int h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (g.n_qh / g.n_kh);
  if (i >= g.Lq) return; /* whole warp; no block-wide barrier below */
  const T *qp = q + b * g.q_bstride + (size_t)i * g.q_stride + (size_t)h * HD;
  qs[warp][lane] = ld(qp + lane) * g.scale_log2;
  qs[warp][lane + 32] = ld(qp + lane + 32) * g.scale_log2;
  __syncwarp();
  const T *kb = k + b * g.kv_bstride + (size_t)kvh * HD;
  const T *vb = v + b * g.kv_bstride + (size_t)kvh * HD;
  const int kend = kv_end(g, i);
  float m = -INFINITY, l = 0.f, o0 = 0.f, o1 = 0.f;
  for (int c = 0; c < kend; c += 32) {
    const int j = c + lane;
    float s = -INFINITY;
    if (j < kend) {
      const T *kp = kb + (size_t)j * g.kv_stride;
      float acc = 0.f;
#pragma unroll 16
      for (int d = 0; d < HD; ++d) acc = fmaf(qs[warp][d], ld(kp + d), acc);
      s = acc;
    }
    const float mn = fmaxf(m, warp_max(s)); /* finite: key c is always allowed */
    const float alpha = exp2f(m - mn);
    const float p = exp2f(s - mn);
    l = l * alpha + warp_sum(p);
    o0 *= alpha;
    o1 *= alpha;
    const int nk = min(32, kend - c);
    for (int jj = 0; jj < nk; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      const T *vp = vb + (size_t)(c + jj) * g.kv_stride;
      o0 = fmaf(pj, ld(vp + lane), o0);
      o1 = fmaf(pj, ld(vp + lane + 32), o1);
    }
    m = mn;
  }
  T *op = o + b * g.o_bstride + (size_t)i * g.o_stride + (size_t)h * HD;
  st(op + lane, o0 / l);
  st(op + lane + 32, o1 / l);
}

constexpr int FA_BQ = 64, FA_BK = 64, FA_THREADS = 128, FA_LD = HD + 8;

/* 16-byte global -> shared copy (cp.async.cg); src_bytes 0 writes zeros and reads nothing */
__device__ __forceinline__ void cp_async16_zfill(void *smem, const void *gmem, int src_bytes) {
  const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait_n() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ uint32_t ld_u32(const bf16 *p) {
  return *reinterpret_cast<const uint32_t *>(p);
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 t = __floats2bfloat162_rn(lo, hi); /* lo -> low half */
  return *reinterpret_cast<const uint32_t *>(&t);
}

/* D = A B + D, A 16x16 (row), B 16x8 (col), bf16 in, fp32 accumulate. */
__device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], uint32_t b0,
                                          uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four 8x8 bf16 matrices from shared memory in one instruction (ldmatrix): lane l gives the
 * address of row l % 8 of matrix l / 8 (16-byte aligned). r[i] is matrix i's fragment: thread t
 * holds row t / 4, columns 2 (t % 4), 2 (t % 4) + 1 (ldsm4), or with .trans (ldsm4_t) column
 * t / 4, rows 2 (t % 4), 2 (t % 4) + 1, the lower index in the low half. */
__device__ __forceinline__ void ldsm4(uint32_t r[4], const bf16 *p) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm4_t(uint32_t r[4], const bf16 *p) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
/* S += Q K^T for one 16-row A tile (qa, 4 k16 steps) and 64 keys of Ks [key][FA_LD]: for each
 * 8-key n tile, two ldmatrix.x4 give the B fragments of the four k16 steps (matrix rows = keys,
 * columns = 8 dims: b0 = dims 16kk..+7, b1 = 16kk+8..+15); the mma order is nt, then kk */
__device__ __forceinline__ void fa_qk(float s[8][4], const uint32_t qa[4][4], const bf16 *Ks,
                                      int lane) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    uint32_t kb[2][4];
#pragma unroll
    for (int kp = 0; kp < 2; ++kp)
      ldsm4(kb[kp], &Ks[(nt * 8 + (lane & 7)) * FA_LD + kp * 32 + (lane >> 3) * 8]);
    s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      mma_16816(s[nt], qa[kk], kb[kk >> 1][(kk & 1) * 2], kb[kk >> 1][(kk & 1) * 2 + 1]);
  }
}
/* O += P V for P's A fragments (pa, 4 k16 steps of 16 keys) and Vs [key][FA_LD]: per k16 step,
 * four ldmatrix.x4.trans give the B fragments of the 8 dim tiles (matrix rows = keys, so the
 * transpose puts two consecutive keys of one dim in a register); the mma order is kk, then dt */
__device__ __forceinline__ void fa_pv(float oacc[8][4], const uint32_t pa[4][4], const bf16 *Vs,
                                      int lane) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int dp = 0; dp < 4; ++dp) {
      uint32_t vb[4];
      ldsm4_t(vb, &Vs[key * FA_LD + dp * 16 + (lane >> 4) * 8]);
      mma_16816(oacc[2 * dp], pa[kk], vb[0], vb[1]);
      mma_16816(oacc[2 * dp + 1], pa[kk], vb[2], vb[3]);
    }
  }
}

/* 2^x by the MUFU unit with subnormal results flushed to zero (ex2.approx.ftz.f32; exp2f adds a
 * range test and two multiplies around it). Inputs here are <= ~0: results in [0, 1], and a
 * result below 2^-126 (a weight that small adds nothing a bf16 P could carry) is 0. */
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* One key tile of the online softmax of the DiT's tensor-core kernels for one warp's 16 query
 * rows (qa: their A fragments; the thread's rows grp and grp + 8 are C-fragment elements 0, 1 and
 * 2, 3), Ks / Vs the tile's 64 staged keys [key][FA_LD], m0 / m1, l0 / l1 and oacc the rows'
 * running max (of the raw scores), sum and output:
 *   S = Q K^T (fa_qk), raw (unscaled) scores, -inf where the key is past the row's last one
 *   (MASK; a caller passes MASK = false for a tile every row of the warp sees whole, where the
 *   mask would change nothing); m' = max(m, the tile's row max) (n tiles in order, then xor 1
 *   and xor 2 shuffles; fmaxf is exact; the max of the raw scores is the max of the scaled ones,
 *   scale > 0); u = m' scale log2(e) in one rounding (0 while m' = -inf: no key yet), u_old the
 *   same product of m; alpha = 2^(u_old - u) (exactly 1 when the max did not move); o *= alpha;
 *   p = bf16(2^(fma(s, scale log2(e), -u))); O += P V (fa_pv: mma order kk, then dt); the tile's
 *   row sums of the rounded P by the tensor cores: ls = P 1 (a ninth n tile whose B is all ones,
 *   mma order kk, from zero; every element of a row's C fragment holds its sum over the 64 keys,
 *   so no shuffle is needed), l = fma(l, alpha, ls).
 * 2^x is ex2_ftz. The contiguous, one-block paged, split-part and v2 kernels all run this per
 * key tile, so a row that sees the same key tiles in the same order gets the same bits from
 * each. A tile in which a row sees no key is an exact no-op for it (its max does not move:
 * alpha = 2^0 = 1, p = 2^-inf = 0 against finite V: o * 1 + 0 = o, l * 1 + 0 = l).
 * REL only picks how the key mask is computed (the same mask, so the same values): false, the
 * key index jb + nt * 8 + (e & 1) (jb = kt + 2 t4, the thread's first key of the tile) against
 * the row's key end k0 / k1; true (v2), the in-tile index nt * 8 + (e & 1), a constant, against
 * k0 / k1 = key end - kt - 2 t4 (jb unused). */
template <bool REL, bool MASK = true>
__device__ __forceinline__ void dit_tile_step(float oacc[8][4], float &m0, float &m1,
                                              float &l0, float &l1, const uint32_t qa[4][4],
                                              const bf16 *Ks, const bf16 *Vs, int lane, int k0,
                                              int k1, int jb, float scale_log2) {
  float s[8][4];
  fa_qk(s, qa, Ks, lane);
  if constexpr (MASK) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = REL ? nt * 8 + (e & 1) : jb + nt * 8 + (e & 1);
        s[nt][e] = j < (e < 2 ? k0 : k1) ? s[nt][e] : -INFINITY;
      }
  }
  float mx0 = m0, mx1 = m1;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    mx0 = fmaxf(fmaxf(mx0, s[nt][0]), s[nt][1]);
    mx1 = fmaxf(fmaxf(mx1, s[nt][2]), s[nt][3]);
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  /* u = m' scale log2(e) (0 with no key yet); u_old of the previous max the same way (the same
   * product when the max did not move, so alpha is exactly 1) */
  const float mu0 = mx0 == -INFINITY ? 0.f : __fmul_rn(mx0, scale_log2);
  const float mu1 = mx1 == -INFINITY ? 0.f : __fmul_rn(mx1, scale_log2);
  const float al0 = ex2_ftz(__fsub_rn(__fmul_rn(m0, scale_log2), mu0)); /* -inf m: 0 */
  const float al1 = ex2_ftz(__fsub_rn(__fmul_rn(m1, scale_log2), mu1));
  m0 = mx0;
  m1 = mx1;
#pragma unroll
  for (int dt = 0; dt < 8; ++dt) {
    oacc[dt][0] *= al0;
    oacc[dt][1] *= al0;
    oacc[dt][2] *= al1;
    oacc[dt][3] *= al1;
  }
  /* P (bf16) as A fragments: keys 16kk..16kk+15 are n-tiles 2kk and 2kk+1 */
  uint32_t pa[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int nt = 2 * kk + half;
      pa[kk][2 * half] = pack_bf16(ex2_ftz(fmaf(s[nt][0], scale_log2, -mu0)),
                                   ex2_ftz(fmaf(s[nt][1], scale_log2, -mu0)));
      pa[kk][2 * half + 1] = pack_bf16(ex2_ftz(fmaf(s[nt][2], scale_log2, -mu1)),
                                       ex2_ftz(fmaf(s[nt][3], scale_log2, -mu1)));
    }
  }
  fa_pv(oacc, pa, Vs, lane);
  constexpr uint32_t ONES = 0x3f803f80u; /* two bf16 1.0 */
  float ls[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) mma_16816(ls, pa[kk], ONES, ONES);
  l0 = fmaf(l0, al0, ls[0]);
  l1 = fmaf(l1, al1, ls[2]);
}

/* Fragment layouts of mma.m16n8k16 (PTX ISA), lane = 4 * grp + t4:
 *   A (16x16): reg0 = A[grp][2t4..+1], reg1 = A[grp+8][2t4..+1], reg2 = A[grp][2t4+8..+9],
 *              reg3 = A[grp+8][2t4+8..+9]
 *   B (16x8):  reg0 = B[2t4..+1][grp], reg1 = B[2t4+8..+9][grp]
 *   C (16x8):  c0,c1 = C[grp][2t4..+1], c2,c3 = C[grp+8][2t4..+1] */
__global__ void __launch_bounds__(FA_THREADS, 4)
attn_flash_bf16_kernel(const bf16 *__restrict__ q, const bf16 *__restrict__ k,
                       const bf16 *__restrict__ v, bf16 *__restrict__ o, AttnGeo g) {
  __shared__ __align__(16) bf16 Ks[FA_BK * FA_LD];
  __shared__ __align__(16) bf16 Vs[FA_BK * FA_LD];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int grp = lane >> 2, t4 = lane & 3;
  const int h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (g.n_qh / g.n_kh);
  const int q0 = blockIdx.x * FA_BQ;
  const int r0 = q0 + warp * 16 + grp, r1 = r0 + 8;
  const bf16 *qb = q + b * g.q_bstride + (size_t)h * HD;
  const bf16 *kb = k + b * g.kv_bstride + (size_t)kvh * HD;
  const bf16 *vb = v + b * g.kv_bstride + (size_t)kvh * HD;

  uint32_t qa[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const int c0 = kk * 16 + 2 * t4;
    const bf16 *p0 = qb + (size_t)r0 * g.q_stride + c0;
    const bf16 *p1 = qb + (size_t)r1 * g.q_stride + c0;
    qa[kk][0] = r0 < g.Lq ? ld_u32(p0) : 0u;
    qa[kk][1] = r1 < g.Lq ? ld_u32(p1) : 0u;
    qa[kk][2] = r0 < g.Lq ? ld_u32(p0 + 8) : 0u;
    qa[kk][3] = r1 < g.Lq ? ld_u32(p1 + 8) : 0u;
  }

  float oacc[8][4];
#pragma unroll
  for (int dt = 0; dt < 8; ++dt) oacc[dt][0] = oacc[dt][1] = oacc[dt][2] = oacc[dt][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
  const int kend_blk = kv_end(g, min(q0 + FA_BQ, g.Lq) - 1);
  const int kend0 = kv_end(g, r0), kend1 = kv_end(g, r1);

  for (int kt = 0; kt < kend_blk; kt += FA_BK) {
    __syncthreads(); /* the previous tile is no longer read */
    for (int c = tid; c < FA_BK * (HD / 8); c += FA_THREADS) {
      const int r = c >> 3, cc = (c & 7) * 8;
      const int j = kt + r;
      uint4 kv4 = make_uint4(0u, 0u, 0u, 0u), vv4 = make_uint4(0u, 0u, 0u, 0u);
      if (j < g.Lk) {
        kv4 = *reinterpret_cast<const uint4 *>(kb + (size_t)j * g.kv_stride + cc);
        vv4 = *reinterpret_cast<const uint4 *>(vb + (size_t)j * g.kv_stride + cc);
      }
      *reinterpret_cast<uint4 *>(&Ks[r * FA_LD + cc]) = kv4;
      *reinterpret_cast<uint4 *>(&Vs[r * FA_LD + cc]) = vv4;
    }
    __syncthreads();

    dit_tile_step<false>(oacc, m0, m1, l0, l1, qa, Ks, Vs, lane, kend0, kend1, kt + 2 * t4,
                         g.scale_log2);
  }

  const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
  bf16 *ob = o + b * g.o_bstride + (size_t)h * HD;
#pragma unroll
  for (int dt = 0; dt < 8; ++dt) {
    const int col = dt * 8 + 2 * t4;
    if (r0 < g.Lq) {
      st(ob + (size_t)r0 * g.o_stride + col, oacc[dt][0] * inv0);
      st(ob + (size_t)r0 * g.o_stride + col + 1, oacc[dt][1] * inv0);
    }
    if (r1 < g.Lq) {
      st(ob + (size_t)r1 * g.o_stride + col, oacc[dt][2] * inv1);
      st(ob + (size_t)r1 * g.o_stride + col + 1, oacc[dt][3] * inv1);
    }
  }
}

/* The DiT over a packed batch with cached keys (cosy_k_attn_dit_paged): the FlashAttention-2
 * tile of attn_flash_bf16_kernel, one block of 4 warps per (64-query tile of one segment, head).
 * The addressing differs: queries are packed rows of qkv, and key f of the segment is a
 * cache-page row (f < cached) or a packed row (f >= cached); the staging loop resolves each key
 * row's address. And the staging: K/V tiles go to two shared buffers by cp.async (16-byte
 * copies, zero-filled past Lk), the next tile's copies issued right after the barrier that
 * publishes the current one, so they overlap its products (one barrier a tile instead of two;
 * 37 KB of static shared memory a block). The arithmetic and its order are the contiguous
 * kernel's (both call dit_tile_step per key tile, the same end): the same bits.
 *
 * The split-key variant (cosy_k_attn_dit_paged_split, FlashDecoding-style; sm_90 clusters):
 * S = n_split blocks per (query tile, head), launched as one thread-block cluster of S blocks
 * (grid (n_tiles * S, heads), cluster (S, 1, 1); block rank r = blockIdx.x % S is part r).
 * The split rule: key tile t (keys [64 t, 64 t + 64), counted from the segment's frame 0) is
 * part t % S; part r runs the one-block loop over its key tiles r, r + S, r + 2 S, ... below
 * kend_blk (the keys the tile's last query sees; a part is empty when r >= K = ceil(kend_blk /
 * 64)). Each part ends with its unnormalized fp32 o [64 rows][64 dims], row max m (exp2 domain,
 * -inf for a row that saw no key) and row sum l in its own shared memory (over its K/V
 * buffers, 18.5 KB); after a cluster barrier, block r merges 1/S of the tile's (row, dim pair)
 * outputs reading every part's shared memory (distributed shared memory):
 *   M = max_p m_p;  w_p = 2^(m_p - M);  L = sum_p w_p l_p;  O = sum_p w_p o_p;  out = O / L
 * with p ascending (fmaf chains), and a second cluster barrier keeps every block alive until
 * the others have read it. Batch invariance: which keys a part holds is fixed by absolute key
 * positions and S alone, and what a row gets from the key tiles past its own last key (its
 * tile's longer rows') is exactly nothing: inside a part such a tile is a no-op of the online
 * softmax (rescale by 2^0 = 1, p = 0 against finite V, as in the one-block kernel), and a part
 * with no key of the row has m = -inf, l = 0, o = 0, so w = 0 adds +0 to L and O. A row's bits
 * therefore depend only on its query, its segment's keys up to its own last key, chunk and S
 * (which the caller fixes per engine): never on its tile, n_tiles, the grid, the SM count, the
 * rest of the batch or which block finishes first. Against the one-block kernel the sums are
 * ordered differently (not the same bits; relative error ~1e-3 of bf16 data either way). A
 * tile with K = 16 key tiles takes 4 per block at S = 4: the chain of dependent tiles a block
 * walks is S times shorter, for S times more blocks, which is the gain when n_tiles x heads
 * blocks leave most SMs idle (small flow calls).
 *
 * The variant with the part count per segment (cosy_k_attn_dit_paged_auto): a fixed S loses on
 * short key ranges (the merge costs more than the shorter chain saves) and wins on long ones, so
 * each query tile takes S = cosy_k_dit_auto_parts(Lk) of its segment (kernels.h: 1 below 4 key
 * tiles, 2, 4, then 8 from 11 key tiles). One launch serves a mixed batch: the host lists
 * cluster items (cosy_k_dit_auto_items: per tile, its heads in groups of C / S), the grid is
 * (items x C) blocks in clusters of C = the call's largest S (C = 1, every segment short: the
 * one-block kernel itself, over the n_items / n_heads tiles the items list in order), and
 * block rank r of an item's cluster runs head first + r / S as part r % S: the MODE 1 loop and
 * merge within its group of S ranks (ranks (r / S) S .. + S - 1, merged in part order), or, at
 * S = 1, the one-block loop and store with no cluster barrier (the same bits as
 * cosy_k_attn_dit_paged). Batch invariance: the split rule above holds per tile with S a
 * function of its segment's Lk alone, which is the request's own key count; C, the items, the
 * grouping of heads into clusters, n_tiles and the grid change only which blocks run where
 * (every cluster's groups are independent but for the barriers), never a row's sum order. So a
 * row's bits depend on its query, its segment's keys up to its own last key and chunk: the same
 * statement as for the one-block kernel, and a segment's rows are the same alone or in any
 * batch, with any tiling of its queries. */
struct PagedGeo {
  const bf16 *qkv;
  const cosy_k_dit_seg *segs;
  const int32_t *tiles;
  const bf16 *pool;
  const int32_t *ptab;
  bf16 *out;
  const int64_t *dev_off; /* NULL, or a device int64 added to layer_off (read at run time) */
  int64_t page_elems, layer_off;
  int D, page_frames, chunk;
  int n_split; /* split kernel: blocks (parts) per query tile, the cluster size; auto kernel:
                * the cluster size C (1, 2, 4 or 8) */
  const int32_t *items; /* auto kernel: the clusters' (tile, first head * 16 + parts) pairs */
  float scale_log2;
  /* v2 kernel: f / page_frames = __umul64hi(f, pf_magic) + (f & pf_one) for every frame f >= 0:
   * page_frames >= 2: pf_magic = floor((2^64 - 1) / page_frames) + 1 = (2^64 + e) / page_frames
   * with 0 <= e < page_frames, so f pf_magic / 2^64 = f / page_frames + delta, 0 <= delta < f /
   * 2^64 < 1 / page_frames, which never reaches the next integer; pf_one 0. page_frames 1:
   * pf_magic 0, pf_one -1 (all bits: f & pf_one = f). pf_d = page_frames * D (the K -> V step
   * of a page, < 2^31: checked) */
  unsigned long long pf_magic;
  int pf_one, pf_d;
};

/* One block's work of the three kernels. MODE 0 (one block): the whole key range and the
 * normalized output. MODE 1 (fixed split): part blockIdx.x % n_split of the key tiles and the
 * cluster merge. MODE 2 (auto): the block's cluster item gives the tile, its first head and the
 * tile's part count S (cosy_k_dit_auto_parts of its segment); block rank r of the cluster of C
 * serves head (first head + r / S) as part r % S, the merge reading ranks (r / S) S .. + S - 1;
 * S = 1: MODE 0's loop and store (no cluster barrier), so the same bits. A head past n_heads
 * (the last cluster of a tile when C / S does not divide them) only takes the barriers. */
template <int MODE> __device__ __forceinline__ void dit_paged_block(const PagedGeo &g) {
  __shared__ __align__(16) bf16 Ks2[2][FA_BK * FA_LD];
  __shared__ __align__(16) bf16 Vs2[2][FA_BK * FA_LD];
  constexpr bool SPLIT = MODE != 0;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int grp = lane >> 2, t4 = lane & 3;
  int h = blockIdx.y, S = 1, tile = blockIdx.x, part = 0, rank0 = 0;
  if (MODE == 1) {
    S = g.n_split;
    tile = (int)blockIdx.x / S;
    part = (int)blockIdx.x % S;
  } else if (MODE == 2) {
    const int C = g.n_split, r = (int)blockIdx.x % C, item = (int)blockIdx.x / C;
    const int hs = g.items[2 * item + 1];
    tile = g.items[2 * item];
    S = hs & 15;
    part = r % S;
    rank0 = r - part;
    h = (hs >> 4) + r / S;
    if (h >= g.D / HD) { /* no head: only the barriers of its cluster (S > 1) */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (S > 1) {
        namespace cg = cooperative_groups;
        cg::cluster_group cluster = cg::this_cluster();
        cluster.sync();
        cluster.sync();
      }
#endif
      return;
    }
  }
  const cosy_k_dit_seg sg = g.segs[g.tiles[2 * tile]];
  const int t0 = g.tiles[2 * tile + 1]; /* first query of the tile within the segment */
  const int nq = min(FA_BQ, sg.n_q - t0);
  const int64_t ld3 = 3 * (int64_t)g.D;
  const int lr0 = warp * 16 + grp, lr1 = lr0 + 8; /* rows within the tile */
  const bf16 *qb = g.qkv + (int64_t)(sg.q_row0 + t0) * ld3 + (int64_t)h * HD;

  uint32_t qa[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const int c0 = kk * 16 + 2 * t4;
    const bf16 *p0 = qb + (int64_t)lr0 * ld3 + c0;
    const bf16 *p1 = qb + (int64_t)lr1 * ld3 + c0;
    qa[kk][0] = lr0 < nq ? ld_u32(p0) : 0u;
    qa[kk][1] = lr1 < nq ? ld_u32(p1) : 0u;
    qa[kk][2] = lr0 < nq ? ld_u32(p0 + 8) : 0u;
    qa[kk][3] = lr1 < nq ? ld_u32(p1 + 8) : 0u;
  }
  auto kend_of = [&](int lr) {
    const int i = sg.cached + t0 + min(lr, nq - 1); /* absolute frame of the query */
    return sg.full ? sg.Lk : min(sg.Lk, (i / g.chunk + 1) * g.chunk);
  };
  float oacc[8][4];
#pragma unroll
  for (int dt = 0; dt < 8; ++dt) oacc[dt][0] = oacc[dt][1] = oacc[dt][2] = oacc[dt][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
  const int kend_blk = kend_of(nq - 1);
  const int kend0 = kend_of(lr0), kend1 = kend_of(lr1);
  const int64_t rowpart = (int64_t)(2 * sg.row) * g.page_frames * g.D;
  const int64_t layer_off = g.layer_off + (g.dev_off ? *g.dev_off : 0);
  /* the key tiles of this block: all of them below kend_blk, or (split) key tiles t with
   * t % S == part: keys [64 t, 64 t + 64) for t = part, part + S, part + 2 S, ... */
  const int kt_lo = part * FA_BK, kt_hi = kend_blk, kt_step = S * FA_BK;

  /* K/V tile staging by cp.async into one of two buffers (16 bytes a copy; keys past Lk are
   * zero-filled), so that the next tile's copies run during this tile's products */
  auto stage = [&](int kt, int buf) {
    for (int c = tid; c < FA_BK * (HD / 8); c += FA_THREADS) {
      const int r = c >> 3, cc = (c & 7) * 8;
      const int f = kt + r;
      const bf16 *kp = g.qkv, *vp = g.qkv;
      int bytes = 0;
      if (f < sg.Lk) {
        if (f < sg.cached) {
          const int64_t page = g.ptab[sg.ptab0 + f / g.page_frames];
          kp = g.pool + page * g.page_elems + layer_off + rowpart +
               (int64_t)(f % g.page_frames) * g.D + (int64_t)h * HD + cc;
          vp = kp + (int64_t)g.page_frames * g.D;
        } else {
          kp = g.qkv + (int64_t)(sg.q_row0 + f - sg.cached) * ld3 + g.D + (int64_t)h * HD + cc;
          vp = kp + g.D;
        }
        bytes = 16;
      }
      cp_async16_zfill(&Ks2[buf][r * FA_LD + cc], kp, bytes);
      cp_async16_zfill(&Vs2[buf][r * FA_LD + cc], vp, bytes);
    }
    cp_async_commit();
  };
  if (kt_lo < kt_hi) stage(kt_lo, 0);
  for (int kt = kt_lo, it = 0; kt < kt_hi; kt += kt_step, ++it) {
    const int buf = it & 1;
    const bf16 *Ks = Ks2[buf], *Vs = Vs2[buf];
    cp_async_wait_all(); /* tile it has landed (the only group in flight) */
    __syncthreads();     /* ... for every thread; and tile it - 1 is no longer read */
    if (kt + kt_step < kt_hi) stage(kt + kt_step, buf ^ 1);
    dit_tile_step<false>(oacc, m0, m1, l0, l1, qa, Ks, Vs, lane, kend0, kend1, kt + 2 * t4,
                         g.scale_log2);
  }

  if (!SPLIT || (MODE == 2 && S == 1)) {
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
    bf16 *ob = g.out + (int64_t)(sg.q_row0 + t0) * g.D + (int64_t)h * HD;
#pragma unroll
    for (int dt = 0; dt < 8; ++dt) {
      const int col = dt * 8 + 2 * t4;
      if (lr0 < nq) {
        st(ob + (int64_t)lr0 * g.D + col, oacc[dt][0] * inv0);
        st(ob + (int64_t)lr0 * g.D + col + 1, oacc[dt][1] * inv0);
      }
      if (lr1 < nq) {
        st(ob + (int64_t)lr1 * g.D + col, oacc[dt][2] * inv1);
        st(ob + (int64_t)lr1 * g.D + col + 1, oacc[dt][3] * inv1);
      }
    }
    return;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  /* the part's (o, m, l) into its own shared memory, over the K/V buffers: po [64][FA_LD] fp32
   * is exactly Ks2's 18 KB, pm (m [64], then l [64]) the start of Vs2 */
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  float *po = reinterpret_cast<float *>(&Ks2[0][0]);
  float *pm = reinterpret_cast<float *>(&Vs2[0][0]);
  static_assert(sizeof(Ks2) >= sizeof(float) * FA_BQ * FA_LD, "po fits Ks2");
  __syncthreads(); /* every warp is done reading the last K/V tile (no copy is in flight) */
#pragma unroll
  for (int dt = 0; dt < 8; ++dt) {
    const int col = dt * 8 + 2 * t4;
    *reinterpret_cast<float2 *>(&po[lr0 * FA_LD + col]) = make_float2(oacc[dt][0], oacc[dt][1]);
    *reinterpret_cast<float2 *>(&po[lr1 * FA_LD + col]) = make_float2(oacc[dt][2], oacc[dt][3]);
  }
  if (t4 == 0) { /* m in the exp2 domain (dit_tile_step keeps the raw scores' max) */
    pm[lr0] = __fmul_rn(m0, g.scale_log2);
    pm[FA_BQ + lr0] = l0;
    pm[lr1] = __fmul_rn(m1, g.scale_log2);
    pm[FA_BQ + lr1] = l1;
  }
  cluster.sync(); /* every part's po / pm are written */
  /* block `part` merges (row, dim pair) outputs [part * per, (part + 1) * per) */
  constexpr int NPAIR = FA_BQ * HD / 2;
  const int per = (NPAIR + S - 1) / S;
  bf16 *ob = g.out + (int64_t)(sg.q_row0 + t0) * g.D + (int64_t)h * HD;
  for (int e = part * per + tid; e < min(NPAIR, (part + 1) * per); e += FA_THREADS) {
    const int row = e / (HD / 2), d = (e % (HD / 2)) * 2;
    if (row >= nq) continue;
    /* every part's (m, l, o) first: independent loads, one round of remote latency */
    float mv[COSY_K_DIT_SPLIT_MAX], lv[COSY_K_DIT_SPLIT_MAX];
    float2 ov[COSY_K_DIT_SPLIT_MAX];
#pragma unroll
    for (int p = 0; p < COSY_K_DIT_SPLIT_MAX; ++p) {
      if (p < S) {
        const float *rm = cluster.map_shared_rank(pm, rank0 + p);
        mv[p] = rm[row];
        lv[p] = rm[FA_BQ + row];
        ov[p] = *reinterpret_cast<const float2 *>(cluster.map_shared_rank(po, rank0 + p) +
                                                  row * FA_LD + d);
      }
    }
    float M = -INFINITY;
#pragma unroll
    for (int p = 0; p < COSY_K_DIT_SPLIT_MAX; ++p)
      if (p < S) M = fmaxf(M, mv[p]);
    float L = 0.f, O0 = 0.f, O1 = 0.f;
    if (M != -INFINITY) {
#pragma unroll
      for (int p = 0; p < COSY_K_DIT_SPLIT_MAX; ++p) {
        if (p < S) {
          const float w = exp2f(mv[p] - M);
          L = fmaf(lv[p], w, L);
          O0 = fmaf(ov[p].x, w, O0);
          O1 = fmaf(ov[p].y, w, O1);
        }
      }
    }
    const float inv = L > 0.f ? 1.f / L : 0.f;
    st(ob + (int64_t)row * g.D + d, O0 * inv);
    st(ob + (int64_t)row * g.D + d + 1, O1 * inv);
  }
  cluster.sync(); /* no block leaves while another still reads its shared memory */
#endif
}

__global__ void __launch_bounds__(FA_THREADS, 4) attn_dit_paged_kernel(PagedGeo g) {
  dit_paged_block<0>(g);
}

/* cosy_k_attn_dit_paged_split; launched only where dev->clusters (compute capability >= 9.0) */
__global__ void __launch_bounds__(FA_THREADS, 4) attn_dit_paged_split_kernel(PagedGeo g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  dit_paged_block<1>(g);
#endif
}

/* cosy_k_attn_dit_paged_auto; launched only where dev->clusters (compute capability >= 9.0) */
__global__ void __launch_bounds__(FA_THREADS, 4) attn_dit_paged_auto_kernel(PagedGeo g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  dit_paged_block<2>(g);
#endif
}

/* cosy_k_attn_dit_paged_v2: the one-block kernel's arithmetic (dit_tile_step per key tile, the
 * same end) with less work around it (see the file header, "attn_dit_paged_v2"). NW warps (4: 64-query tiles, 8: 128-query tiles), 16 query
 * rows each; K/V tiles of 64 keys in S cp.async buffers (dynamic shared memory, v2_smem_bytes),
 * S - 1 tiles in flight: S = 2 as in dit_paged_block, or V2_STAGES_DEEP where the grid leaves
 * SMs idle (a small call's short chain of key tiles then waits on one round trip, not one a tile) */
template <int NW, int S>
__global__ void __launch_bounds__(NW * 32, S == 2 ? 16 / NW : 8 / NW) /* deep: <= 8 warps an SM */
attn_dit_paged_v2_kernel(PagedGeo g) {
  constexpr int NT = NW * 32, BQ = NW * 16;
  constexpr int SR = FA_BK * (HD / 8) / NT; /* staged key rows a thread: 4 (NW 4) or 2 (NW 8) */
  /* S = 2: static arrays, as before the deep pipeline (its registers: 128, no spill); deeper:
   * dynamic shared memory (above the 48 KB of static arrays) */
  constexpr bool ST = S == 2;
  __shared__ __align__(16) bf16 Ks_st[ST ? 2 : 1][ST ? FA_BK * FA_LD : 8];
  __shared__ __align__(16) bf16 Vs_st[ST ? 2 : 1][ST ? FA_BK * FA_LD : 8];
  extern __shared__ __align__(16) unsigned char v2_smem[];
  bf16(*Ks2)[FA_BK * FA_LD] = ST ? reinterpret_cast<bf16(*)[FA_BK * FA_LD]>(&Ks_st[0][0])
                                 : reinterpret_cast<bf16(*)[FA_BK * FA_LD]>(v2_smem); /* [S] */
  bf16(*Vs2)[FA_BK * FA_LD] = ST ? reinterpret_cast<bf16(*)[FA_BK * FA_LD]>(&Vs_st[0][0])
                                 : Ks2 + S; /* [S] */
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int grp = lane >> 2, t4 = lane & 3;
  const int h = blockIdx.y, tile = blockIdx.x;
  const cosy_k_dit_seg sg = g.segs[g.tiles[2 * tile]];
  const int t0 = g.tiles[2 * tile + 1]; /* first query of the tile within the segment */
  const int nq = min(BQ, sg.n_q - t0);
  const int64_t ld3 = 3 * (int64_t)g.D;
  const int lr0 = warp * 16 + grp, lr1 = lr0 + 8; /* rows within the tile */
  const bool wact = warp * 16 < nq;               /* the warp has a row to store */
  const bf16 *qb = g.qkv + (int64_t)(sg.q_row0 + t0) * ld3 + (int64_t)h * HD;

  auto kend_of = [&](int lr) {
    const int i = sg.cached + t0 + min(lr, nq - 1); /* absolute frame of the query */
    return sg.full ? sg.Lk : min(sg.Lk, (i / g.chunk + 1) * g.chunk);
  };
  float oacc[8][4];
#pragma unroll
  for (int dt = 0; dt < 8; ++dt) oacc[dt][0] = oacc[dt][1] = oacc[dt][2] = oacc[dt][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
  const int kend_blk = kend_of(nq - 1);
  const int kend0 = kend_of(lr0), kend1 = kend_of(lr1);
  /* the last key the warp's rows see is below whi: key tiles from whi on are skipped (exact
   * no-ops for every row of the warp: see the file header) */
  const int whi = kend_of(warp * 16 + 15);
  const int wlo = kend_of(warp * 16); /* ... and every row of the warp sees keys below wlo */
  const float scale_log2 = g.scale_log2;

  /* staging: thread tid copies 16 bytes (dims cc .. cc + 7) of key rows tid / 8 + i NT / 8
   * (i < SR) of K and of V (8 threads a 128-byte row: conflict-free shared stores, whole
   * sectors). A warp's copies cover 4 SR distinct rows (4 warp + j + i NT / 8, j < 4); lane l
   * resolves the address of one of them (j = l % 4, i = (l / 4) % SR: lanes past 4 SR repeat
   * lower lanes' rows) and the copying lanes take it by a shuffle from lane j + 4 i, so each
   * row's page lookup and address arithmetic is done once a warp instead of by its 8 lanes. */
  const int cc = (tid & 7) * 8;
  const int rrow = 4 * warp + (lane & 3) + (NT / 8) * ((lane >> 2) % SR);
  const int64_t pool_off = g.layer_off + (g.dev_off ? *g.dev_off : 0) +
                           (int64_t)(2 * sg.row) * g.page_frames * g.D + (int64_t)h * HD;
  const int64_t qkv_off = (int64_t)(sg.q_row0 - sg.cached) * ld3 + g.D + (int64_t)h * HD;
  auto stage = [&](int kt, int buf) {
    const int f = kt + rrow;
    const bf16 *rp = g.qkv; /* key row f's K (dim 0); its V is vs elements further */
    int vs = -1;            /* -1: past Lk (zeros, nothing read) */
    if (f < sg.cached) {
      /* pi = f / page_frames by a 64-bit multiply-high (exact, see PagedGeo) */
      const int pi = (int)__umul64hi((unsigned long long)f, g.pf_magic) + (f & g.pf_one);
      const int64_t page = g.ptab[sg.ptab0 + pi];
      rp = g.pool + (page * g.page_elems + pool_off + (int64_t)(f - pi * g.page_frames) * g.D);
      vs = g.pf_d;
    } else if (f < sg.Lk) {
      rp = g.qkv + (qkv_off + (int64_t)f * ld3);
      vs = g.D;
    }
#pragma unroll
    for (int i = 0; i < SR; ++i) {
      const int src = (lane >> 3) + 4 * i; /* the lane that resolved row tid / 8 + i NT / 8 */
      const bf16 *kp = reinterpret_cast<const bf16 *>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(rp), src));
      const int v = __shfl_sync(0xffffffffu, vs, src);
      const int r = (tid >> 3) + i * (NT / 8);
      cp_async16_zfill(&Ks2[buf][r * FA_LD + cc], kp + cc, v < 0 ? 0 : 16);
      cp_async16_zfill(&Vs2[buf][r * FA_LD + cc], kp + cc + (v < 0 ? 0 : v), v < 0 ? 0 : 16);
    }
    cp_async_commit();
  };
  /* key tiles 0 .. S - 2 in flight; one commit group a tile slot (empty past the keys), so that
   * at iteration it exactly S - 2 groups may still be pending when tile it has landed */
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    if (i * FA_BK < kend_blk) stage(i * FA_BK, i);
    else cp_async_commit();
  }
  /* the warp's Q fragments (A layout, 4 k16 steps), loaded while the first K/V tiles are in flight */
  uint32_t qa[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const int c0 = kk * 16 + 2 * t4;
    const bf16 *p0 = qb + (int64_t)lr0 * ld3 + c0;
    const bf16 *p1 = qb + (int64_t)lr1 * ld3 + c0;
    qa[kk][0] = lr0 < nq ? ld_u32(p0) : 0u;
    qa[kk][1] = lr1 < nq ? ld_u32(p1) : 0u;
    qa[kk][2] = lr0 < nq ? ld_u32(p0 + 8) : 0u;
    qa[kk][3] = lr1 < nq ? ld_u32(p1 + 8) : 0u;
  }
  for (int kt = 0, it = 0; kt < kend_blk; kt += FA_BK, ++it) {
    const int buf = it % S;
    cp_async_wait_n<S - 2>(); /* tile it has landed (this thread's copies) */
    __syncthreads();          /* ... for every thread; and tile it - 1 is no longer read */
    if (kt + (S - 1) * FA_BK < kend_blk) stage(kt + (S - 1) * FA_BK, (it + S - 1) % S);
    else cp_async_commit();
    if (!wact || kt >= whi) continue; /* warp-uniform: nothing of this tile reaches its rows */
    if (kt + FA_BK <= wlo) /* warp-uniform: every row of the warp sees the whole tile */
      dit_tile_step<true, false>(oacc, m0, m1, l0, l1, qa, Ks2[buf], Vs2[buf], lane, 0, 0, 0,
                                 scale_log2);
    else
      dit_tile_step<true, true>(oacc, m0, m1, l0, l1, qa, Ks2[buf], Vs2[buf], lane,
                                kend0 - kt - 2 * t4, kend1 - kt - 2 * t4, 0, scale_log2);
  }

  if (!wact) return;
  const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
  bf16 *ob = g.out + (int64_t)(sg.q_row0 + t0) * g.D + (int64_t)h * HD;
#pragma unroll
  for (int dt = 0; dt < 8; ++dt) { /* two outputs a 4-byte store (the same rounding as st) */
    const int col = dt * 8 + 2 * t4;
    if (lr0 < nq)
      *reinterpret_cast<uint32_t *>(ob + (int64_t)lr0 * g.D + col) =
          pack_bf16(__fmul_rn(oacc[dt][0], inv0), __fmul_rn(oacc[dt][1], inv0));
    if (lr1 < nq)
      *reinterpret_cast<uint32_t *>(ob + (int64_t)lr1 * g.D + col) =
          pack_bf16(__fmul_rn(oacc[dt][2], inv1), __fmul_rn(oacc[dt][3], inv1));
  }
}

bool aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

cudaError_t launch_attn(cudaStream_t s, cosy_kdtype dt, const void *q, const void *k,
                        const void *v, void *o, const AttnGeo &g, int B) {
  if (dt == COSY_KDT_BF16) {
    const bool vec_ok = aligned(k, 16) && aligned(v, 16) && g.kv_stride % 8 == 0 &&
                        g.kv_bstride % 8 == 0 && aligned(q, 4) && g.q_stride % 2 == 0 &&
                        g.q_bstride % 2 == 0;
    if (vec_ok) {
      dim3 grid((g.Lq + FA_BQ - 1) / FA_BQ, g.n_qh, B);
      attn_flash_bf16_kernel<<<grid, FA_THREADS, 0, s>>>((const bf16 *)q, (const bf16 *)k,
                                                         (const bf16 *)v, (bf16 *)o, g);
      return cudaGetLastError();
    }
  }
  dim3 grid((g.Lq + SIMPLE_WARPS - 1) / SIMPLE_WARPS, g.n_qh, B);
  COSYK_DT_CASE(dt, T, {
    attn_simple_kernel<T><<<grid, SIMPLE_WARPS * 32, 0, s>>>((const T *)q, (const T *)k,
                                                             (const T *)v, (T *)o, g);
  })
  return cudaGetLastError();
}

constexpr int V2_STAGES_DEEP = 4;        /* K/V tile buffers of v2's deep pipeline */
constexpr int V2_DEEP_BLOCKS_PER_SM = 2; /* ... where the grid has at most this many blocks an SM */

/* dynamic shared memory of a v2 block: S K tiles and S V tiles */
inline size_t v2_smem_bytes(int S) { return (size_t)2 * S * FA_BK * FA_LD * sizeof(bf16); }

template <int NW, int S>
cudaError_t v2_launch(cudaStream_t s, dim3 grid, const PagedGeo &g) {
  const size_t smem = S == 2 ? 0 : v2_smem_bytes(S); /* S = 2: static arrays */
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(attn_dit_paged_v2_kernel<NW, S>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
  }
  attn_dit_paged_v2_kernel<NW, S><<<grid, NW * 32, smem, s>>>(g);
  return cudaGetLastError();
}

} /* namespace */

/* ------------------------------------------------------------------------------------------ */

extern "C" size_t cosy_k_paged_decode_workspace(int n_seq, int n_qh, int n_kh, int max_ctx) {
  if (n_seq <= 0 || n_qh <= 0 || n_kh <= 0 || max_ctx <= 0) return 0;
  const int n_splits = decode_n_splits(max_ctx);
  if (n_splits <= 1) return 0;
  return dec_counter_bytes(n_kh) + (size_t)n_seq * n_qh * n_splits * (HD + 2) * sizeof(float);
}

extern "C" cudaError_t cosy_k_paged_decode(cudaStream_t s, cosy_kdtype dt, const void *q,
                                           int q_stride, const void *k_cache,
                                           const void *v_cache, const int32_t *block_table,
                                           int max_pages, const int32_t *seq_lens, int n_seq,
                                           int n_qh, int n_kh, int head_dim, int page_size,
                                           int max_ctx, float scale, void *out, int out_stride,
                                           void *workspace, size_t workspace_bytes, int pdl,
                                           const cosy_kdev *dev) {
  if (!cosyk_dt_ok(dt) || n_seq < 0 || n_qh <= 0 || n_kh <= 0 || n_qh % n_kh != 0 ||
      n_qh / n_kh > DEC_MAXG || head_dim != HD || page_size <= 0 || max_pages <= 0 ||
      max_ctx < 0 || (int64_t)max_ctx > (int64_t)max_pages * page_size ||
      q_stride < n_qh * HD || out_stride < n_qh * HD || !(scale > 0.f) || n_seq > 65535 ||
      (pdl & ~(1 | COSY_K_DECODE_EARLY)) != 0)
    return cudaErrorInvalidValue;
  if (n_seq == 0) return cudaSuccess;
  if (!q || !k_cache || !v_cache || !block_table || !seq_lens || !out)
    return cudaErrorInvalidValue;
  if (!aligned(k_cache, 16) || !aligned(v_cache, 16)) return cudaErrorInvalidValue;
  if (max_ctx > DEC_SPLIT * DEC_MAX_SPLITS) return cudaErrorInvalidValue; /* 8192 */
  const int n_splits = decode_n_splits(max_ctx);
  const size_t need = cosy_k_paged_decode_workspace(n_seq, n_qh, n_kh, max_ctx);
  if (need > 0 && (!workspace || workspace_bytes < need || !aligned(workspace, 16)))
    return cudaErrorInvalidValue;
  const size_t counters = dec_counter_bytes(n_kh);
  unsigned *count = need > 0 ? (unsigned *)workspace : nullptr;
  float *part_o = need > 0 ? (float *)((char *)workspace + counters) : nullptr;
  float *part_ml = need > 0 ? part_o + (size_t)n_seq * n_qh * n_splits * HD : nullptr;
  dim3 grid(n_splits, n_kh, n_seq);
  COSYK_DT_CASE(dt, T, {
    DecodeArgs<T> a;
    a.q = (const T *)q;
    a.q_stride = q_stride;
    a.kc = (const T *)k_cache;
    a.vc = (const T *)v_cache;
    a.bt = block_table;
    a.max_pages = max_pages;
    a.lens = seq_lens;
    a.n_qh = n_qh;
    a.n_kh = n_kh;
    a.page_size = page_size;
    a.n_splits = n_splits;
    a.scale_log2 = scale * LOG2E_F;
    a.out = (T *)out;
    a.out_stride = out_stride;
    a.part_o = part_o;
    a.part_ml = part_ml;
    a.count = count;
    const int use_pdl = (pdl & 1) && dev && dev->pdl;
    const dim3 block(DEC_THREADS), one(1, 1, 1);
    /* 2..8 splits on a device with clusters: one cluster per (head, sequence) */
    const dim3 cl = n_splits > 1 && n_splits <= DEC_CLUSTER_MAX && dev && dev->clusters
                        ? dim3((unsigned)n_splits, 1, 1)
                        : one;
    if (pdl & COSY_K_DECODE_EARLY) {
      if (n_splits == 1)
        return launch_ex(s, grid, block, 0, one, use_pdl, paged_decode_kernel<T, 0, true>, a);
      if (cl.x > 1)
        return launch_ex(s, grid, block, 0, cl, use_pdl, paged_decode_kernel<T, 2, true>, a);
      return launch_ex(s, grid, block, 0, one, use_pdl, paged_decode_kernel<T, 1, true>, a);
    }
    if (n_splits == 1)
      return launch_ex(s, grid, block, 0, one, use_pdl, paged_decode_kernel<T, 0, false>, a);
    if (cl.x > 1)
      return launch_ex(s, grid, block, 0, cl, use_pdl, paged_decode_kernel<T, 2, false>, a);
    return launch_ex(s, grid, block, 0, one, use_pdl, paged_decode_kernel<T, 1, false>, a);
  })
  return cudaSuccess; /* not reached: COSYK_DT_CASE returns */
}

extern "C" cudaError_t cosy_k_paged_prefill(cudaStream_t s, const float *q, int q_stride,
                                            const float *k_cache, const float *v_cache,
                                            const int32_t *block_tables, int pages_per_seq,
                                            const cosy_k_prefill_seg *segs, int n_seg,
                                            const int32_t *tiles, int n_tiles, int n_qh, int n_kh,
                                            int head_dim, int page_size, float scale, float *out,
                                            int out_stride, const cosy_kdev *dev) {
  if (n_seg < 0 || n_tiles < 0 || n_qh <= 0 || n_kh <= 0 || n_kh > 65535 || n_qh % n_kh != 0 ||
      n_qh / n_kh > PF_MAXG || head_dim != HD || page_size <= 0 || pages_per_seq <= 0 ||
      q_stride < n_qh * HD || q_stride % 4 != 0 || out_stride < n_qh * HD ||
      out_stride % 4 != 0 || !(scale > 0.f) || scale == INFINITY || (n_tiles > 0 && n_seg == 0))
    return cudaErrorInvalidValue;
  if (n_tiles == 0) return cudaSuccess;
  if (!q || !k_cache || !v_cache || !block_tables || !segs || !tiles || !out ||
      !aligned(q, 16) || !aligned(out, 16) || !aligned(k_cache, 16) || !aligned(v_cache, 16))
    return cudaErrorInvalidValue;
  const int G = n_qh / n_kh;
  const size_t smem = prefill_smem_floats(G) * sizeof(float);
  const size_t cap = dev ? dev->smem_block : (size_t)48 * 1024;
  if (smem > cap) return cudaErrorInvalidValue;
  if (smem > (size_t)48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(
        paged_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
  }
  PrefillArgs a;
  a.q = q;
  a.q_stride = q_stride;
  a.kc = k_cache;
  a.vc = v_cache;
  a.bt = block_tables;
  a.pages_per_seq = pages_per_seq;
  a.segs = segs;
  a.tiles = tiles;
  a.n_kh = n_kh;
  a.page_size = page_size;
  a.scale_log2 = scale * LOG2E_F;
  a.out = out;
  a.out_stride = out_stride;
  paged_prefill_kernel<<<dim3((unsigned)n_tiles, (unsigned)n_kh), G * 32, smem, s>>>(a);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_attn_dit(cudaStream_t s, cosy_kdtype dt, const void *q,
                                       const void *k, const void *v, int in_stride, void *out,
                                       int out_stride, int B, int N, int n_heads, int head_dim,
                                       int chunk, float scale) {
  if (!cosyk_dt_ok(dt) || B < 0 || B > 65535 || N < 0 || n_heads <= 0 || head_dim != HD ||
      in_stride < n_heads * HD || out_stride < n_heads * HD || chunk < 0 || !(scale > 0.f))
    return cudaErrorInvalidValue;
  if ((int64_t)B * N == 0) return cudaSuccess;
  if (!q || !k || !v || !out) return cudaErrorInvalidValue;
  AttnGeo g;
  g.Lq = N;
  g.Lk = N;
  g.n_qh = n_heads;
  g.n_kh = n_heads;
  g.q_stride = in_stride;
  g.kv_stride = in_stride;
  g.o_stride = out_stride;
  g.q_bstride = g.kv_bstride = (int64_t)N * in_stride;
  g.o_bstride = (int64_t)N * out_stride;
  g.mode = chunk > 0 ? 2 : 0;
  g.chunk = chunk > 0 ? chunk : 1;
  g.scale_log2 = scale * LOG2E_F;
  return launch_attn(s, dt, q, k, v, out, g, B);
}

/* the arguments both DiT paged launchers check, and the kernels' geometry */
static cudaError_t dit_paged_geo(PagedGeo *g, const cosy_bf16 *qkv, int D, int n_heads,
                                 const cosy_k_dit_seg *segs, const int32_t *tiles, int n_tiles,
                                 const cosy_bf16 *pool, int64_t page_elems, int64_t layer_off,
                                 const int64_t *dev_off, int page_frames, const int32_t *ptab,
                                 cosy_bf16 *out, int chunk, float scale) {
  if (D <= 0 || D % 8 || n_heads <= 0 || n_heads > 65535 || n_heads * HD != D || n_tiles < 0 ||
      page_elems < 0 || layer_off < 0 || layer_off % 8 || page_frames <= 0 || chunk <= 0 ||
      !(scale > 0.f))
    return cudaErrorInvalidValue;
  if (n_tiles > 0 && (!qkv || !segs || !tiles || !out || !aligned(qkv, 16) ||
                      (pool && !aligned(pool, 16)) || page_elems % 8))
    return cudaErrorInvalidValue;
  g->qkv = (const bf16 *)qkv;
  g->segs = segs;
  g->tiles = tiles;
  g->pool = (const bf16 *)pool;
  g->ptab = ptab;
  g->out = (bf16 *)out;
  g->page_elems = page_elems;
  g->layer_off = layer_off;
  g->dev_off = dev_off;
  g->D = D;
  g->page_frames = page_frames;
  g->chunk = chunk;
  g->n_split = 1;
  g->items = nullptr;
  g->scale_log2 = scale * LOG2E_F;
  g->pf_magic = page_frames >= 2 ? ~0ull / (unsigned long long)page_frames + 1ull : 0ull;
  g->pf_one = page_frames == 1 ? -1 : 0;
  g->pf_d = (int)((int64_t)page_frames * D < 0x7fffffff ? (int64_t)page_frames * D : 0);
  return cudaSuccess;
}

extern "C" cudaError_t cosy_k_attn_dit_paged(cudaStream_t s, const cosy_bf16 *qkv, int D,
                                             int n_heads, const cosy_k_dit_seg *segs,
                                             const int32_t *tiles, int n_tiles,
                                             const cosy_bf16 *pool, int64_t page_elems,
                                             int64_t layer_off, const int64_t *dev_off,
                                             int page_frames, const int32_t *ptab,
                                             cosy_bf16 *out, int chunk, float scale) {
  PagedGeo g;
  const cudaError_t e = dit_paged_geo(&g, qkv, D, n_heads, segs, tiles, n_tiles, pool, page_elems,
                                      layer_off, dev_off, page_frames, ptab, out, chunk, scale);
  if (e != cudaSuccess || n_tiles == 0) return e;
  dim3 grid((unsigned)n_tiles, (unsigned)n_heads);
  attn_dit_paged_kernel<<<grid, FA_THREADS, 0, s>>>(g);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_attn_dit_paged_v2_stages(
    cudaStream_t s, const cosy_bf16 *qkv, int D, int n_heads, const cosy_k_dit_seg *segs,
    const int32_t *tiles, int n_tiles, const cosy_bf16 *pool, int64_t page_elems,
    int64_t layer_off, const int64_t *dev_off, int page_frames, const int32_t *ptab,
    cosy_bf16 *out, int chunk, float scale, int tile_q, int stages, const cosy_kdev *dev) {
  if (tile_q != COSY_K_DIT_TILE && tile_q != COSY_K_DIT_TILE_WIDE) return cudaErrorInvalidValue;
  if (stages != 0 && stages != 2 && stages != V2_STAGES_DEEP) return cudaErrorInvalidValue;
  PagedGeo g;
  const cudaError_t e = dit_paged_geo(&g, qkv, D, n_heads, segs, tiles, n_tiles, pool, page_elems,
                                      layer_off, dev_off, page_frames, ptab, out, chunk, scale);
  if (e != cudaSuccess || n_tiles == 0) return e;
  if ((int64_t)page_frames * D >= 0x7fffffff || !aligned(out, 4)) /* pf_d; 4-byte stores */
    return cudaErrorInvalidValue;
  const dim3 grid((unsigned)n_tiles, (unsigned)n_heads);
  int S = stages;
  if (S == 0) /* the rule: deep where the grid leaves SMs to spare and a block has the room */
    S = dev && tile_q == COSY_K_DIT_TILE &&
                (long long)n_tiles * n_heads <= V2_DEEP_BLOCKS_PER_SM * (long long)dev->n_sm &&
                v2_smem_bytes(V2_STAGES_DEEP) <= dev->smem_block
            ? V2_STAGES_DEEP
            : 2;
  if (tile_q == COSY_K_DIT_TILE_WIDE)
    return S == 2 ? v2_launch<8, 2>(s, grid, g) : v2_launch<8, V2_STAGES_DEEP>(s, grid, g);
  return S == 2 ? v2_launch<4, 2>(s, grid, g) : v2_launch<4, V2_STAGES_DEEP>(s, grid, g);
}

extern "C" cudaError_t cosy_k_attn_dit_paged_v2(cudaStream_t s, const cosy_bf16 *qkv, int D,
                                                int n_heads, const cosy_k_dit_seg *segs,
                                                const int32_t *tiles, int n_tiles,
                                                const cosy_bf16 *pool, int64_t page_elems,
                                                int64_t layer_off, const int64_t *dev_off,
                                                int page_frames, const int32_t *ptab,
                                                cosy_bf16 *out, int chunk, float scale,
                                                int tile_q) {
  return cosy_k_attn_dit_paged_v2_stages(s, qkv, D, n_heads, segs, tiles, n_tiles, pool,
                                         page_elems, layer_off, dev_off, page_frames, ptab, out,
                                         chunk, scale, tile_q, 2, NULL);
}

/* kern<<<grid, FA_THREADS, 0, s>>>(g) in thread-block clusters of csize blocks along x (plain
 * blocks when csize is 1); the launch error, then cudaGetLastError() */
static cudaError_t dit_cluster_launch(void (*kern)(PagedGeo), dim3 grid, int csize, cudaStream_t s,
                                      const PagedGeo &g) {
  return launch_ex(s, grid, dim3(FA_THREADS), 0, dim3((unsigned)csize, 1, 1), 0, kern, g);
}

extern "C" cudaError_t cosy_k_attn_dit_paged_split(
    cudaStream_t s, const cosy_bf16 *qkv, int D, int n_heads, const cosy_k_dit_seg *segs,
    const int32_t *tiles, int n_tiles, const cosy_bf16 *pool, int64_t page_elems,
    int64_t layer_off, const int64_t *dev_off, int page_frames, const int32_t *ptab,
    cosy_bf16 *out, int chunk, float scale, int n_split, const cosy_kdev *dev) {
  if (n_split < 1 || n_split > COSY_K_DIT_SPLIT_MAX ||
      (int64_t)n_tiles * n_split > 0x7fffffff)
    return cudaErrorInvalidValue;
  PagedGeo g;
  cudaError_t e = dit_paged_geo(&g, qkv, D, n_heads, segs, tiles, n_tiles, pool, page_elems,
                                layer_off, dev_off, page_frames, ptab, out, chunk, scale);
  if (e != cudaSuccess) return e;
  if (n_split == 1) /* one part: the one-block kernel */
    return cosy_k_attn_dit_paged(s, qkv, D, n_heads, segs, tiles, n_tiles, pool, page_elems,
                                 layer_off, dev_off, page_frames, ptab, out, chunk, scale);
  if (!dev || !dev->clusters) return cudaErrorNotSupported;
  if (n_tiles == 0) return cudaSuccess;
  g.n_split = n_split;
  return dit_cluster_launch(attn_dit_paged_split_kernel,
                            dim3((unsigned)(n_tiles * n_split), (unsigned)n_heads), n_split, s, g);
}

extern "C" int cosy_k_dit_auto_items(const cosy_k_dit_seg *segs, int n_segs,
                                     const int32_t *tiles, int n_tiles, int n_heads,
                                     int32_t *items, int cap, int *csize) {
  if (!csize || n_tiles < 0 || n_heads < 1 || n_heads > (1 << 26) || n_segs < 0 ||
      (n_tiles > 0 && (!segs || !tiles || !items)))
    return -1;
  int C = 1;
  for (int t = 0; t < n_tiles; ++t) {
    if (tiles[2 * t] < 0 || tiles[2 * t] >= n_segs) return -1;
    const int S = cosy_k_dit_auto_parts(segs[tiles[2 * t]].Lk);
    C = S > C ? S : C;
  }
  int n = 0;
  for (int t = 0; t < n_tiles; ++t) {
    const int S = cosy_k_dit_auto_parts(segs[tiles[2 * t]].Lk), per = C / S; /* heads a cluster */
    for (int h0 = 0; h0 < n_heads; h0 += per) {
      if (n >= cap) return -1;
      items[2 * n] = t;
      items[2 * n + 1] = h0 * 16 + S;
      ++n;
    }
  }
  *csize = C;
  return n;
}

extern "C" cudaError_t cosy_k_attn_dit_paged_auto(
    cudaStream_t s, const cosy_bf16 *qkv, int D, int n_heads, const cosy_k_dit_seg *segs,
    const int32_t *tiles, const int32_t *items, int n_items, int csize, const cosy_bf16 *pool,
    int64_t page_elems, int64_t layer_off, const int64_t *dev_off, int page_frames,
    const int32_t *ptab, cosy_bf16 *out, int chunk, float scale, const cosy_kdev *dev) {
  if (n_items < 0 || (csize != 1 && csize != 2 && csize != 4 && csize != 8) ||
      (int64_t)n_items * csize > 0x7fffffff || (n_items > 0 && !items))
    return cudaErrorInvalidValue;
  PagedGeo g;
  cudaError_t e = dit_paged_geo(&g, qkv, D, n_heads, segs, tiles, n_items, pool, page_elems,
                                layer_off, dev_off, page_frames, ptab, out, chunk, scale);
  if (e != cudaSuccess) return e;
  if (!dev || !dev->clusters) return cudaErrorNotSupported;
  if (n_items == 0) return cudaSuccess;
  if (csize == 1) { /* every tile of one part: the items are (tile, head) in tile order, so the
                     * one-block kernel itself over the n_items / n_heads tiles (its bits) */
    if (n_items % n_heads) return cudaErrorInvalidValue;
    attn_dit_paged_kernel<<<dim3((unsigned)(n_items / n_heads), (unsigned)n_heads), FA_THREADS, 0,
                            s>>>(g);
    return cudaGetLastError();
  }
  g.n_split = csize;
  g.items = items;
  return dit_cluster_launch(attn_dit_paged_auto_kernel, dim3((unsigned)(n_items * csize), 1u),
                            csize, s, g);
}
