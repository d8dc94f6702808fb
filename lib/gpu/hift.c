/* hift.c - the HiFT vocoder on the GPU; see hift.h for the interface and lib/ref/hift.c for the
 * math this reproduces (the same stages, lengths and argument checks).
 *
 * Pipeline (on the context's stream plus one side stream of our own, no host synchronization
 * until the result is copied):
 *   F0:     mel [80][T] (fp32, as uploaded) -> conv64 k4 (3 right zero/context frames) + ELU
 *           -> 4 x (conv64 k3, 2 left zeros, + ELU) -> classifier |.| -> f0 [T_f0]   (fp64)
 *   source: sine kernel (fp64 scan of the frame phases, one thread per harmonic) -> per-sample
 *           source kernel with the counter-based noise (or injected rows uploaded in chunks of
 *           NOISE_CHUNK samples) -> s [480 T_f0]
 *   decode: STFT(s) -> S [18][F];  conv_pre (4 right frames: zeros or context) -> x [C][T']
 *           source branches (independent of the main path): SRC_i = RB_src_i(downs_i(S)),
 *             stages 1 and 2 side by side on a second stream while the main stream runs
 *             conv_pre, source branch 0 and stage 0 (joined by an event before stage 1)
 *           stage i = 0,1,2:
 *             Y   = ups_i(leaky(x, 0.1) nearest x r_i) + SRC_i  (stage 2: ReflectionPad1d((1,0))
 *                                                               of the conv output first)
 *             R_r = RB_3i+r(Y) r = 0,1,2, side by side (6 launches):
 *                   x += c2_d(snake(c1_d(snake(x)))) for d = 1, 3, 5, with x = Y first
 *             the next input is mean(R_0, R_1, R_2), fused into the next conv's input load
 *           conv_post(leaky(mean(R), 0.01)) -> [18][F]; iSTFT head (exp/clip 100, sin, irfft,
 *           overlap-add, envelope, clamp +-0.99) -> wav.
 * Convolutions: kernels/conv.cu (implicit GEMM on tensor cores; activations fused into the
 * loads, residuals into the stores). The weights are fp32 on the device (the checkpoint's
 * values; HiFT is small: 20.8 M parameters, 83 MB), packed per tap, each conv's followed by a
 * copy rounded to TF32 on the host (another 83 MB) that the TF32 mode reads (conv_launch).
 * Buffers (planned at create for max_frames): 14 activation buffers of max(C T, c_i L_i) floats
 * (Y, R0-2, T0-2, X0-2 for the Snake-activated copies, ST1-2/SX1-2 for the side stream;
 * conv_pre writes R0), the source branches SRC_i [c_i][L_i], S and the conv_post output [18][F],
 * s, f0, the fp64 F0 ping-pong buffers, a noise staging buffer and a pinned host buffer for the
 * waveform: ~75 MB of activations at max_frames = 224 for the full model. With the fp16 convs
 * (COSY_HPREC_F16) also two workspaces for the staged conv kernel (gpu_hift_set_staged; one per
 * stream: 3 halves per float of an activation buffer, and of the largest source buffer for the
 * side stream), into which a launch's staging kernel writes each conv's activated input in
 * fp16 (conv_launch gives each conv of a launch its slice).
 * Precision choice (measured on an H200, full-size model, gpu_hift_infer incl. copies):
 *   3xTF32 (default): T = 224 final 6.4 ms, T = 100 non-final 3.9 ms; waveform vs the CPU
 *                     reference 2e-4 (golden small model) / 1.4e-3 (full model, T = 20) rel L2.
 *   TF32:             4.4 ms / 2.7 ms; 1.5e-2 / 1.8e-2 rel L2 (what PyTorch's default
 *                     cudnn.allow_tf32 gives on a GPU by default; the random-weight decoders
 *                     amplify the 3e-4 per-conv error, so it sits close to the 2e-2 test bound).
 *   Of the 6.4 ms: F0 (fp64) 0.3 ms, source + STFT + iSTFT + copies ~0.2 ms, convs the rest.
 *   F16 (COSY_HPREC_F16; the engine's default, cosyvoice.h COSY_VOCODER_FP16): fp16 operands,
 *                     fp32 sums (kernels/conv.cu conv2_kernel), TF32's operand precision at
 *                     twice the tensor rate; the fp16 weights (cosy_hift_conv_pack_f16,
 *                     ~42 MB) are made from the packed fp32 ones when it is first chosen
 *                     (gpu_hift_set_precision); H200: 1.3-1.4x faster convs than TF32, golden
 *                     decode 1.492e-2 against TF32's 1.549e-2 (bench/RESULTS.md).
 * Saturation (the F16 guard, on by default: gpu_hift_set_f16_guard): fp16 holds activations up
 * to 65504; a larger one would be clamped there silently (TF32 keeps fp32's range). Every conv
 * of a job carries that job's flag (cosy_hift_conv.sat: an int in sat_d, one per job of a call,
 * cleared by one cudaMemsetAsync before the decode); the F16 kernel sets it when a staged
 * activation exceeds 65504 (kernels_hift.h cosy_hift_conv.sat: in fact when an fp16 operand is
 * +-65504, so also for the values in (65488, 65504] that round there; kernels/conv.cu
 * conv2_kernel: a running max of the packed operands' magnitudes, one compare and store per
 * thread at the end). The flags come back in one 4-byte-per-job
 * copy queued before the call's existing synchronization; a flagged job's decode then runs again
 * in TF32 from the same inputs (decode_whole, f16_fallback), so that each job's samples are
 * either its fp16 decode (nothing saturated) or its TF32 decode, bit for bit, never a mix and
 * never dependent on the other jobs of its batch. The fallbacks are counted (gpu_hift_f16_stats).
 * Cost without saturation: one memset and one small copy per call, no extra synchronization.
 * Streaming (gpu_hift_stream_*, the window math in lib/ref/hift.h): the stream state stays on the
 * host; a call plans each job's window [min(a, b), T), gives each job consecutive slices of the
 * buffers above (jobs_place; the sum of the windows must fit max_frames), uploads the mel windows
 * in one copy and the kept source, runs the F0 predictors of all the jobs together (run_f0: each
 * of the 6 F0 launches covers every job, cosy_k_hift_conv64_group; a job's fp64 activations and
 * f0 are its own frame slice [f0off, f0off + T_f0) of the F0 buffers, T_f0 <= its window, so the
 * slices fit max_frames; its values are bit-identical to a run alone), then the sine and source
 * kernels per job (each reading its f0 slice, continuing the phase sums held in a per-job fp64
 * slot), then run_decode_batch: run_decode's stages with the jobs' convs side by side in launches
 * of up to 16 (never split, so batch invariant), and downloads the new samples, source and phase
 * sums before committing the streams. */
#include "gpu/hift.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_hift.h"
#include "util.h"

#define N_STAGES 3
#define N_DIL 3
#define N_ACT 17
#define HIFT_MAX_FRAMES 2000000
#define NOISE_CHUNK (64 * 480) /* samples of injected noise uploaded per source launch */
#define STREAM_MAXJ 64 /* streaming jobs per batch (larger calls run in several batches) */
/* The streaming decode's stage rows (up conv outputs, resblock buffers, the source branches) start
 * every STAGE_PITCH floats (one 32-byte sector): a row of n valid columns takes rnd_pitch(n). The
 * last stage's lengths are odd (120 Tx + 1); with an odd pitch every other row straddles sectors
 * and the conv epilogue's paired float2 accesses (kernels/conv.cu store_tile) cannot be used.
 * The values do not depend on the pitch (tests/test_gpu_hift.c test_kernel_conv_pitch). */
#define STAGE_PITCH 8
static size_t rnd_pitch(size_t n) { return (n + STAGE_PITCH - 1) / STAGE_PITCH * STAGE_PITCH; }

/* activation buffers; the side stream's source resblocks use ST/SX (B_SRC0.. must stay last) */
enum {
  B_Y, B_R0, B_R1, B_R2, B_T0, B_T1, B_T2, B_X0, B_X1, B_X2, B_ST1, B_ST2, B_SX1, B_SX2,
  B_SRC0, B_SRC1, B_SRC2
};

typedef struct gconv {
  float *wp, *b; /* packed [k][co_pad][ci_pad] (cosy_hift_conv_pack), bias [co] */
  uint16_t *wh;  /* COSY_HPREC_F16 (made by gpu_hift_set_precision): cosy_hift_conv_pack_f16 */
  float *wh_scale;
  int co, ci, k, co_pad, ci_pad;
} gconv;

typedef struct gres {
  gconv c1[N_DIL], c2[N_DIL];
  float *a1[N_DIL], *a2[N_DIL];     /* snake alpha [ch] */
  float *a1i[N_DIL], *a2i[N_DIL];   /* 1 / (alpha + 1e-9) in fp32, as the reference computes it */
  int k;
} gres;

struct gpu_hift {
  cosy_gpu *g;
  int C, Cc, nb, nh, mel, R, n_bins, hop, look_right, max_frames, prec;
  int up_rates[N_STAGES], down_stride[N_STAGES], dil[N_DIL];
  float sine_amp, noise_std, voiced_thr, lrelu, audio_limit, sr;
  /* F0 predictor (fp32 weights widened in the kernel) */
  float *cw[5], *cb[5];
  float *cls_w, cls_b;
  /* source */
  float *lin_w, lin_b;
  /* decoder */
  gconv conv_pre, ups[N_STAGES], downs[N_STAGES], conv_post;
  gres srb[N_STAGES], rb[3 * N_STAGES];
  /* device buffers */
  float *mel_d, *f0_d, *sine_d, *s_d, *noise_d, *ini_d, *S_d, *post_d, *wav_d;
  double *fa_d, *fb_d;
  double *cum_d; /* [STREAM_MAXJ][nh] the phase sums of the streams of a batch */
  size_t cap_act, cap_src[N_STAGES]; /* floats in act[0 .. B_SRC0) and act[B_SRC0 + i] */
  int f0_ctx, dec_ctx; /* streaming left contexts (ref_hift_stream_context) */
  int stream_split;     /* split mode of the streaming decoder's convs (1: never) */
  float *act[N_ACT];
  /* pinned host staging for the waveform / source download */
  float *stage_h;
  /* the F16 guard (COSY_HPREC_F16; see "Saturation" at the top): one saturation flag per job of
   * a call (device, cleared before each F16 decode; cosy_hift_conv.sat), its pinned host copy,
   * whether the guard is on (gpu_hift_set_f16_guard) and the counts since create */
  int *sat_d, *sat_h;
  int f16_guard;
  int64_t f16_jobs, f16_fallbacks;
  /* the staged fp16 convs (gpu_hift_set_staged; kernels/conv.cu conv3_kernel): one workspace
   * for the main stream's launches, one for the side stream's, xh_cap halves each (made with the
   * fp16 weights); a launch whose convs' inputs do not fit runs the register-staged kernel */
  int staged;
  uint16_t *xh_d[2];
  size_t xh_cap[2];
  /* the side stream runs the stage-1/2 source branches while the main stream runs stage 0 */
  cudaStream_t side;
  cudaEvent_t ev_fork, ev_join;
};

/* ---- create ---------------------------------------------------------------------------------- */

static cosy_status upload(gpu_hift *h, const float *host, size_t n, const char *what, float **out) {
  return cosy_gpu_upload_f32(h->g, host, n, COSY_KDT_F32, what, (void **)out);
}

/* a model tensor uploaded as-is (fp32) */
static cosy_status upload_tensor(gpu_hift *h, const cosy_model *m, const char *name, float **out) {
  float *t = cosy_model_f32(m, "%s", name);
  if (!t) return COSY_ERR_MODEL_FORMAT;
  const gguf_tensor *gt = cosy_model_tensor(m, name);
  size_t n = 1;
  for (uint32_t d = 0; gt && d < gt->n_dims; d++) n *= (size_t)gt->ne[d];
  cosy_status st = upload(h, t, n, name, out);
  free(t);
  return st;
}

static cosy_status load_conv(gpu_hift *h, const cosy_model *m, gconv *c, int co, int ci, int k,
                             const char *base) {
  char name[192];
  c->co = co, c->ci = ci, c->k = k;
  c->co_pad = cosy_hift_conv_pad(co, COSY_HCONV_BM);
  c->ci_pad = cosy_hift_conv_pad(ci, COSY_HCONV_CK);
  snprintf(name, sizeof name, "%s.weight", base);
  float *w = cosy_model_f32(m, "%s", name);
  if (!w) return COSY_ERR_MODEL_FORMAT;
  const size_t np = (size_t)k * c->co_pad * c->ci_pad;
  /* the packed weights, then the same rounded to TF32 (conv_launch) */
  float *wp = cosy_malloc(2 * np * sizeof(float));
  cosy_status st = COSY_ERR_NO_MEMORY;
  if (wp) {
    cosy_hift_conv_pack(w, co, ci, k, wp);
    memcpy(wp + np, wp, np * sizeof(float));
    cosy_hift_tf32_round(wp + np, np);
    st = upload(h, wp, 2 * np, name, &c->wp);
  }
  free(w), free(wp);
  if (st) return st;
  snprintf(name, sizeof name, "%s.bias", base);
  float *b = cosy_model_f32(m, "%s", name);
  if (!b) return COSY_ERR_MODEL_FORMAT;
  st = upload(h, b, (size_t)co, name, &c->b);
  free(b);
  return st;
}

/* a Snake alpha [ch] and its fp32 reciprocal 1 / (alpha + 1e-9) */
static cosy_status upload_alpha(gpu_hift *h, const cosy_model *m, const char *name, int ch,
                                float **a_d, float **inv_d) {
  float *a = cosy_model_f32(m, "%s", name);
  if (!a) return COSY_ERR_MODEL_FORMAT;
  float *inv = cosy_malloc((size_t)ch * sizeof(float));
  cosy_status st = COSY_ERR_NO_MEMORY;
  if (inv) {
    for (int c = 0; c < ch; c++) inv[c] = 1.0f / (a[c] + 1e-9f);
    st = upload(h, a, (size_t)ch, name, a_d);
    if (!st) st = upload(h, inv, (size_t)ch, name, inv_d);
  }
  free(a), free(inv);
  return st;
}

static cosy_status load_res(gpu_hift *h, const cosy_model *m, gres *r, int ch, int k,
                            const char *pfx, int idx) {
  char base[160];
  cosy_status st;
  r->k = k;
  for (int j = 0; j < N_DIL; j++) {
    snprintf(base, sizeof base, "hift.%s.%d.convs1.%d", pfx, idx, j);
    if ((st = load_conv(h, m, &r->c1[j], ch, ch, k, base))) return st;
    snprintf(base, sizeof base, "hift.%s.%d.convs2.%d", pfx, idx, j);
    if ((st = load_conv(h, m, &r->c2[j], ch, ch, k, base))) return st;
    for (int q = 1; q <= 2; q++) {
      snprintf(base, sizeof base, "hift.%s.%d.activations%d.%d.alpha", pfx, idx, q, j);
      if ((st = upload_alpha(h, m, base, ch, q == 1 ? &r->a1[j] : &r->a2[j],
                             q == 1 ? &r->a1i[j] : &r->a2i[j])))
        return st;
    }
  }
  return COSY_OK;
}

static cosy_status dalloc(gpu_hift *h, size_t bytes, const char *what, void **out) {
  return cosy_gpu_alloc(h->g, bytes, what, out);
}

void gpu_hift_free(gpu_hift *h) {
  if (!h) return;
  if (h->side) cudaStreamSynchronize(h->side), cudaStreamDestroy(h->side);
  if (h->ev_fork) cudaEventDestroy(h->ev_fork);
  if (h->ev_join) cudaEventDestroy(h->ev_join);
  cosy_gpu_host_free(h->stage_h);
  cosy_gpu_host_free(h->sat_h);
  free(h);
}

cosy_status gpu_hift_set_stream_split(gpu_hift *h, int mode) {
  if (!h || mode < 0 || mode > 2)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_set_stream_split: bad %s",
                    !h ? "handle" : "mode");
  h->stream_split = mode;
  return COSY_OK;
}

/* the fp16 weights of c (COSY_HPREC_F16: cosy_hift_conv_pack_f16), made once from its packed
 * fp32 weights on the device (the checkpoint's values) */
static cosy_status make_f16(gpu_hift *h, gconv *c) {
  if (c->wh) return COSY_OK;
  const size_t np = (size_t)c->k * c->co_pad * c->ci_pad;
  const size_t nh = (size_t)c->k * c->co_pad * cosy_hift_conv_pad(c->ci, COSY_HCONV_CKH);
  float *wp = cosy_malloc(np * sizeof(float));
  float *w = cosy_malloc((size_t)c->k * c->co * c->ci * sizeof(float));
  float *sc = cosy_malloc((size_t)c->co * sizeof(float));
  uint16_t *wh = cosy_malloc(nh * sizeof(uint16_t));
  cosy_status st = COSY_ERR_NO_MEMORY;
  uint16_t *d = NULL;
  if (wp && w && sc && wh &&
      !(st = cosy_gpu_check(cudaMemcpy(wp, c->wp, np * sizeof(float), cudaMemcpyDeviceToHost),
                            "hift: fp16 weights (download)"))) {
    for (int o = 0; o < c->co; o++)
      for (int i = 0; i < c->ci; i++)
        for (int j = 0; j < c->k; j++)
          w[((size_t)o * c->ci + i) * c->k + j] = wp[((size_t)j * c->co_pad + o) * c->ci_pad + i];
    cosy_hift_conv_pack_f16(w, c->co, c->ci, c->k, wh, sc);
    if (!(st = dalloc(h, nh * sizeof(uint16_t), "hift fp16 weights", (void **)&d)) &&
        !(st = cosy_gpu_check(cudaMemcpy(d, wh, nh * sizeof(uint16_t), cudaMemcpyHostToDevice),
                              "hift: fp16 weights (upload)")) &&
        !(st = upload(h, sc, (size_t)c->co, "hift fp16 weight scales", &c->wh_scale)))
      c->wh = d;
  }
  free(wp), free(w), free(sc), free(wh);
  return st;
}

static cosy_status make_f16_res(gpu_hift *h, gres *r) {
  cosy_status st = COSY_OK;
  for (int j = 0; j < N_DIL && !st; j++)
    if (!(st = make_f16(h, &r->c1[j]))) st = make_f16(h, &r->c2[j]);
  return st;
}

/* the staged convs' workspaces, once: 3 halves per float of an activation buffer for the main
 * stream (a launch reads slices of at most three buffers), 3 per float of the largest source
 * buffer for the side stream's source resblocks */
static cosy_status make_xh(gpu_hift *h) {
  if (h->xh_d[0] || !h->staged) return COSY_OK;
  size_t src = 0;
  for (int i = 0; i < N_STAGES; i++) src = h->cap_src[i] > src ? h->cap_src[i] : src;
  const size_t cap[2] = {3 * h->cap_act, 3 * src};
  for (int i = 0; i < 2; i++) {
    cosy_status st =
        dalloc(h, cap[i] * sizeof(uint16_t), "hift staged fp16 inputs", (void **)&h->xh_d[i]);
    if (st) return st;
    h->xh_cap[i] = cap[i];
  }
  return COSY_OK;
}

cosy_status gpu_hift_set_staged(gpu_hift *h, int on) {
  if (!h || (on != 0 && on != 1))
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_set_staged: bad %s", !h ? "handle" : "value");
  h->staged = on;
  return h->prec == COSY_HPREC_F16 ? make_xh(h) : COSY_OK;
}

cosy_status gpu_hift_set_f16_guard(gpu_hift *h, int on) {
  if (!h || (on != 0 && on != 1))
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_set_f16_guard: bad %s", !h ? "handle" : "value");
  h->f16_guard = on;
  return COSY_OK;
}

void gpu_hift_f16_stats(const gpu_hift *h, int64_t *jobs, int64_t *fallbacks) {
  if (jobs) *jobs = h ? h->f16_jobs : 0;
  if (fallbacks) *fallbacks = h ? h->f16_fallbacks : 0;
}

cosy_status gpu_hift_set_precision(gpu_hift *h, int prec) {
  if (!h || (prec != COSY_HPREC_TF32 && prec != COSY_HPREC_3XTF32 && prec != COSY_HPREC_F16))
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_set_precision: bad %s",
                    !h ? "handle" : "precision");
  if (prec == COSY_HPREC_F16) { /* the fp16 weights, once (~42 MB for the full model) */
    cosy_status st = make_f16(h, &h->conv_pre);
    if (!st) st = make_f16(h, &h->conv_post);
    for (int i = 0; i < N_STAGES && !st; i++)
      if (!(st = make_f16(h, &h->ups[i])) && !(st = make_f16(h, &h->downs[i])) &&
          !(st = make_f16_res(h, &h->srb[i])))
        for (int r = 0; r < 3 && !st; r++) st = make_f16_res(h, &h->rb[3 * i + r]);
    if (!st) st = make_xh(h);
    if (st) return st;
  }
  h->prec = prec;
  return COSY_OK;
}

cosy_status gpu_hift_create(cosy_gpu *g, const cosy_model *m, int max_frames, gpu_hift **out) {
  if (!out) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_create: out is NULL");
  *out = NULL;
  if (!g || !m)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_create: NULL %s", !g ? "device" : "model");
  if (max_frames < 1 || max_frames > HIFT_MAX_FRAMES)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_create: max_frames = %d out of [1, %d]",
                    max_frames, HIFT_MAX_FRAMES);
  const cosy_hparams *hp = &m->hp;
  if (hp->n_fft != 16 || hp->hop != 4 || hp->conv_pre_look_right != 4 || hp->mel_dim <= 0 ||
      hp->hift_ch % 8 || hp->hift_ch <= 0 || hp->hift_cond_ch <= 0 || hp->nb_harmonics < 0 ||
      hp->nb_harmonics > 63 ||
      hp->up_rates[0] * hp->up_rates[1] * hp->up_rates[2] * hp->hop != 480)
    return cosy_err(COSY_ERR_MODEL_FORMAT,
                    "gpu_hift_create: unsupported HiFT geometry (n_fft %d, hop %d, look-right %d, "
                    "channels %d, harmonics %d, rates %d,%d,%d)",
                    hp->n_fft, hp->hop, hp->conv_pre_look_right, hp->hift_ch, hp->nb_harmonics,
                    hp->up_rates[0], hp->up_rates[1], hp->up_rates[2]);
  gpu_hift *h = cosy_calloc(1, sizeof *h);
  if (!h) return COSY_ERR_NO_MEMORY;
  cosy_status st = COSY_OK;
  char base[160];
  h->g = g;
  if ((st = cosy_gpu_check(cosy_k_hift_conv_prepare(&g->dev), "hift: conv shared memory attribute")))
    goto fail;
  h->prec = COSY_HPREC_3XTF32;
  h->stream_split = 1;
  h->f16_guard = 1;
  h->staged = 1;
  h->max_frames = max_frames;
  h->C = hp->hift_ch, h->Cc = hp->hift_cond_ch, h->nb = hp->nb_harmonics, h->nh = h->nb + 1;
  h->mel = hp->mel_dim, h->hop = hp->hop, h->look_right = hp->conv_pre_look_right;
  h->n_bins = hp->n_fft / 2 + 1;
  h->R = hp->up_rates[0] * hp->up_rates[1] * hp->up_rates[2] * hp->hop;
  h->sine_amp = hp->nsf_alpha, h->noise_std = hp->nsf_sigma, h->voiced_thr = hp->voiced_threshold;
  h->lrelu = hp->lrelu_slope, h->audio_limit = hp->audio_limit, h->sr = (float)hp->sample_rate;
  for (int j = 0; j < N_DIL; j++) h->dil[j] = hp->rb_dilations[j];

  /* F0 predictor */
  for (int j = 0; j < 5; j++) {
    snprintf(base, sizeof base, "hift.f0_predictor.condnet.%d.weight", 2 * j);
    if ((st = upload_tensor(h, m, base, &h->cw[j]))) goto fail;
    snprintf(base, sizeof base, "hift.f0_predictor.condnet.%d.bias", 2 * j);
    if ((st = upload_tensor(h, m, base, &h->cb[j]))) goto fail;
  }
  if ((st = upload_tensor(h, m, "hift.f0_predictor.classifier.weight", &h->cls_w))) goto fail;
  {
    float *b = cosy_model_f32(m, "hift.f0_predictor.classifier.bias");
    if (!b) {
      st = COSY_ERR_MODEL_FORMAT;
      goto fail;
    }
    h->cls_b = b[0];
    free(b);
  }
  /* source */
  if ((st = upload_tensor(h, m, "hift.m_source.l_linear.weight", &h->lin_w))) goto fail;
  {
    float *b = cosy_model_f32(m, "hift.m_source.l_linear.bias");
    if (!b) {
      st = COSY_ERR_MODEL_FORMAT;
      goto fail;
    }
    h->lin_b = b[0];
    free(b);
  }
  /* decoder */
  if ((st = load_conv(h, m, &h->conv_pre, h->C, h->mel, h->look_right + 1, "hift.conv_pre")))
    goto fail;
  int ch = h->C;
  size_t act_n = (size_t)h->C * max_frames, len = (size_t)max_frames, src_n[N_STAGES];
  for (int i = 0; i < N_STAGES; i++) {
    int co = ch / 2, sd = 1;
    for (int j = i + 1; j < N_STAGES; j++) sd *= hp->up_rates[j];
    h->up_rates[i] = hp->up_rates[i];
    h->down_stride[i] = sd;
    snprintf(base, sizeof base, "hift.ups.%d", i);
    if ((st = load_conv(h, m, &h->ups[i], co, ch, hp->up_kernels[i], base))) goto fail;
    snprintf(base, sizeof base, "hift.source_downs.%d", i);
    if ((st = load_conv(h, m, &h->downs[i], co, 2 * h->n_bins, sd == 1 ? 1 : 2 * sd, base)))
      goto fail;
    if ((st = load_res(h, m, &h->srb[i], co, hp->src_rb_kernels[i], "source_resblocks", i)))
      goto fail;
    for (int r = 0; r < 3; r++)
      if ((st = load_res(h, m, &h->rb[3 * i + r], co, hp->rb_kernels[r], "resblocks", 3 * i + r)))
        goto fail;
    len = len * (size_t)hp->up_rates[i] + (i == N_STAGES - 1);
    /* the streaming decode's rows are STAGE_PITCH-aligned (sjob.ld) */
    const size_t pitched = (size_t)co * rnd_pitch(len);
    if (pitched > act_n) act_n = pitched;
    src_n[i] = pitched;
    ch = co;
  }
  if ((st = load_conv(h, m, &h->conv_post, 2 * h->n_bins, ch, 7, "hift.conv_post"))) goto fail;
  if ((st = ref_hift_stream_context(hp, &h->f0_ctx, &h->dec_ctx))) goto fail;

  /* buffers */
  {
    const size_t T = (size_t)max_frames, F = (size_t)(h->R / h->hop) * T + 1;
    const size_t Ls = T * (size_t)h->R;
    if ((st = dalloc(h, h->mel * T * sizeof(float), "hift mel", (void **)&h->mel_d))) goto fail;
    if ((st = dalloc(h, (size_t)h->Cc * T * sizeof(double), "hift f0 a", (void **)&h->fa_d)))
      goto fail;
    if ((st = dalloc(h, (size_t)h->Cc * T * sizeof(double), "hift f0 b", (void **)&h->fb_d)))
      goto fail;
    if ((st = dalloc(h, T * sizeof(float), "hift f0", (void **)&h->f0_d))) goto fail;
    if ((st = dalloc(h, T * h->nh * sizeof(float), "hift sine", (void **)&h->sine_d))) goto fail;
    if ((st = dalloc(h, Ls * sizeof(float), "hift source", (void **)&h->s_d))) goto fail;
    if ((st = dalloc(h, (size_t)NOISE_CHUNK * h->nh * sizeof(float), "hift noise",
                     (void **)&h->noise_d)))
      goto fail;
    if ((st = dalloc(h, h->nh * sizeof(float), "hift rand_ini", (void **)&h->ini_d))) goto fail;
    if ((st = dalloc(h, (size_t)STREAM_MAXJ * h->nh * sizeof(double), "hift phase sums",
                     (void **)&h->cum_d)))
      goto fail;
    h->cap_act = act_n;
    for (int i = 0; i < N_STAGES; i++) h->cap_src[i] = src_n[i];
    if ((st = dalloc(h, 2 * h->n_bins * F * sizeof(float), "hift stft", (void **)&h->S_d)))
      goto fail;
    if ((st = dalloc(h, 2 * h->n_bins * F * sizeof(float), "hift conv_post",
                     (void **)&h->post_d)))
      goto fail;
    if ((st = dalloc(h, Ls * sizeof(float), "hift wav", (void **)&h->wav_d))) goto fail;
    for (int i = 0; i < N_ACT; i++) {
      const size_t n = i >= B_SRC0 ? src_n[i - B_SRC0] : act_n;
      if ((st = dalloc(h, n * sizeof(float), "hift activations", (void **)&h->act[i]))) goto fail;
    }
    if ((st = cosy_gpu_host_alloc(Ls * sizeof(float), (void **)&h->stage_h))) goto fail;
    if ((st = dalloc(h, STREAM_MAXJ * sizeof(int), "hift fp16 saturation flags",
                     (void **)&h->sat_d)) ||
        (st = cosy_gpu_host_alloc(STREAM_MAXJ * sizeof(int), (void **)&h->sat_h)))
      goto fail;
  }
  if ((st = cosy_gpu_check(cudaStreamCreateWithFlags(&h->side, cudaStreamNonBlocking),
                           "hift side stream")) ||
      (st = cosy_gpu_check(cudaEventCreateWithFlags(&h->ev_fork, cudaEventDisableTiming),
                           "hift event")) ||
      (st = cosy_gpu_check(cudaEventCreateWithFlags(&h->ev_join, cudaEventDisableTiming),
                           "hift event")))
    goto fail;
  *out = h;
  return COSY_OK;
fail:
  gpu_hift_free(h);
  return st;
}

/* ---- stages ---------------------------------------------------------------------------------- */

static int cancelled(const volatile int *cancel) { return cancel && *cancel; }

static cosy_status check_T(const gpu_hift *h, const char *fn, int T, int finalize,
                           int min_nonfinal) {
  int lo = finalize ? 1 : min_nonfinal;
  if (T < lo || T > h->max_frames)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "%s: T = %d mel frames out of range [%d, %d] (%s; max_frames %d)", fn, T, lo,
                    h->max_frames, finalize ? "final" : "non-final", h->max_frames);
  return COSY_OK;
}

static cosy_status ck(cudaError_t e, const char *what) { return cosy_gpu_check(e, what); }

/* a conv descriptor: input rows `in` [ci][ld_in] with len_in valid columns */
static cosy_hift_conv conv_desc(const gconv *w, const float *in, int ld_in, int len_in, int up,
                                int act, float slope, const float *alpha, int dil, int stride,
                                int pad_left, int reflect, float *out, int ld_out, int n_out) {
  cosy_hift_conv c;
  memset(&c, 0, sizeof c);
  c.in = in, c.ld_in = ld_in, c.len_in = len_in, c.ci = w->ci, c.up = up;
  c.act = act, c.slope = slope, c.alpha = alpha;
  c.wp = w->wp, c.bias = w->b, c.co = w->co, c.co_pad = w->co_pad, c.ci_pad = w->ci_pad;
  c.wh = w->wh, c.wh_scale = w->wh_scale; /* NULL until COSY_HPREC_F16 is chosen */
  c.k = w->k, c.dil = dil, c.stride = stride, c.pad_left = pad_left, c.reflect = reflect;
  c.out = out, c.ld_out = ld_out, c.n_out = n_out;
  return c;
}

/* One launch of n <= COSY_HCONV_MAXG convs at the vocoder's precision; split_mode as
 * cosy_k_hift_conv_split, or -1 for cosy_k_hift_conv (the process-wide mode). Every conv's
 * weights (load_conv) are followed by their copy rounded to TF32 on the host: in TF32 the convs
 * read that copy with COSY_HPREC_TF32_ROUNDED, the same bits without a rounding at every
 * fragment load (kernels/conv.cu). */
static cosy_status conv_launch(gpu_hift *h, cudaStream_t s, const cosy_hift_conv *c, int n,
                               int split_mode, const char *what) {
  cosy_hift_conv r[COSY_HCONV_MAXG];
  int prec = h->prec;
  if (prec == COSY_HPREC_TF32 && n <= COSY_HCONV_MAXG) {
    for (int i = 0; i < n; i++) {
      r[i] = c[i];
      r[i].wp += (size_t)c[i].k * c[i].co_pad * c[i].ci_pad;
    }
    c = r;
    prec = COSY_HPREC_TF32_ROUNDED;
  } else if (prec == COSY_HPREC_F16 && h->staged && h->xh_d[0] && n <= COSY_HCONV_MAXG) {
    /* the staged kernel: each conv its slice of this stream's workspace (16-byte aligned) */
    const int w = s == h->side ? 1 : 0;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
      r[i] = c[i];
      const size_t need = (cosy_hift_conv_xh_halves(&c[i]) + 7) / 8 * 8;
      r[i].xh = off + need <= h->xh_cap[w] ? h->xh_d[w] + off : NULL;
      off += need;
    }
    if (off <= h->xh_cap[w]) c = r;
  }
  return ck(split_mode < 0 ? cosy_k_hift_conv(s, &h->g->dev, c, n, prec)
                           : cosy_k_hift_conv_split(s, &h->g->dev, c, n, prec, split_mode),
            what);
}

static cosy_status conv(gpu_hift *h, cudaStream_t s, const cosy_hift_conv *c, int n,
                        const char *what) {
  return conv_launch(h, s, c, n, -1, what);
}

/* n independent convs in launches of up to COSY_HCONV_MAXG; split_mode as conv_launch */
static cosy_status conv_many(gpu_hift *h, cudaStream_t s, const cosy_hift_conv *c, int n,
                             int split_mode, const char *what) {
  for (int i = 0; i < n; i += COSY_HCONV_MAXG) {
    const int m = n - i < COSY_HCONV_MAXG ? n - i : COSY_HCONV_MAXG;
    cosy_status st = conv_launch(h, s, c + i, m, split_mode, what);
    if (st) return st;
  }
  return COSY_OK;
}

/* One job of the F0 predictor: mel (device) [80][ld] with T valid columns (final: zeros after
 * them; else the last 3 are look-ahead context) -> T_f0 = T (final) or T - 3 values at
 * f0_d + off. The job's fp64 activations are [Cc][T_f0] at Cc off in fa_d and fb_d (allocated
 * for Cc max_frames), so jobs whose frame ranges [off, off + T_f0) do not overlap and end within
 * max_frames run together. */
typedef struct f0_job {
  const float *mel;
  int ld, T, finalize;
  size_t off;
} f0_job;

/* The F0 predictors of n jobs together: each of the 5 convs and the classifier is one grouped
 * launch for all the jobs (cosy_k_hift_conv64_group: up to COSY_HCONV64_MAXG jobs a launch), each
 * job's values bit-identical to running it alone. */
static cosy_status run_f0(gpu_hift *h, const f0_job *jobs, int n) {
  cudaStream_t s = h->g->stream;
  const int Cc = h->Cc;
  if (n < 1) return COSY_OK;
  cosy_hift_conv64 *c = cosy_malloc((size_t)n * sizeof *c);
  cosy_hift_f0cls *f = cosy_malloc((size_t)n * sizeof *f);
  cosy_status st = COSY_OK;
  if (!c || !f) {
    free(c), free(f);
    return COSY_ERR_NO_MEMORY;
  }
  for (int q = 0; q < n && !st; q++) {
    const f0_job *jb = &jobs[q];
    const int Tf = jb->finalize ? jb->T : jb->T - 3;
    if (Tf < 0 || jb->off + (size_t)Tf > (size_t)h->max_frames)
      st = cosy_err(COSY_ERR_INTERNAL, "hift f0: job %d (frames [%zu, %zu)) exceeds max_frames %d",
                    q, jb->off, jb->off + (size_t)(Tf < 0 ? 0 : Tf), h->max_frames);
    memset(&c[q], 0, sizeof c[q]);
    c[q].in_f32 = jb->mel, c[q].ld_in = jb->ld, c[q].len_in = jb->T;
    c[q].out = h->fa_d + (size_t)Cc * jb->off, c[q].ld_out = Tf, c[q].n_out = Tf;
  }
  if (!st)
    st = ck(cosy_k_hift_conv64_group(s, c, n, h->mel, h->cw[0], h->cb[0], Cc, 4, 0),
            "hift f0 condnet.0");
  double *a = h->fa_d, *b = h->fb_d;
  for (int j = 1; j < 5 && !st; j++) {
    for (int q = 0; q < n; q++) {
      const size_t o = (size_t)Cc * jobs[q].off;
      const int Tf = c[q].n_out;
      c[q].in_f32 = NULL, c[q].in_f64 = a + o, c[q].ld_in = Tf, c[q].len_in = Tf;
      c[q].out = b + o;
    }
    st = ck(cosy_k_hift_conv64_group(s, c, n, Cc, h->cw[j], h->cb[j], Cc, 3, 2), "hift f0 condnet");
    double *t = a;
    a = b, b = t;
  }
  for (int q = 0; q < n && !st; q++) {
    f[q].h = a + (size_t)Cc * jobs[q].off, f[q].ld_h = c[q].n_out, f[q].n = c[q].n_out;
    f[q].f0 = h->f0_d + jobs[q].off;
  }
  if (!st)
    st = ck(cosy_k_hift_f0_classify_group(s, f, n, Cc, h->cls_w, h->cls_b), "hift f0 classifier");
  free(c), free(f);
  return st;
}

/* the one job of the whole-utterance entry points: mel_d [80][T] -> f0_d [T_f0] */
static cosy_status run_f0_one(gpu_hift *h, int T, int finalize) {
  const f0_job jb = {h->mel_d, T, T, finalize, 0};
  return run_f0(h, &jb, 1);
}

/* f0_d [Tf] -> s_d [Tf R] */
static cosy_status run_source(gpu_hift *h, int Tf, const ref_hift_noise *noise) {
  cudaStream_t s = h->g->stream;
  const int64_t L = (int64_t)Tf * h->R;
  const float amp_unvoiced = h->sine_amp / 3.0f;
  cosy_status st;
  if (!noise) {
    st = ck(cosy_k_hift_sine(s, h->f0_d, Tf, h->nb, h->R, h->sr, h->sine_amp, NULL, h->sine_d),
            "hift sine");
    if (!st)
      st = ck(cosy_k_hift_source(s, h->f0_d, h->sine_d, h->nb, h->R, 0, L, NULL, h->lin_w,
                                 h->lin_b, h->voiced_thr, h->noise_std, amp_unvoiced, h->s_d),
              "hift source");
    return st;
  }
  st = ck(cudaMemcpyAsync(h->ini_d, noise->rand_ini, h->nh * sizeof(float),
                          cudaMemcpyHostToDevice, s),
          "hift rand_ini upload");
  if (!st)
    st = ck(cosy_k_hift_sine(s, h->f0_d, Tf, h->nb, h->R, h->sr, h->sine_amp, h->ini_d,
                             h->sine_d),
            "hift sine");
  for (int64_t i0 = 0; i0 < L && !st; i0 += NOISE_CHUNK) {
    const int64_t n = L - i0 < NOISE_CHUNK ? L - i0 : NOISE_CHUNK;
    st = ck(cudaMemcpyAsync(h->noise_d, noise->sine_waves + (size_t)i0 * h->nh,
                            (size_t)n * h->nh * sizeof(float), cudaMemcpyHostToDevice, s),
            "hift noise upload");
    if (!st)
      st = ck(cosy_k_hift_source(s, h->f0_d, h->sine_d, h->nb, h->R, i0, n, h->noise_d,
                                 h->lin_w, h->lin_b, h->voiced_thr, h->noise_std, amp_unvoiced,
                                 h->s_d + i0),
              "hift source");
  }
  return st;
}

/* ResBlocks run side by side, one conv of each per launch (6 launches): for d = 0,1,2:
 *   tmp = c1_d(snake1_d(x)) (dilation d);  x = x + c2_d(snake2_d(tmp))
 * on x [ch][ld] (n valid columns a row; tmp, xa and first_in the same layout) in place. first_in
 * (may be NULL): the block input when x does not hold it yet (the first conv1 reads it, the first
 * conv2 adds it and writes x). The Snakes are computed once per
 * value in the epilogue of the conv that produces it: c1_d writes snake2_d(tmp) into tmp, c2_d
 * (d < 2) also writes snake1_{d+1}(x) into xa; only the first conv1 applies its Snake on load. */
typedef struct rb_job {
  const gres *r;
  float *x, *tmp, *xa;
  const float *first_in;
  int n, ld; /* n valid columns in rows of ld floats */
  int *sat;  /* the job's F16 saturation flag (cosy_hift_conv.sat) */
} rb_job;

static cosy_status run_resblocks_ex(gpu_hift *h, cudaStream_t s, const rb_job *jobs, int n_jobs,
                                    int split_mode, const char *what) {
  cosy_hift_conv cbuf[4], *c = cbuf;
  if (n_jobs > 4 && !(c = cosy_malloc((size_t)n_jobs * sizeof *c))) return COSY_ERR_NO_MEMORY;
  cosy_status st = COSY_OK;
  for (int d = 0; d < N_DIL && !st; d++) {
    const int dil = h->dil[d];
    for (int q = 0; q < n_jobs; q++) {
      const rb_job *jb = &jobs[q];
      const gres *r = jb->r;
      const int K = r->k, n = jb->n, ld = jb->ld;
      if (d == 0) {
        c[q] = conv_desc(&r->c1[d], jb->first_in ? jb->first_in : jb->x, ld, n, 1,
                         COSY_HACT_SNAKE, 0.f, r->a1[d], dil, 1, (K - 1) * dil, 0, NULL, ld, n);
        c[q].alpha_inv = r->a1i[d];
      } else {
        c[q] = conv_desc(&r->c1[d], jb->xa, ld, n, 1, COSY_HACT_NONE, 0.f, NULL, dil, 1,
                         (K - 1) * dil, 0, NULL, ld, n);
      }
      c[q].out_act = jb->tmp, c[q].ld_out_act = ld, c[q].oact = COSY_HACT_SNAKE;
      c[q].oalpha = r->a2[d], c[q].oalpha_inv = r->a2i[d];
      c[q].sat = jb->sat;
    }
    if ((st = conv_many(h, s, c, n_jobs, split_mode, what))) break;
    for (int q = 0; q < n_jobs; q++) {
      const rb_job *jb = &jobs[q];
      const gres *r = jb->r;
      const int K = r->k, n = jb->n, ld = jb->ld;
      c[q] = conv_desc(&r->c2[d], jb->tmp, ld, n, 1, COSY_HACT_NONE, 0.f, NULL, 1, 1, K - 1, 0,
                       jb->x, ld, n);
      c[q].res = (d == 0 && jb->first_in) ? jb->first_in : jb->x, c[q].ld_res = ld;
      c[q].sat = jb->sat;
      if (d + 1 < N_DIL) {
        c[q].out_act = jb->xa, c[q].ld_out_act = ld, c[q].oact = COSY_HACT_SNAKE;
        c[q].oalpha = r->a1[d + 1], c[q].oalpha_inv = r->a1i[d + 1];
      }
    }
    st = conv_many(h, s, c, n_jobs, split_mode, what);
  }
  if (c != cbuf) free(c);
  return st;
}

static cosy_status run_resblocks(gpu_hift *h, cudaStream_t s, const rb_job *jobs, int n_jobs,
                                 const char *what) {
  return run_resblocks_ex(h, s, jobs, n_jobs, -1, what);
}

/* mel [80][ld_mel] (T valid columns) and sig [Tm R] (device) -> wav_d [nout]. Order: STFT; side stream: the source downs and
 * resblocks of stages 1 and 2 (-> SRC1, SRC2; tmps ST/SX); main stream: source down 0 + conv_pre
 * (-> SRC0, R0), source resblock 0, then per stage the up conv (-> Y, adding SRC_i as its
 * residual: the source branch of a stage does not depend on the main path; stage 1 waits for
 * the side stream) and the three resblocks on Y (6 launches, -> R0-R2); conv_post on their mean;
 * iSTFT. */
static cosy_status run_decode(gpu_hift *h, const float *mel, int ld_mel, const float *sig, int T,
                              int finalize, const volatile int *cancel, int *sat, int64_t *nout) {
  cudaStream_t s = h->g->stream;
  const int R = h->R;
  const int Tm = finalize ? T : T - 3;
  const int Tx = finalize ? T : T - 3 - h->look_right;
  const int64_t Ls = (int64_t)Tm * R;
  const int F = (R / h->hop) * Tx + 1;
  float **A = h->act;
  cosy_status st;
  int lens[N_STAGES];
  {
    int len = Tx;
    for (int i = 0; i < N_STAGES; i++)
      len = len * h->up_rates[i] + (i == N_STAGES - 1), lens[i] = len;
    if (len != F) return cosy_err(COSY_ERR_INTERNAL, "gpu_hift: length mismatch %d vs %d", len, F);
  }

  if ((st = ck(cosy_k_hift_stft(s, sig, Ls, F, h->S_d, F), "hift stft"))) return st;
  /* source branches: SRC_i = RB_src_i(downs_i(S)) (S with sd-1 zeros on the left, stride sd).
   * Stages 1 and 2 on the side stream, overlapping stage 0 (whose 256-channel convs leave SMs
   * idle); stage 0's with conv_pre (mel[:, :Tm], zeros beyond when final, else the last 4
   * frames are context -> R0 [C][Tx]) on the main stream. */
  if ((st = ck(cudaEventRecord(h->ev_fork, s), "hift fork")) ||
      (st = ck(cudaStreamWaitEvent(h->side, h->ev_fork, 0), "hift fork")))
    return st;
  {
    cosy_hift_conv c[2];
    for (int i = 1; i < N_STAGES; i++) {
      const int sd = h->down_stride[i];
      c[i - 1] = conv_desc(&h->downs[i], h->S_d, F, F, 1, COSY_HACT_NONE, 0.f, NULL, 1, sd, sd - 1,
                           0, A[B_SRC0 + i], lens[i], lens[i]);
      c[i - 1].sat = sat;
    }
    if ((st = conv(h, h->side, c, 2, "hift source_downs"))) return st;
    rb_job jobs[2];
    for (int i = 1; i < N_STAGES; i++) {
      jobs[i - 1].r = &h->srb[i], jobs[i - 1].x = A[B_SRC0 + i];
      jobs[i - 1].tmp = A[B_ST1 + i - 1], jobs[i - 1].xa = A[B_SX1 + i - 1];
      jobs[i - 1].first_in = NULL, jobs[i - 1].n = jobs[i - 1].ld = lens[i];
      jobs[i - 1].sat = sat;
    }
    if ((st = run_resblocks(h, h->side, jobs, 2, "hift source resblocks"))) return st;
    if ((st = ck(cudaEventRecord(h->ev_join, h->side), "hift join"))) return st;
  }
  {
    cosy_hift_conv c[2];
    c[0] = conv_desc(&h->downs[0], h->S_d, F, F, 1, COSY_HACT_NONE, 0.f, NULL, 1,
                     h->down_stride[0], h->down_stride[0] - 1, 0, A[B_SRC0], lens[0], lens[0]);
    c[1] = conv_desc(&h->conv_pre, mel, ld_mel, Tm, 1, COSY_HACT_NONE, 0.f, NULL, 1, 1, 0, 0,
                     A[B_R0], Tx, Tx);
    c[0].sat = c[1].sat = sat;
    if ((st = conv(h, s, c, 2, "hift source_downs/conv_pre"))) return st;
    rb_job j0 = {&h->srb[0], A[B_SRC0], A[B_T0], A[B_X0], NULL, lens[0], lens[0], sat};
    if ((st = run_resblocks(h, s, &j0, 1, "hift source resblock"))) return st;
  }
  int len = Tx;
  for (int i = 0; i < N_STAGES; i++) {
    if (cancelled(cancel)) return cosy_err(COSY_ERR_CANCELLED, "gpu_hift: cancelled");
    if (i == 1 && (st = ck(cudaStreamWaitEvent(s, h->ev_join, 0), "hift join"))) return st;
    const int r = h->up_rates[i], K = h->ups[i].k, last = i == N_STAGES - 1;
    const int lout = lens[i];
    /* stage input: conv_pre's output (in R0) or the mean of the previous stage's resblocks */
    cosy_hift_conv c;
    if (i == 0) {
      c = conv_desc(&h->ups[i], A[B_R0], len, len, r, COSY_HACT_LEAKY, h->lrelu, NULL, 1, 1,
                    K - 1, last, A[B_Y], lout, lout);
    } else {
      c = conv_desc(&h->ups[i], A[B_R0], len, len, r, COSY_HACT_MEAN3_LEAKY, h->lrelu, NULL, 1, 1,
                    K - 1, last, A[B_Y], lout, lout);
      c.in2 = A[B_R1], c.in3 = A[B_R2];
    }
    c.res = A[B_SRC0 + i], c.ld_res = lout; /* x = ups(x) + source_resblock(source_down(S)) */
    c.sat = sat;
    if ((st = conv(h, s, &c, 1, "hift ups"))) return st;
    rb_job jobs[3];
    for (int q = 0; q < 3; q++) {
      jobs[q].r = &h->rb[3 * i + q], jobs[q].x = A[B_R0 + q], jobs[q].tmp = A[B_T0 + q];
      jobs[q].xa = A[B_X0 + q];
      jobs[q].first_in = A[B_Y], jobs[q].n = jobs[q].ld = lout, jobs[q].sat = sat;
    }
    if ((st = run_resblocks(h, s, jobs, 3, "hift resblocks"))) return st;
    len = lout;
  }
  if (cancelled(cancel)) return cosy_err(COSY_ERR_CANCELLED, "gpu_hift: cancelled");
  {
    cosy_hift_conv c = conv_desc(&h->conv_post, A[B_R0], len, len, 1, COSY_HACT_MEAN3_LEAKY, 0.01f,
                                 NULL, 1, 1, h->conv_post.k - 1, 0, h->post_d, F, F);
    c.in2 = A[B_R1], c.in3 = A[B_R2], c.sat = sat;
    if ((st = conv(h, s, &c, 1, "hift conv_post"))) return st;
  }
  const int64_t ny = (int64_t)R * Tx;
  *nout = finalize ? ny : ny - R;
  return ck(cosy_k_hift_istft(s, h->post_d, F, F, *nout, h->audio_limit, 0, h->wav_d),
            "hift istft");
}

/* ---- host entry points ----------------------------------------------------------------------- */

static cosy_status upload_mel(gpu_hift *h, const float *mel, int T) {
  return ck(cudaMemcpyAsync(h->mel_d, mel, (size_t)h->mel * T * sizeof(float),
                            cudaMemcpyHostToDevice, h->g->stream),
            "hift mel upload");
}

/* copy n floats of dev to a new malloc'd host array through the pinned stage */
static cosy_status download_new(gpu_hift *h, const float *dev, int64_t n, float **out) {
  *out = NULL;
  cosy_status st = ck(cudaMemcpyAsync(h->stage_h, dev, (size_t)n * sizeof(float),
                                      cudaMemcpyDeviceToHost, h->g->stream),
                      "hift download");
  if (!st) st = cosy_gpu_sync(h->g, "hift");
  if (st) return st;
  float *p = cosy_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p) return COSY_ERR_NO_MEMORY;
  memcpy(p, h->stage_h, (size_t)n * sizeof(float));
  *out = p;
  return COSY_OK;
}

/* The F16 guard (see "Saturation" at the top): whether the decodes of this call run it */
static int f16_guarded(const gpu_hift *h) { return h->prec == COSY_HPREC_F16 && h->f16_guard; }

/* clear the saturation flags of n jobs before an F16 decode (on the stream: no synchronization) */
static cosy_status sat_clear(gpu_hift *h, int n) {
  return ck(cudaMemsetAsync(h->sat_d, 0, (size_t)n * sizeof(int), h->g->stream),
            "hift fp16 flags clear");
}

/* queue the download of n jobs' flags into sat_h, read after the call's synchronization */
static cosy_status sat_download(gpu_hift *h, int n) {
  return ck(cudaMemcpyAsync(h->sat_h, h->sat_d, (size_t)n * sizeof(int), cudaMemcpyDeviceToHost,
                            h->g->stream),
            "hift fp16 flags download");
}

/* the whole-utterance decode of mel_d / s_d (run_decode) and the download of its waveform into
 * *wav. Guarded F16: the flag is cleared before, downloaded with the waveform (the same
 * synchronization), and a flagged decode runs again in TF32 from the same inputs (mel_d and s_d
 * are not written by run_decode): the waveform is then TF32's, bit for bit. */
static cosy_status decode_whole(gpu_hift *h, int T, int finalize, const volatile int *cancel,
                                float **wav, int64_t *nout) {
  const int guard = f16_guarded(h);
  cosy_status st = guard ? sat_clear(h, 1) : COSY_OK;
  if (!st) st = run_decode(h, h->mel_d, T, h->s_d, T, finalize, cancel, h->sat_d, nout);
  if (!st && guard) st = sat_download(h, 1);
  if (!st) st = download_new(h, h->wav_d, *nout, wav);
  if (st || !guard) return st;
  h->f16_jobs++;
  if (!h->sat_h[0]) return COSY_OK;
  free(*wav);
  *wav = NULL;
  h->prec = COSY_HPREC_TF32;
  st = run_decode(h, h->mel_d, T, h->s_d, T, finalize, cancel, NULL, nout);
  h->prec = COSY_HPREC_F16;
  if (!st) st = download_new(h, h->wav_d, *nout, wav);
  if (!st) h->f16_fallbacks++;
  return st;
}

/* finish after an error or a cancel: let the stream drain so that the buffers are idle */
static cosy_status drain(gpu_hift *h, cosy_status st) {
  cudaStreamSynchronize(h->side);
  cudaStreamSynchronize(h->g->stream);
  return st;
}

cosy_status gpu_hift_f0(gpu_hift *h, const float *mel, int T, int finalize, float *f0) {
  if (!h || !mel || !f0)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_f0: NULL %s",
                    !h ? "handle" : !mel ? "mel" : "f0");
  cosy_status st = check_T(h, "gpu_hift_f0", T, finalize, 4);
  if (st) return st;
  const int Tf = finalize ? T : T - 3;
  if (!st) st = upload_mel(h, mel, T);
  if (!st) st = run_f0_one(h, T, finalize);
  if (!st)
    st = ck(cudaMemcpyAsync(h->stage_h, h->f0_d, (size_t)Tf * sizeof(float),
                            cudaMemcpyDeviceToHost, h->g->stream),
            "hift f0 download");
  if (!st) st = cosy_gpu_sync(h->g, "gpu_hift_f0");
  if (!st) memcpy(f0, h->stage_h, (size_t)Tf * sizeof(float));
  return st ? drain(h, st) : st;
}

cosy_status gpu_hift_source(gpu_hift *h, const float *f0, int T_f0, const ref_hift_noise *noise,
                            float *s) {
  if (!h || !f0 || !s)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_source: NULL %s",
                    !h ? "handle" : !f0 ? "f0" : "s");
  if (T_f0 < 1 || T_f0 > h->max_frames)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_source: T_f0 = %d out of range [1, %d]", T_f0,
                    h->max_frames);
  const int64_t L = (int64_t)T_f0 * h->R;
  if (noise && (!noise->rand_ini || !noise->sine_waves || noise->n_rows < L))
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "gpu_hift_source: injected noise needs rand_ini, sine_waves and >= %lld rows "
                    "(has %lld)",
                    (long long)L, (long long)noise->n_rows);
  cosy_status st = ck(cudaMemcpyAsync(h->f0_d, f0, (size_t)T_f0 * sizeof(float),
                                      cudaMemcpyHostToDevice, h->g->stream),
                      "hift f0 upload");
  if (!st) st = run_source(h, T_f0, noise);
  if (!st)
    st = ck(cudaMemcpyAsync(h->stage_h, h->s_d, (size_t)L * sizeof(float),
                            cudaMemcpyDeviceToHost, h->g->stream),
            "hift source download");
  if (!st) st = cosy_gpu_sync(h->g, "gpu_hift_source");
  if (!st) memcpy(s, h->stage_h, (size_t)L * sizeof(float));
  return st ? drain(h, st) : st;
}

cosy_status gpu_hift_decode(gpu_hift *h, const float *mel, int T, const float *s, int finalize,
                            float **wav, int64_t *n) {
  if (wav) *wav = NULL;
  if (n) *n = 0;
  if (!h || !mel || !s || !wav || !n)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_decode: NULL %s",
                    !h ? "handle" : !mel ? "mel" : !s ? "s" : !wav ? "wav" : "n");
  cosy_status st = check_T(h, "gpu_hift_decode", T, finalize, 9);
  if (st) return st;
  const int Tm = finalize ? T : T - 3;
  int64_t nout = 0;
  st = upload_mel(h, mel, T);
  if (!st)
    st = ck(cudaMemcpyAsync(h->s_d, s, (size_t)Tm * h->R * sizeof(float), cudaMemcpyHostToDevice,
                            h->g->stream),
            "hift source upload");
  if (!st) st = decode_whole(h, T, finalize, NULL, wav, &nout);
  if (st) return drain(h, st);
  *n = nout;
  return COSY_OK;
}

cosy_status gpu_hift_infer(gpu_hift *h, const float *mel, int T, int finalize,
                           const volatile int *cancel, float **wav, int64_t *n) {
  if (wav) *wav = NULL;
  if (n) *n = 0;
  if (!h || !mel || !wav || !n)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_infer: NULL %s",
                    !h ? "handle" : !mel ? "mel" : !wav ? "wav" : "n");
  cosy_status st = check_T(h, "gpu_hift_infer", T, finalize, 9);
  if (st) return st;
  if (cancelled(cancel)) return cosy_err(COSY_ERR_CANCELLED, "gpu_hift_infer: cancelled");
  const int Tf = finalize ? T : T - 3;
  int64_t nout = 0;
  st = upload_mel(h, mel, T);
  if (!st) st = run_f0_one(h, T, finalize);
  if (!st && cancelled(cancel)) st = cosy_err(COSY_ERR_CANCELLED, "gpu_hift_infer: cancelled");
  if (!st) st = run_source(h, Tf, NULL);
  if (!st && cancelled(cancel)) st = cosy_err(COSY_ERR_CANCELLED, "gpu_hift_infer: cancelled");
  if (!st) st = decode_whole(h, T, finalize, cancel, wav, &nout);
  if (st) return drain(h, st);
  *n = nout;
  return COSY_OK;
}

/* ---- streaming (the math and the contexts: lib/ref/hift.h; this mirrors ref_hift_stream_run) --- */

struct gpu_hift_stream {
  int mel_dim, nh, R, finished;
  int64_t T;       /* mel frames received */
  int64_t f0_done; /* frames whose f0 and source are computed */
  int64_t sent;    /* samples returned */
  int64_t mel_lo;  /* mel holds frames [mel_lo, T), frame-major (host) */
  int64_t s_lo;    /* s holds the source of frames [s_lo, f0_done) (host) */
  float *mel, *s;
  int64_t mel_cap, s_cap; /* capacities in frames */
  double cum[64];         /* phase running sums after frame f0_done - 1 (nh <= 64) */
};

cosy_status gpu_hift_stream_create(gpu_hift *h, gpu_hift_stream **out) {
  if (!out) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_stream_create: out is NULL");
  *out = NULL;
  if (!h) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_stream_create: handle is NULL");
  gpu_hift_stream *st = cosy_calloc(1, sizeof *st);
  if (!st) return COSY_ERR_NO_MEMORY;
  st->mel_dim = h->mel, st->nh = h->nh, st->R = h->R;
  *out = st;
  return COSY_OK;
}

void gpu_hift_stream_free(gpu_hift *h, gpu_hift_stream *st) {
  (void)h;
  if (!st) return;
  free(st->mel), free(st->s);
  free(st);
}

static cosy_status sgrow(float **buf, int64_t *cap, int64_t frames, int per_frame) {
  if (frames <= *cap) return COSY_OK;
  int64_t nc = *cap * 2 > frames ? *cap * 2 : frames;
  if (nc < 64) nc = 64;
  float *p = realloc(*buf, (size_t)nc * per_frame * sizeof(float));
  if (!p) return COSY_ERR_NO_MEMORY;
  *buf = p, *cap = nc;
  return COSY_OK;
}

/* after a trim: give back most of a capacity well above what is kept (a large chunk's) */
static void sshrink(float **buf, int64_t *cap, int64_t frames, int per_frame) {
  const int64_t want = frames + 64;
  if (*cap <= 2 * want) return;
  float *p = realloc(*buf, (size_t)want * per_frame * sizeof(float));
  if (p) *buf = p, *cap = want;
}

/* A job's plan inside a batch: the window (lib/ref/hift.h), the decode geometry and the job's
 * slices of the gpu_hift's buffers. */
typedef struct sjob {
  gpu_hift_job *jb;
  int64_t T, Tf, N, a, b, lo;
  int W, fin, need_f0, need_dec, nnew;
  int Td, Tm, Tx, F, lens[N_STAGES]; /* decode over frames [a, T): ref_hift_decode's lengths */
  int ld[N_STAGES];                   /* the stage rows' pitch: lens rounded up (rnd_pitch) */
  float *mel, *s, *S, *post, *wav, *act[N_ACT];
  double *cum;
  size_t f0off;     /* the job's frames in f0_d and the fp64 F0 buffers (run_f0's off) */
  size_t stage_off; /* the job's new samples in the pinned stage */
  float *sn;        /* host: the new source samples */
  double cum_h[64];
  int *sat;         /* the job's F16 saturation flag: sat_d + its index in the batch */
} sjob;

static size_t rnd32(size_t n) { return (n + 31) & ~(size_t)31; }

/* plan one job (no side effects) */
static void job_plan(const gpu_hift *h, gpu_hift_job *jb, sjob *p) {
  const gpu_hift_stream *st = jb->st;
  const int64_t R = st->R;
  memset(p, 0, sizeof *p);
  p->jb = jb;
  p->T = st->T + jb->T_new;
  p->fin = jb->finalize != 0;
  p->Tf = p->fin ? p->T : (p->T > 3 ? p->T - 3 : 0);
  p->N = p->fin ? p->T * R : (p->T > 8 ? (p->T - 8) * R : 0);
  p->need_f0 = p->Tf > st->f0_done, p->need_dec = p->N > st->sent;
  p->a = st->sent / R - h->dec_ctx, p->b = st->f0_done - h->f0_ctx;
  p->a = p->a < 0 ? 0 : p->a, p->b = p->b < 0 ? 0 : p->b;
  p->lo = p->need_f0 && p->b < p->a ? p->b : p->a;
  p->W = p->need_f0 || p->need_dec ? (int)(p->T - p->lo) : 0;
  p->nnew = p->need_f0 ? (int)(p->Tf - st->f0_done) : 0;
  if (p->need_dec) {
    p->Td = (int)(p->T - p->a);
    p->Tm = p->fin ? p->Td : p->Td - 3;
    p->Tx = p->fin ? p->Td : p->Td - 3 - h->look_right;
    p->F = (h->R / h->hop) * p->Tx + 1;
    int len = p->Tx;
    for (int i = 0; i < N_STAGES; i++)
      len = len * h->up_rates[i] + (i == N_STAGES - 1), p->lens[i] = len;
    for (int i = 0; i < N_STAGES; i++) p->ld[i] = (int)rnd_pitch((size_t)p->lens[i]);
  }
}

/* the floats each buffer needs for a job; f0: the frames of its F0 predictor output (T - b, or
 * T - b - 3 when not final; the fp64 F0 buffers hold Cc floats per frame, f0_d one), packed
 * without rounding */
typedef struct sneed {
  size_t mel, s, S, wav, act, src[N_STAGES], f0;
} sneed;

static sneed job_need(const gpu_hift *h, const sjob *p) {
  sneed n;
  memset(&n, 0, sizeof n);
  if (!p->W) return n;
  n.mel = (size_t)h->mel * p->W;
  n.s = (size_t)(p->Tf - p->a) * h->R;
  n.f0 = p->need_f0 ? (size_t)(p->Tf - p->b) : 0; /* <= W: implied by the mel's fit */
  if (p->need_dec) {
    n.S = (size_t)2 * h->n_bins * p->F;
    n.wav = (size_t)h->R * p->Tx;
    size_t act = (size_t)h->C * p->Tx;
    int ch = h->C;
    for (int i = 0; i < N_STAGES; i++) {
      ch /= 2;
      const size_t q = (size_t)ch * p->ld[i];
      act = q > act ? q : act;
      n.src[i] = q;
    }
    n.act = act;
  }
  return n;
}

/* a slice of size n after the end `*end` of the previous one: starts at the next multiple of 32
 * floats (unless empty); returns its start */
static size_t slice(size_t *end, size_t n) {
  const size_t at = n ? rnd32(*end) : *end;
  *end = at + n;
  return at;
}

/* The jobs [0, n) fit the buffers together? (the sizes each buffer was allocated with) */
static int jobs_fit(const gpu_hift *h, const sjob *p, int n) {
  const size_t MF = (size_t)h->max_frames, F = (size_t)(h->R / h->hop) * MF + 1;
  sneed t;
  memset(&t, 0, sizeof t);
  for (int j = 0; j < n; j++) {
    sneed q = job_need(h, &p[j]);
    slice(&t.mel, q.mel), slice(&t.s, q.s), slice(&t.S, q.S), slice(&t.wav, q.wav);
    slice(&t.act, q.act);
    for (int i = 0; i < N_STAGES; i++) slice(&t.src[i], q.src[i]);
    t.f0 += q.f0;
  }
  int ok = t.mel <= (size_t)h->mel * MF && t.s <= MF * h->R && t.S <= (size_t)2 * h->n_bins * F &&
           t.wav <= MF * h->R && t.act <= h->cap_act && t.f0 <= MF && n <= STREAM_MAXJ;
  for (int i = 0; i < N_STAGES; i++) ok = ok && t.src[i] <= h->cap_src[i];
  return ok;
}

/* hand each job of the batch its slices */
static void jobs_place(gpu_hift *h, sjob *p, int n) {
  size_t e_mel = 0, e_s = 0, e_S = 0, e_wav = 0, e_act = 0, e_src[N_STAGES] = {0, 0, 0}, e_f0 = 0;
  for (int j = 0; j < n; j++) {
    sneed q = job_need(h, &p[j]);
    p[j].mel = h->mel_d + slice(&e_mel, q.mel), p[j].s = h->s_d + slice(&e_s, q.s);
    p[j].f0off = e_f0, e_f0 += q.f0;
    const size_t oS = slice(&e_S, q.S), ow = slice(&e_wav, q.wav), oa = slice(&e_act, q.act);
    p[j].S = h->S_d + oS, p[j].post = h->post_d + oS;
    p[j].wav = h->wav_d + ow, p[j].stage_off = ow;
    for (int k = 0; k < B_SRC0; k++) p[j].act[k] = h->act[k] + oa;
    for (int i = 0; i < N_STAGES; i++)
      p[j].act[B_SRC0 + i] = h->act[B_SRC0 + i] + slice(&e_src[i], q.src[i]);
    p[j].cum = h->cum_d + (size_t)j * h->nh;
    p[j].sat = h->sat_d + j;
  }
}

/* The decode of the jobs with need_dec, batched: every stage of run_decode with the jobs' convs
 * side by side (launches of up to 16 convs, the reduction never split so that a job's values do
 * not depend on the batch), per-job STFT / iSTFT launches. */
static cosy_status run_decode_batch(gpu_hift *h, sjob *P, int n, const volatile int *cancel) {
  cudaStream_t s = h->g->stream;
  const int R = h->R, SPLIT = h->stream_split;
  int nd = 0;
  for (int j = 0; j < n; j++) nd += P[j].need_dec;
  if (!nd) return COSY_OK;
  sjob **D = cosy_malloc((size_t)nd * sizeof *D);
  cosy_hift_conv *c = cosy_malloc((size_t)3 * nd * sizeof *c);
  rb_job *rj = cosy_malloc((size_t)3 * nd * sizeof *rj);
  cosy_status st = COSY_OK;
  if (!D || !c || !rj) {
    st = COSY_ERR_NO_MEMORY;
    goto done;
  }
  nd = 0;
  for (int j = 0; j < n; j++)
    if (P[j].need_dec) D[nd++] = &P[j];
  for (int j = 0; j < nd && !st; j++)
    st = ck(cosy_k_hift_stft(s, D[j]->s, (int64_t)D[j]->Tm * R, D[j]->F, D[j]->S, D[j]->F),
            "hift stream stft");
  if (st) goto done;
  /* side stream: the source branches of stages 1 and 2 */
  if ((st = ck(cudaEventRecord(h->ev_fork, s), "hift fork")) ||
      (st = ck(cudaStreamWaitEvent(h->side, h->ev_fork, 0), "hift fork")))
    goto done;
  for (int j = 0; j < nd; j++)
    for (int i = 1; i < N_STAGES; i++) {
      const int sd = h->down_stride[i];
      sjob *q = D[j];
      c[2 * j + i - 1] = conv_desc(&h->downs[i], q->S, q->F, q->F, 1, COSY_HACT_NONE, 0.f, NULL,
                                   1, sd, sd - 1, 0, q->act[B_SRC0 + i], q->ld[i], q->lens[i]);
      c[2 * j + i - 1].sat = q->sat;
    }
  if ((st = conv_many(h, h->side, c, 2 * nd, SPLIT, "hift stream source_downs"))) goto done;
  for (int j = 0; j < nd; j++)
    for (int i = 1; i < N_STAGES; i++) {
      rb_job *r = &rj[2 * j + i - 1];
      r->r = &h->srb[i], r->x = D[j]->act[B_SRC0 + i];
      r->tmp = D[j]->act[B_ST1 + i - 1], r->xa = D[j]->act[B_SX1 + i - 1];
      r->first_in = NULL, r->n = D[j]->lens[i], r->ld = D[j]->ld[i], r->sat = D[j]->sat;
    }
  if ((st = run_resblocks_ex(h, h->side, rj, 2 * nd, SPLIT, "hift stream source resblocks")))
    goto done;
  if ((st = ck(cudaEventRecord(h->ev_join, h->side), "hift join"))) goto done;
  /* main stream: source down 0 and conv_pre (mel columns [a, T) of the job's upload), source
   * resblock 0 */
  for (int j = 0; j < nd; j++) {
    sjob *q = D[j];
    c[2 * j] = conv_desc(&h->downs[0], q->S, q->F, q->F, 1, COSY_HACT_NONE, 0.f, NULL, 1,
                         h->down_stride[0], h->down_stride[0] - 1, 0, q->act[B_SRC0], q->ld[0],
                         q->lens[0]);
    c[2 * j + 1] = conv_desc(&h->conv_pre, q->mel + (q->a - q->lo), q->W, q->Tm, 1, COSY_HACT_NONE,
                             0.f, NULL, 1, 1, 0, 0, q->act[B_R0], q->Tx, q->Tx);
    c[2 * j].sat = c[2 * j + 1].sat = q->sat;
  }
  if ((st = conv_many(h, s, c, 2 * nd, SPLIT, "hift stream source_downs/conv_pre"))) goto done;
  for (int j = 0; j < nd; j++) {
    rb_job r = {&h->srb[0], D[j]->act[B_SRC0], D[j]->act[B_T0], D[j]->act[B_X0], NULL,
                D[j]->lens[0], D[j]->ld[0], D[j]->sat};
    rj[j] = r;
  }
  if ((st = run_resblocks_ex(h, s, rj, nd, SPLIT, "hift stream source resblock"))) goto done;
  for (int i = 0; i < N_STAGES; i++) {
    if (cancelled(cancel)) {
      st = cosy_err(COSY_ERR_CANCELLED, "gpu_hift_stream_run: cancelled");
      goto done;
    }
    if (i == 1 && (st = ck(cudaStreamWaitEvent(s, h->ev_join, 0), "hift join"))) goto done;
    const int r = h->up_rates[i], K = h->ups[i].k, last = i == N_STAGES - 1;
    for (int j = 0; j < nd; j++) {
      sjob *q = D[j];
      const int len = i == 0 ? q->Tx : q->lens[i - 1], lout = q->lens[i];
      const int ldi = i == 0 ? q->Tx : q->ld[i - 1], ldo = q->ld[i];
      if (i == 0) {
        c[j] = conv_desc(&h->ups[i], q->act[B_R0], ldi, len, r, COSY_HACT_LEAKY, h->lrelu, NULL, 1,
                         1, K - 1, last, q->act[B_Y], ldo, lout);
      } else {
        c[j] = conv_desc(&h->ups[i], q->act[B_R0], ldi, len, r, COSY_HACT_MEAN3_LEAKY, h->lrelu,
                         NULL, 1, 1, K - 1, last, q->act[B_Y], ldo, lout);
        c[j].in2 = q->act[B_R1], c[j].in3 = q->act[B_R2];
      }
      c[j].res = q->act[B_SRC0 + i], c[j].ld_res = ldo, c[j].sat = q->sat;
    }
    if ((st = conv_many(h, s, c, nd, SPLIT, "hift stream ups"))) goto done;
    /* grouped by resblock, so that a launch holds convs of one kernel size (its shared memory
     * is its largest conv's) */
    for (int j = 0; j < nd; j++)
      for (int qq = 0; qq < 3; qq++) {
        rb_job *rb = &rj[qq * nd + j];
        rb->r = &h->rb[3 * i + qq], rb->x = D[j]->act[B_R0 + qq], rb->tmp = D[j]->act[B_T0 + qq];
        rb->xa = D[j]->act[B_X0 + qq], rb->first_in = D[j]->act[B_Y], rb->n = D[j]->lens[i];
        rb->ld = D[j]->ld[i];
        rb->sat = D[j]->sat;
      }
    if ((st = run_resblocks_ex(h, s, rj, 3 * nd, SPLIT, "hift stream resblocks"))) goto done;
  }
  if (cancelled(cancel)) {
    st = cosy_err(COSY_ERR_CANCELLED, "gpu_hift_stream_run: cancelled");
    goto done;
  }
  for (int j = 0; j < nd; j++) {
    sjob *q = D[j];
    const int len = q->lens[N_STAGES - 1];
    c[j] = conv_desc(&h->conv_post, q->act[B_R0], q->ld[N_STAGES - 1], len, 1, COSY_HACT_MEAN3_LEAKY, 0.01f, NULL,
                     1, 1, h->conv_post.k - 1, 0, q->post, q->F, q->F);
    c[j].in2 = q->act[B_R1], c[j].in3 = q->act[B_R2], c[j].sat = q->sat;
  }
  if ((st = conv_many(h, s, c, nd, SPLIT, "hift stream conv_post"))) goto done;
  for (int j = 0; j < nd && !st; j++) {
    sjob *q = D[j];
    const int64_t ny = (int64_t)R * q->Tx, nout = q->fin ? ny : ny - R;
    if (q->a * R + nout != q->N) {
      st = cosy_err(COSY_ERR_INTERNAL, "gpu_hift_stream_run: window output %lld != %lld",
                    (long long)(q->a * R + nout), (long long)q->N);
      break;
    }
    st = ck(cosy_k_hift_istft(s, q->post, q->F, q->F, nout, h->audio_limit, 0, q->wav),
            "hift stream istft");
  }
done:
  free(D), free(c), free(rj);
  return st;
}

/* Guarded F16, after run_batch's synchronization (sat_h holds the batch's flags): the jobs whose
 * fp16 decode saturated run run_decode_batch again, alone together, in TF32, from the same
 * inputs (their mel and source slices, which the decode does not write), and their new samples
 * are downloaded over the fp16 ones in the pinned stage. A job's TF32 samples do not depend on
 * the other jobs of that launch (the convs never split: run_decode_batch), nor its fp16 ones on
 * its batch, so each job gets its own result in one precision whatever its batch holds. */
static cosy_status f16_fallback(gpu_hift *h, sjob *P, int n, const volatile int *cancel) {
  int nf = 0;
  for (int j = 0; j < n; j++) {
    h->f16_jobs += P[j].need_dec;
    nf += P[j].need_dec && h->sat_h[j];
  }
  if (!nf) return COSY_OK;
  sjob *Q = cosy_malloc((size_t)nf * sizeof *Q);
  if (!Q) return COSY_ERR_NO_MEMORY;
  nf = 0;
  for (int j = 0; j < n; j++)
    if (P[j].need_dec && h->sat_h[j]) Q[nf++] = P[j];
  h->prec = COSY_HPREC_TF32;
  cosy_status st = run_decode_batch(h, Q, nf, cancel);
  h->prec = COSY_HPREC_F16;
  for (int j = 0; j < nf && !st; j++) {
    const sjob *q = &Q[j];
    const int64_t sent = q->jb->st->sent;
    st = ck(cudaMemcpyAsync(h->stage_h + q->stage_off, q->wav + (sent - q->a * h->R),
                            (size_t)(q->N - sent) * sizeof(float), cudaMemcpyDeviceToHost,
                            h->g->stream),
            "hift stream download (TF32 fallback)");
  }
  if (!st) st = cosy_gpu_sync(h->g, "gpu_hift_stream_run (TF32 fallback)");
  if (!st) h->f16_fallbacks += nf;
  free(Q);
  return st;
}

/* One batch of jobs [0, n) that fit the buffers together (jobs_fit). On success every job is
 * committed; on an error none is (their mel excepted, once appended). */
static cosy_status run_batch(gpu_hift *h, sjob *P, int n, const volatile int *cancel) {
  cudaStream_t cs = h->g->stream;
  const int M = h->mel, R = h->R, nh = h->nh;
  cosy_status st = COSY_OK;
  float *hm = NULL;
  size_t tot_mel = 0;
  /* 1. keep the new frames (host) */
  for (int j = 0; j < n; j++) {
    gpu_hift_stream *S = P[j].jb->st;
    if ((st = sgrow(&S->mel, &S->mel_cap, P[j].T - S->mel_lo, M))) return st;
    if (P[j].jb->T_new > 0)
      memcpy(S->mel + (size_t)(S->T - S->mel_lo) * M, P[j].jb->mel_new,
             (size_t)P[j].jb->T_new * M * sizeof(float));
    S->T = P[j].T;
  }
  if (cancelled(cancel)) return cosy_err(COSY_ERR_CANCELLED, "gpu_hift_stream_run: cancelled");
  jobs_place(h, P, n);
  /* 2. uploads: the mel windows [lo, T) channels-first in one copy (the slices are consecutive),
   * the kept source [a, f0_done), the phase sums */
  for (int j = 0; j < n; j++) {
    const size_t end = (size_t)(P[j].mel - h->mel_d) + (size_t)M * P[j].W;
    tot_mel = end > tot_mel ? end : tot_mel;
  }
  if (tot_mel) {
    if (!(hm = cosy_malloc(tot_mel * sizeof(float)))) return COSY_ERR_NO_MEMORY;
    for (int j = 0; j < n; j++) {
      const gpu_hift_stream *S = P[j].jb->st;
      float *dst = hm + (P[j].mel - h->mel_d);
      const int W = P[j].W;
      for (int t = 0; t < W; t++)
        for (int c = 0; c < M; c++)
          dst[(size_t)c * W + t] = S->mel[(size_t)(P[j].lo - S->mel_lo + t) * M + c];
    }
    st = ck(cudaMemcpyAsync(h->mel_d, hm, tot_mel * sizeof(float), cudaMemcpyHostToDevice, cs),
            "hift stream mel upload");
  }
  for (int j = 0; j < n && !st; j++) {
    const gpu_hift_stream *S = P[j].jb->st;
    if (P[j].W && S->f0_done > P[j].a)
      st = ck(cudaMemcpyAsync(P[j].s, S->s + (size_t)(P[j].a - S->s_lo) * R,
                              (size_t)(S->f0_done - P[j].a) * R * sizeof(float),
                              cudaMemcpyHostToDevice, cs),
              "hift stream source upload");
    if (!st && P[j].need_f0)
      st = ck(cudaMemcpyAsync(P[j].cum, S->cum, (size_t)nh * sizeof(double),
                              cudaMemcpyHostToDevice, cs),
              "hift stream phase upload");
  }
  /* 3. the F0 predictors of the jobs with need_f0 together (one launch per layer): job j over
   * mel [b, T) (exact from frame b + 8, or 0, on) -> f0 frames [b, Tf) at f0_d + f0off; then per
   * job the source of the frames [f0_done, Tf) from its f0 slice, continuing the phase sums ->
   * the job's source slice at frame f0_done - a */
  if (!st) {
    f0_job *fj = cosy_malloc((size_t)n * sizeof *fj);
    int nf = 0;
    if (!fj) st = COSY_ERR_NO_MEMORY;
    for (int j = 0; j < n && !st; j++) {
      const sjob *q = &P[j];
      if (!q->need_f0) continue;
      const f0_job jb = {q->mel + (q->b - q->lo), q->W, (int)(q->T - q->b), q->fin, q->f0off};
      fj[nf++] = jb;
    }
    if (!st) st = run_f0(h, fj, nf);
    free(fj);
  }
  for (int j = 0; j < n && !st; j++) {
    sjob *q = &P[j];
    if (!q->need_f0) continue;
    const int64_t k0 = q->jb->st->f0_done;
    const float *f0 = h->f0_d + q->f0off + (k0 - q->b);
    st = ck(cosy_k_hift_sine_at(cs, f0, q->nnew, h->nb, R, h->sr, h->sine_amp, NULL, k0, q->cum,
                                q->cum, h->sine_d),
            "hift stream sine");
    if (!st)
      st = ck(cosy_k_hift_source_at(cs, f0, h->sine_d, h->nb, R, k0 * R, (int64_t)q->nnew * R, k0,
                                    NULL, h->lin_w, h->lin_b, h->voiced_thr, h->noise_std,
                                    h->sine_amp / 3.0f, q->s + (size_t)(k0 - q->a) * R),
              "hift stream source");
  }
  if (!st && cancelled(cancel)) st = cosy_err(COSY_ERR_CANCELLED, "gpu_hift_stream_run: cancelled");
  /* 4. the decodes, batched (guarded F16: the jobs' saturation flags cleared first) */
  const int guard = f16_guarded(h);
  if (!st && guard) st = sat_clear(h, n);
  if (!st) st = run_decode_batch(h, P, n, cancel);
  /* 5. downloads: the new samples into the pinned stage (async), the new source and the phase
   * sums into pageable memory (these copies return when done: the stream has run everything) */
  for (int j = 0; j < n && !st; j++) {
    sjob *q = &P[j];
    const gpu_hift_stream *S = q->jb->st;
    if (q->need_dec) {
      const int64_t nw = q->N - S->sent;
      st = ck(cudaMemcpyAsync(h->stage_h + q->stage_off, q->wav + (S->sent - q->a * R),
                              (size_t)nw * sizeof(float), cudaMemcpyDeviceToHost, cs),
              "hift stream download");
    }
  }
  for (int j = 0; j < n && !st; j++) {
    sjob *q = &P[j];
    if (!q->need_f0) continue;
    const int64_t k0 = q->jb->st->f0_done;
    if (!(q->sn = cosy_malloc((size_t)q->nnew * R * sizeof(float)))) {
      st = COSY_ERR_NO_MEMORY;
      break;
    }
    st = ck(cudaMemcpyAsync(q->sn, q->s + (size_t)(k0 - q->a) * R, (size_t)q->nnew * R * sizeof(float),
                            cudaMemcpyDeviceToHost, cs),
            "hift stream source download");
    if (!st)
      st = ck(cudaMemcpyAsync(q->cum_h, q->cum, (size_t)nh * sizeof(double),
                              cudaMemcpyDeviceToHost, cs),
              "hift stream phase download");
  }
  if (!st && guard) st = sat_download(h, n);
  if (!st) st = cosy_gpu_sync(h->g, "gpu_hift_stream_run");
  /* 5b. guarded F16: the flagged jobs' decodes again in TF32, their samples over the fp16 ones */
  if (!st && guard) st = f16_fallback(h, P, n, cancel);
  /* 6. host buffers for every job before anything is committed */
  for (int j = 0; j < n && !st; j++) {
    sjob *q = &P[j];
    gpu_hift_stream *S = q->jb->st;
    const int64_t nw = q->need_dec ? q->N - S->sent : 0;
    float *w = cosy_malloc((size_t)(nw > 0 ? nw : 1) * sizeof(float));
    if (!w || (q->need_f0 && sgrow(&S->s, &S->s_cap, q->Tf - S->s_lo, R))) {
      free(w);
      st = COSY_ERR_NO_MEMORY;
      break;
    }
    if (nw > 0) memcpy(w, h->stage_h + q->stage_off, (size_t)nw * sizeof(float));
    q->jb->wav = w, q->jb->n = nw;
  }
  free(hm);
  if (st) {
    for (int j = 0; j < n; j++) {
      free(P[j].jb->wav), free(P[j].sn);
      P[j].jb->wav = NULL, P[j].jb->n = 0, P[j].sn = NULL;
    }
    return drain(h, st);
  }
  /* 7. commit */
  for (int j = 0; j < n; j++) {
    sjob *q = &P[j];
    gpu_hift_stream *S = q->jb->st;
    if (q->need_f0) {
      memcpy(S->s + (size_t)(S->f0_done - S->s_lo) * R, q->sn, (size_t)q->nnew * R * sizeof(float));
      memcpy(S->cum, q->cum_h, (size_t)nh * sizeof(double));
      S->f0_done = q->Tf;
    }
    free(q->sn);
    q->sn = NULL;
    S->sent += q->jb->n;
    if (q->fin) S->finished = 1;
    /* drop the history no later call reads (as the CPU stream) */
    int64_t a2 = S->sent / R - h->dec_ctx, b2 = S->f0_done - h->f0_ctx;
    a2 = a2 < 0 ? 0 : a2, b2 = b2 < 0 ? 0 : b2;
    const int64_t mlo = a2 < b2 ? a2 : b2;
    if (mlo > S->mel_lo) {
      memmove(S->mel, S->mel + (size_t)(mlo - S->mel_lo) * M,
              (size_t)(S->T - mlo) * M * sizeof(float));
      S->mel_lo = mlo;
    }
    if (a2 > S->s_lo) {
      memmove(S->s, S->s + (size_t)(a2 - S->s_lo) * R,
              (size_t)(S->f0_done - a2) * R * sizeof(float));
      S->s_lo = a2;
    }
    sshrink(&S->mel, &S->mel_cap, S->T - S->mel_lo, M);
    sshrink(&S->s, &S->s_cap, S->f0_done - S->s_lo, R);
  }
  return COSY_OK;
}

cosy_status gpu_hift_stream_run(gpu_hift *h, gpu_hift_job *jobs, int n, const volatile int *cancel) {
  if (!h || (!jobs && n > 0) || n < 0)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_stream_run: %s",
                    !h ? "NULL handle" : "bad job list");
  for (int i = 0; i < n; i++) jobs[i].wav = NULL, jobs[i].n = 0;
  sjob *P = n > 0 ? cosy_calloc((size_t)n, sizeof *P) : NULL;
  if (n > 0 && !P) return COSY_ERR_NO_MEMORY;
  cosy_status st = COSY_OK;
  for (int i = 0; i < n && !st; i++) {
    gpu_hift_job *jb = &jobs[i];
    const char *why = NULL;
    if (!jb->st) why = "NULL stream";
    else if (jb->T_new < 0 || (jb->T_new > 0 && !jb->mel_new)) why = "bad mel";
    else if (jb->st->finished) why = "the stream was finalized";
    else if (jb->st->mel_dim != h->mel || jb->st->nh != h->nh || jb->st->R != h->R)
      why = "stream of another model";
    else if (jb->st->T + jb->T_new > HIFT_MAX_FRAMES) why = "too many frames";
    for (int j = 0; j < i && !why; j++)
      if (jobs[j].st == jb->st) why = "the same stream twice";
    if (!why) {
      job_plan(h, jb, &P[i]);
      if (!jobs_fit(h, &P[i], 1))
        why = "the window (T_new + the left context) exceeds max_frames";
    }
    if (why) {
      st = cosy_err(COSY_ERR_INVALID_ARG, "gpu_hift_stream_run: job %d: %s", i, why);
      if (P[i].jb && !jobs_fit(h, &P[i], 1))
        cosy_err(COSY_ERR_INVALID_ARG,
                 "gpu_hift_stream_run: job %d: its window of %d frames (T_new %d + the left "
                 "context) exceeds max_frames %d",
                 i, P[i].W, jb->T_new, h->max_frames);
    }
  }
  /* batches of consecutive jobs that fit the buffers together */
  for (int i = 0; i < n && !st;) {
    int m = 1;
    while (i + m < n && jobs_fit(h, P + i, m + 1)) m++;
    st = run_batch(h, P + i, m, cancel);
    i += m;
  }
  free(P);
  return st;
}
