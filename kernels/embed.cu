/* embed.cu - embedding row gather with id range checks.
 *
 * Math: out[i][d] = table[ids[i]][d], d < dim; an id outside [0, n_rows) gives out[i][:] = 0 and
 *   sets *err_flag = 1 (never an out-of-bounds read). Used for the LLM's text and speech
 *   embeddings (151936 x 896 and 6761 x 896) and the flow's token embedding (6561 x 80; the
 *   flow's clamp(min=0) is the caller's job).
 * Shapes: table [n_rows][dim], ids [n_ids], out [n_ids][out_stride].
 * Thread mapping: one block (128 threads) per id, threads stride over dim (coalesced row copy).
 * Numerics: a copy; bf16 -> fp32 is exact, fp32 -> bf16 rounds to nearest-even.
 */
#include "kcommon.cuh"

using namespace cosyk;

namespace {

constexpr int EMBED_THREADS = 128;

template <typename TT, typename TO>
__global__ void __launch_bounds__(EMBED_THREADS)
embed_kernel(const TT *__restrict__ table, int n_rows, int dim, const int32_t *__restrict__ ids,
             TO *out, int out_stride, int *err_flag) {
  const int i = blockIdx.x;
  const int id = ids[i];
  TO *o = out + (size_t)i * out_stride;
  if (id < 0 || id >= n_rows) {
    for (int d = threadIdx.x; d < dim; d += blockDim.x) st(o + d, 0.f);
    if (err_flag && threadIdx.x == 0) atomicOr(err_flag, 1);
    return;
  }
  const TT *row = table + (size_t)id * dim;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) st(o + d, ld(row + d));
}

} /* namespace */

extern "C" cudaError_t cosy_k_embed(cudaStream_t s, cosy_kdtype table_dt, const void *table,
                                    int n_rows, int dim, const int32_t *ids, int n_ids,
                                    cosy_kdtype out_dt, void *out, int out_stride,
                                    int *err_flag) {
  if (!cosyk_dt_ok(table_dt) || !cosyk_dt_ok(out_dt) || n_rows < 0 || dim <= 0 || n_ids < 0 ||
      out_stride < dim)
    return cudaErrorInvalidValue;
  if (n_ids == 0) return cudaSuccess;
  if ((!table && n_rows > 0) || !ids || !out) return cudaErrorInvalidValue;
  COSYK_DT_CASE(table_dt, TT, COSYK_DT_CASE(out_dt, TO, {
    embed_kernel<TT, TO><<<n_ids, EMBED_THREADS, 0, s>>>((const TT *)table, n_rows, dim, ids,
                                                         (TO *)out, out_stride, err_flag);
  }))
  return cudaGetLastError();
}
