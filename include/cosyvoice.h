/*
 * cosyvoice.h - libcosyvoice public API (the only public header)
 *
 * libcosyvoice synthesizes speech with the Fun-CosyVoice3-0.5B model (a Qwen2-0.5B speech-token
 * LLM, a DiT flow-matching decoder and a HiFT vocoder) from plain C: one shared library, this
 * header, no Python at run time. It runs on an NVIDIA GPU (hand-written CUDA kernels and cuBLAS)
 * or on the CPU.
 *
 * ---------------------------------------------------------------------------------------------
 * USAGE STORY
 *
 *     cosy_engine_config cfg;
 *     cosy_engine_config_init(&cfg, sizeof cfg);       // every field 0 = default
 *     cfg.model_path = "cosyvoice3.gguf";
 *     cfg.device = COSY_DEVICE_CPU;                      // or a CUDA ordinal (0, 1, ...)
 *     cosy_engine *eng;
 *     if (cosy_engine_create(&cfg, &eng) != COSY_OK) { puts(cosy_last_error()); return 1; }
 *
 *     cosy_voice *voice;                                 // a speaker: prompt text, tokens, mel, embedding
 *     cosy_voice_load(eng, "speaker.cosyvoice", &voice);
 *
 *     cosy_synth_params sp;
 *     cosy_synth_params_init(&sp, sizeof sp);
 *     sp.seed = 42;
 *     float *pcm; int64_t n;
 *     cosy_synthesize(eng, voice, "Hello there.", &sp, &pcm, &n);   // blocking: whole utterance
 *     ... use n float samples at cosy_engine_sample_rate(eng) (or sp.sample_rate) ...
 *     cosy_free(pcm);
 *
 *     cosy_request *req;                                 // streaming, pull style (good for FFI)
 *     cosy_request_submit(eng, voice, "Hello again.", &sp, NULL, NULL, &req);
 *     float buf[4800]; int64_t got;
 *     while (cosy_request_read(req, buf, 4800, &got, -1) == COSY_OK && got > 0) play(buf, got);
 *     cosy_request_release(req);
 *
 *     cosy_voice_release(voice);
 *     cosy_engine_destroy(eng);
 *
 * ---------------------------------------------------------------------------------------------
 * OWNERSHIP
 *   - Handles (cosy_engine, cosy_voice, cosy_request) are opaque. Whoever receives one through an
 *     out-pointer owns it and must give it back with its destroy/release function.
 *   - A voice is immutable and reference counted internally: it may be shared by many requests and
 *     released while they run (they keep it alive). A voice must be released before its engine is
 *     destroyed.
 *   - Strings and arrays passed in are copied before the call returns; the caller keeps ownership.
 *   - Memory the library returns (cosy_synthesize's PCM) is freed with cosy_free().
 *   - Strings the library returns (cosy_status_str, cosy_version_string, cosy_last_error) are owned
 *     by the library: never free them.
 *
 * THREADS
 *   - A cosy_engine is thread-safe: any number of threads may submit, synthesize and query at once.
 *   - A cosy_request is used by one thread at a time, except cosy_request_cancel(), which any thread
 *     may call at any time, and text streaming: one thread may push text (cosy_request_push_text,
 *     cosy_request_end_text) while another reads or waits.
 *   - Push callbacks (cosy_chunk_fn) run on an engine thread, never on the caller's thread, between
 *     engine steps: copy the samples and return quickly; do not call back into the engine from the
 *     callback (except cosy_request_cancel). The chunk's memory is valid only during the call. One
 *     request's calls come in order and never two at once, but not always from the same thread
 *     (on a GPU a chunk is delivered by whichever scheduler thread vocoded it).
 *   - The log callback may be called from any engine thread; it must be thread-safe.
 *   - cosy_last_error() is thread-local: it describes the last failing call made on this thread.
 *
 * CANCELLATION
 *   cosy_request_cancel() is honoured at the next engine step (one LLM token, one flow call, or one
 *   vocoder call). A cancelled request ends with COSY_ERR_CANCELLED. A push callback returning
 *   non-zero cancels its request. Destroying an engine cancels every request and joins its threads.
 *
 * ERRORS
 *   Every call that can fail returns a cosy_status. The values are pinned forever. The library never
 *   aborts or exits the process: CUDA faults surface as COSY_ERR_CUDA or COSY_ERR_DEVICE_LOST with
 *   the CUDA message in cosy_last_error().
 *   GPU failures: a failed CUDA or cuBLAS call that is not sticky (COSY_ERR_CUDA, or
 *   COSY_ERR_GPU_NO_MEMORY for device memory) ends the requests of the batched engine step it
 *   belonged to with that status and the CUDA message; the engine keeps serving the others and
 *   later requests. A sticky error (COSY_ERR_DEVICE_LOST: illegal address, launch failure, ECC,
 *   ...) makes the engine lost: every request not finished ends with COSY_ERR_DEVICE_LOST, and
 *   every later call on the engine (submit, synthesize, voice load/creation, get_stats, which
 *   still fills its struct) returns it; only cosy_engine_destroy (clean) remains useful. No
 *   request is left waiting in either case.
 *
 * ABI RULES
 *   - Every public struct starts with `uint32_t struct_size`, set by *_init(ptr, sizeof *ptr).
 *     Structs only ever grow at the end. The library copies min(caller size, its own size) bytes and
 *     treats the rest as zero; if a caller's struct is larger than the library's and any byte of
 *     the unknown tail is non-zero, the call fails with COSY_ERR_STRUCT_SIZE (the caller asked for
 *     a feature this library does not have). struct_size smaller than the first version of the
 *     struct is COSY_ERR_STRUCT_SIZE.
 *   - In every struct, 0 in a field means "default".
 *   - No struct is passed by value; only fixed-width integer types, float, double and pointers
 *     appear in public structs.
 *   - Symbols are exported through a version script; the soname is libcosyvoice.so.MAJOR.
 *   - The model file has its own format version, checked at load (COSY_ERR_MODEL_VERSION).
 *
 * FEATURES THAT ARE NOT IMPLEMENTED YET return COSY_ERR_UNSUPPORTED; docs/status.md lists them.
 */
#ifndef COSYVOICE_H
#define COSYVOICE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#  define COSY_API
#elif defined(__GNUC__) && __GNUC__ >= 4
#  define COSY_API __attribute__((visibility("default")))
#else
#  define COSY_API
#endif

/* ============================== version ==================================================== */

#define COSY_VERSION_MAJOR 0
#define COSY_VERSION_MINOR 1
#define COSY_VERSION_PATCH 0
/** MAJOR*10000 + MINOR*100 + PATCH */
#define COSY_VERSION_NUMBER (COSY_VERSION_MAJOR * 10000 + COSY_VERSION_MINOR * 100 + COSY_VERSION_PATCH)

/** Runtime version number of the loaded library (compare with COSY_VERSION_NUMBER). */
COSY_API uint32_t cosy_version_number(void);
/** "0.1.0 (cuda 13.0, sm_80 sm_86 sm_89 sm_90 sm_100 sm_120 compute_90)": the toolkit and the
 * GPU targets the kernels were built for (README: Build and install), or "0.1.0 (cpu only)".
 * Static; never NULL. */
COSY_API const char *cosy_version_string(void);

/* ============================== status codes =============================================== */

/** Status code; the values below never change. */
typedef int32_t cosy_status;
#define COSY_OK                  0
#define COSY_ERR_INVALID_ARG     1  /**< NULL where a value is needed, out-of-range knob, bad mode */
#define COSY_ERR_STRUCT_SIZE     2  /**< struct_size too small, or unknown non-zero trailing bytes */
#define COSY_ERR_NO_MEMORY       3  /**< host allocation failed */
#define COSY_ERR_GPU_NO_MEMORY   4  /**< device memory (or the gpu_memory_fraction budget) exhausted */
#define COSY_ERR_CUDA            5  /**< a CUDA / cuBLAS call failed; detail in cosy_last_error() */
#define COSY_ERR_DEVICE_LOST     6  /**< sticky CUDA error: the engine must be destroyed */
#define COSY_ERR_IO              7  /**< file could not be opened, read or written */
#define COSY_ERR_MODEL_FORMAT    8  /**< model or voice file corrupt, truncated or incomplete */
#define COSY_ERR_MODEL_VERSION   9  /**< model or voice file of an unsupported version */
#define COSY_ERR_UNSUPPORTED    10  /**< feature not implemented (yet) in this build */
#define COSY_ERR_CANCELLED      11  /**< request was cancelled */
#define COSY_ERR_TIMEOUT        12  /**< wait/read timed out; the request continues */
#define COSY_ERR_QUEUE_FULL     13  /**< too many queued requests (max_queued) */
#define COSY_ERR_TEXT           14  /**< invalid UTF-8, or nothing to say after normalization */
#define COSY_ERR_INTERNAL       99  /**< a bug: please report it with cosy_last_error() */

/** Static English text for a status code; never NULL (unknown codes give "unknown status"). */
COSY_API const char *cosy_status_str(cosy_status s);
/** Thread-local detail of this thread's last failed call ("" if none). Valid until this thread's
 *  next failing call. Never NULL. */
COSY_API const char *cosy_last_error(void);

/* ============================== limits ===================================================== */

/* Every input is bounded so that no call, and no request, can hold a core or the engine for
 * long; each limit is checked before the work it bounds, and a value beyond it fails with the
 * status below and a message that names the parameter, the limit and the numbers.
 *
 * COSY_TEXT_MAX_BYTES: the most bytes of one text: the text of cosy_synthesize and
 *   cosy_request_submit, a streamed text in all (every cosy_request_push_text of a request
 *   together), instruct_text, a voice's prompt text (cosy_voice_features.prompt_text, the
 *   transcript of cosy_voice_from_audio, the prompt text in a voice file). Beyond it:
 *   COSY_ERR_TEXT (COSY_ERR_MODEL_FORMAT in a voice file), before the text is read any further.
 *   It bounds the text front end's work on the caller's thread: normalization, splitting and
 *   tokenization are linear in the text, at most about 6 s of one core for 64 KiB of digits
 *   (the slowest input measured; ordinary prose about 1 s), 0.02 s for 64 KiB of combining
 *   marks. A whole text of that size is hours of speech; a longer one is split by the caller.
 * COSY_LLM_MAX_TEXT_TOKENS: the most text tokens one LLM call takes from each of its two texts:
 *   the prompt (a voice's prompt text with the system prefix, or instruct_text) and the segment
 *   (one segment of a split text, the whole text with COSY_SYNTH_NO_TEXT_NORMALIZATION, or a
 *   streamed text). A voice whose prompt text is longer is refused at creation (COSY_ERR_TEXT;
 *   COSY_ERR_MODEL_FORMAT when loaded from a file); a request whose instruct_text or any of whose
 *   segments is longer is refused by cosy_synthesize / cosy_request_submit with COSY_ERR_TEXT,
 *   every segment checked before the first one's LLM starts (the official front end has no
 *   such limit: a long text without sentence punctuation makes a long segment there, refused
 *   here; add punctuation or line breaks, or split the text). A streamed text takes at most
 *   min(max_tokens / 2, COSY_LLM_MAX_TEXT_TOKENS) text tokens.
 * COSY_LLM_MAX_SPEECH_TOKENS: the most speech tokens one LLM call generates: max_tokens'
 *   upper bound, and the cap of its default (20 per text token of the segment).
 * With the voice's at most 3000 prompt speech tokens, one LLM call therefore prefills at most
 * 2 + 2 x COSY_LLM_MAX_TEXT_TOKENS + 3000 = 7098 positions and decodes at most
 * COSY_LLM_MAX_SPEECH_TOKENS steps over at most 22098 positions: its worst case, on the
 * full-size model, is about 0.3 s of prefill and 15 s of decoding alone on an H100 (prefill 20 ms
 * per 2048 positions, growing with their square; a decode step about 1 ms; bench/RESULTS.md), and
 * on the CPU reference path minutes (it is the reference, not a fast path). The default
 * max_tokens of an ordinary segment (60-80 text tokens) is 1200-1600. */
#define COSY_TEXT_MAX_BYTES 65536
#define COSY_LLM_MAX_TEXT_TOKENS 2048
#define COSY_LLM_MAX_SPEECH_TOKENS 15000

/* ============================== engine ===================================================== */

typedef struct cosy_engine cosy_engine;   /**< weights, device, scheduler; thread-safe */
typedef struct cosy_voice cosy_voice;     /**< a speaker; immutable, shareable */
typedef struct cosy_request cosy_request; /**< one utterance in flight */

#define COSY_DEVICE_CPU (-1)

#define COSY_LOG_ERROR 0
#define COSY_LOG_WARN  1
#define COSY_LOG_INFO  2
#define COSY_LOG_DEBUG 3
/** Log sink; may be called from any engine thread; msg has no trailing newline. */
typedef void (*cosy_log_fn)(void *user, int32_t level, const char *msg);

/** Engine configuration. Append-only; 0 in any field means the default. */
typedef struct cosy_engine_config {
  uint32_t struct_size;        /**< sizeof(cosy_engine_config), set by cosy_engine_config_init */
  uint32_t flags;              /**< COSY_ENGINE_* bits (below); other bits must be 0 */
  const char *model_path;      /**< path of the .gguf model file (required) */
  int32_t device;              /**< CUDA ordinal (0 = first GPU), or COSY_DEVICE_CPU (-1) */
  float gpu_memory_fraction;   /**< share of the device's memory the engine may take, (0, 1]; 0 = 0.9 */
  int32_t max_active;          /**< requests in flight at once (admitted; their LLM steps are
                                    batched together); 0 = auto (GPU 256, CPU 8); at most 4096,
                                    and at most 1024 on the GPU (more than 256 where the GPU
                                    serves them in real time: requests beyond max_active wait
                                    in the queue instead of slowing every active request; each
                                    active request may hold up to 1024 LLM KV positions of the
                                    memory plan, docs/gpus.md "GPU memory") */
  int32_t max_queued;          /**< waiting requests before COSY_ERR_QUEUE_FULL; 0 = 1024; at
                                    most 1048576. Requests that a free active slot will take
                                    at once are not waiting: a submit is refused only when the
                                    not yet admitted requests exceed the free slots by
                                    max_queued */
  int32_t cpu_threads;         /**< CPU path threads per request when the library is built with
                                    OpenMP (make OPENMP=1); 0 = all cores; at most 1024 */
  int32_t log_level;           /**< highest level passed to log_fn; see below */
  cosy_log_fn log_fn;          /**< NULL = no logging */
  void *log_user;              /**< passed to log_fn */
  int32_t first_chunk_wait_max; /**< time to first audio at light load: while 1 to this many
                                    requests are active (beyond 8 only while a burst of requests
                                    awaits first audio), the LLM pauses while a first chunk's
                                    flow runs, so the two do not share the device (unless the
                                    pause could make another request's audio run out); and a
                                    request admitted while at most this many are active or
                                    queued (it included) with first_chunk_tokens 0 gets a first
                                    chunk shorter than a block (cosy_synth_params); 0 = default
                                    (GPU 64, CPU none), negative = neither */
  int32_t vocoder_precision;   /**< arithmetic of the GPU vocoder's convolutions: 0 = default
                                    (COSY_VOCODER_FP16), COSY_VOCODER_ACCURATE,
                                    COSY_VOCODER_TF32 or COSY_VOCODER_FP16; the CPU path is fp32
                                    either way */
} cosy_engine_config;
/* vocoder_precision (GPU):
 *   COSY_VOCODER_TF32      one TF32 product per multiply (10-bit mantissa operands, fp32 sums):
 *                          what the official PyTorch code computes for the vocoder's Conv1d
 *                          layers on a GPU (cuDNN convolutions run in TF32 by default); ~1.35x
 *                          faster convolutions than COSY_VOCODER_ACCURATE (+6-8% aggregate
 *                          throughput with 64 users on an H100, and the margin that keeps the
 *                          second chunks in time under short first chunks: bench/RESULTS.md);
 *                          waveform ~1.5e-2 (relative L2) from the fp32 reference with the random
 *                          test weights, within the golden tolerance. The GPU default before
 *                          COSY_VOCODER_FP16; the choice for audio bit for bit as before.
 *   COSY_VOCODER_ACCURATE  fp32-level products (3xTF32 on the tensor cores): the waveform stays
 *                          within ~1e-3 of the fp32 reference (the CPU path's arithmetic).
 *   COSY_VOCODER_FP16      the default: fp16 operands with fp32 sums (mma m16n8k16): the same 11
 *                          significant bits per operand as TF32, so the same error size (golden
 *                          decode 1.492e-2 against TF32's 1.549e-2; tolerance 2e-2), at twice the
 *                          tensor rate (W2 +3.5%, W3 at 352 users p95 179 against ~197 ms on an
 *                          H200: bench/RESULTS.md); each conv's weights are scaled
 *                          per output channel by an exact power of two (small weights stay
 *                          exact to fp16's precision); the Snake activations, whose values
 *                          are rounded to fp16 before any product uses them, take the sine from
 *                          the special-function unit (error ~1e-7, far below that rounding).
 *                          fp16 holds activations up to 65504: a
 *                          vocoder job in which any activation goes beyond it (detected on the
 *                          device, per job) is decoded again with COSY_VOCODER_TF32 before its
 *                          audio is delivered, so a chunk's audio is its fp16 or its TF32
 *                          decode, never clamped, and independent of the other requests of its
 *                          batch; the engine logs each such call (COSY_LOG_DEBUG) and the
 *                          count at destroy (COSY_LOG_INFO: "vocoder fp16: N TF32 fallbacks in
 *                          M jobs"); a model whose vocoder saturates often is faster with
 *                          COSY_VOCODER_TF32 (none of 1092 jobs of a W2 run saturated with the
 *                          random full-size weights). Not bit-identical to TF32. Holds an fp16
 *                          copy of the conv weights (~42 MB for the full model) beside the fp32
 *                          ones the fallback reads. Speed
 *                          against COSY_VOCODER_TF32: `test_kernels --bench hift`
 *                          (kernels/conv.cu). */
#define COSY_VOCODER_ACCURATE 1
#define COSY_VOCODER_TF32 2
#define COSY_VOCODER_FP16 3
/* flags:
 *   COSY_ENGINE_BATCH_INVARIANT  require what the GPU engine does by default where it can: a
 *                          request's speech tokens for a given seed do not depend on which other
 *                          requests share its LLM batches (every decode step runs one
 *                          tensor-core kernel family whose per-row arithmetic is fixed by the
 *                          matrix shapes, the prefill one GEMM algorithm per shape; tested bit for
 *                          bit, alone vs among others). Without the flag a GPU or model that
 *                          cannot run those kernels (compute capability below 8.0, matrix shapes
 *                          they do not support) falls back to an LLM path whose rounding depends
 *                          on the batch size (the engine's INFO log names the path); with it,
 *                          engine creation fails with COSY_ERR_UNSUPPORTED instead. The flow
 *                          and vocoder are not covered: their GEMMs choose an algorithm by row
 *                          bucket (measured on the full-size model: each of 32 requests of one
 *                          batch gave its audio alone, sample for sample; see docs/gpus.md "Batch
 *                          invariance on the GPU"). The CPU path is batch-invariant with or
 *                          without the flag. */
#define COSY_ENGINE_BATCH_INVARIANT 1u
/* log_level: 0 means the default (COSY_LOG_WARN); pass COSY_LOG_INFO or COSY_LOG_DEBUG for more,
 * and a negative value for errors only.
 * Limits: cosy_engine_create checks every field before it reads the model or touches a device and
 * returns COSY_ERR_INVALID_ARG, with a message naming the field, for a value outside its stated
 * range (device -1..1023, gpu_memory_fraction (0, 1], max_active 0..4096 and at most 1024 with
 * device >= 0, max_queued 0..1048576, cpu_threads 0..1024, log_level at most COSY_LOG_DEBUG,
 * vocoder_precision 0..COSY_VOCODER_FP16, flags only COSY_ENGINE_* bits, reserved fields 0);
 * nothing is clamped. A GPU engine that cannot fit the weights,
 * the workspaces for max_active requests and the smallest LLM KV cache into its budget, the
 * smaller of gpu_memory_fraction of the device and the device memory free at creation, fails
 * with COSY_ERR_GPU_NO_MEMORY; the message says which of the two budgets failed, what each holds,
 * and which fraction would do when the fraction failed. */

/** Fill *c with defaults and set c->struct_size = struct_size. Safe with struct_size <
 *  sizeof(cosy_engine_config) (older callers); does nothing when c is NULL. */
COSY_API void cosy_engine_config_init(cosy_engine_config *c, uint32_t struct_size);
/** Load the model and start the engine. On failure *out is NULL and the status says why. */
COSY_API cosy_status cosy_engine_create(const cosy_engine_config *c, cosy_engine **out);
/** Cancel every request, join the engine's threads and free everything. NULL is a no-op. */
COSY_API void cosy_engine_destroy(cosy_engine *e);
/** Native output sample rate of the model (24000), or 0 when e is NULL. */
COSY_API int32_t cosy_engine_sample_rate(const cosy_engine *e);

/** Engine statistics and memory. Append-only. */
typedef struct cosy_engine_stats {
  uint32_t struct_size;
  uint32_t reserved;
  int64_t weights_bytes;       /**< model weights resident (host bytes on the CPU path) */
  int64_t kv_bytes;            /**< KV cache reserved */
  int64_t workspace_bytes;     /**< other buffers planned at create time */
  int64_t device_bytes_total;  /**< device memory the engine holds (0 on the CPU path) */
  int32_t kv_pages_total;
  int32_t kv_pages_used;
  int32_t active;              /**< requests being decoded now */
  int32_t queued;              /**< requests waiting */
  int64_t requests_done;       /**< requests finished since create (any status) */
  int64_t audio_samples_out;   /**< native-rate samples produced since create */
  /* the scheduler's batches since create (mean batch size = rows / calls) */
  int64_t llm_steps;           /**< batched LLM decode steps */
  int64_t llm_step_rows;       /**< sequences decoded in them */
  int64_t flow_calls;          /**< batched flow calls */
  int64_t flow_jobs;           /**< request chunks in them */
  int64_t vocoder_calls;       /**< batched vocoder calls */
  int64_t vocoder_jobs;        /**< request chunks in them */
  int32_t flow_pages_total;    /**< the flow's cache pages (50 mel frames of one request each) */
  int32_t flow_pages_used;
} cosy_engine_stats;
/** Fill *out (whose struct_size the caller sets, e.g. through cosy_engine_stats_init). */
COSY_API void cosy_engine_stats_init(cosy_engine_stats *s, uint32_t struct_size);
COSY_API cosy_status cosy_engine_get_stats(const cosy_engine *e, cosy_engine_stats *out);

/** What an engine runs with: its settings after defaults and its memory plan, fixed at create
 *  (cosy_engine_get_info). Append-only; fields a backend does not have are 0 or "". */
typedef struct cosy_engine_info {
  uint32_t struct_size;
  uint32_t reserved;
  int32_t device;              /**< COSY_DEVICE_CPU or the CUDA device */
  int32_t max_active;          /**< requests in flight at once (0 = auto resolved) */
  int32_t max_queued;          /**< waiting requests before COSY_ERR_QUEUE_FULL */
  int32_t cpu_threads;         /**< threads of the CPU path's loops (1 without OpenMP) */
  int32_t sample_rate;         /**< the model's native output rate */
  int32_t first_chunk_wait_max; /**< the config field after its default */
  int32_t kv_page_positions;   /**< positions per LLM KV page (GPU) */
  int32_t kv_pages_total;      /**< LLM KV pages (GPU) */
  int32_t flow_pages_total;    /**< the flow's cache pages, 50 mel frames each (GPU) */
  int32_t cc_major, cc_minor;  /**< compute capability the kernels were chosen for (GPU) */
  int32_t n_sm;                /**< multiprocessors (GPU) */
  int32_t smem_per_block;      /**< bytes of shared memory a kernel block may use (GPU) */
  int32_t clusters;            /**< 1: thread-block clusters are used (GPU) */
  int32_t pdl;                 /**< 1: programmatic dependent launch is used (GPU) */
  float gpu_memory_fraction;   /**< the fraction after its default (GPU) */
  int64_t gpu_memory_budget;   /**< bytes that fraction of the device gives the engine (GPU) */
  int64_t gpu_memory_planned;  /**< bytes the engine holds after create (GPU) */
  char backend[8];             /**< "cpu" or "cuda" */
  char device_name[96];        /**< e.g. "NVIDIA H100 80GB HBM3"; "CPU" on the CPU */
  char gpu_profile[24];        /**< a test profile in use (COSY_GPU_PROFILE), else "" */
} cosy_engine_info;
/** Fill *out (whose struct_size the caller sets, e.g. through cosy_engine_info_init). */
COSY_API void cosy_engine_info_init(cosy_engine_info *s, uint32_t struct_size);
COSY_API cosy_status cosy_engine_get_info(const cosy_engine *e, cosy_engine_info *out);

/* ============================== voices ===================================================== */

/** Load a voice file (written by cosy_voice_save). */
COSY_API cosy_status cosy_voice_load(cosy_engine *e, const char *path, cosy_voice **out);
/** Write a voice to a file (GGUF, see docs/model-format.md). */
COSY_API cosy_status cosy_voice_save(const cosy_voice *v, const char *path);

/** What a voice is made of. Append-only. */
typedef struct cosy_voice_features {
  uint32_t struct_size;
  uint32_t reserved;
  const char *prompt_text;           /**< transcript of the prompt audio, UTF-8 (may be NULL/"" when
                                          the voice is only used cross-lingually or with instruct) */
  const int32_t *speech_tokens;      /**< prompt speech tokens, 25 Hz, each in [0, 6561) */
  int32_t n_speech_tokens;           /**< 0 .. 3000 */
  int32_t n_mel_frames;              /**< frames in mel; 2*n_speech_tokens expected (cut if longer) */
  const float *mel;                  /**< [n_mel_frames][80] natural-log mel, 50 Hz, 24 kHz audio */
  const float *speaker_embedding;    /**< [speaker_dim] (CAM++ x-vector) */
  int32_t speaker_dim;               /**< must be 192 */
  int32_t reserved2;
} cosy_voice_features;
COSY_API void cosy_voice_features_init(cosy_voice_features *f, uint32_t struct_size);
/** Make a voice from precomputed features (copied). */
COSY_API cosy_status cosy_voice_from_features(cosy_engine *e, const cosy_voice_features *f,
                                              cosy_voice **out);
/** Clone a voice from a recording (what the official front end does for a zero-shot prompt):
 *  pcm is mono float in [-1, 1], 0.5 .. 30 s at any rate in [16000, 192000] Hz; transcript is
 *  what it says (UTF-8; NULL = ""; needed for zero-shot synthesis, not for cross-lingual or
 *  instruct). The library resamples it to 16 kHz (speech tokens with the speech tokenizer v3,
 *  speaker embedding with CAM++) and to 24 kHz (the prompt mel), all in the process; save the
 *  result with cosy_voice_save to clone once and reuse it. Blocking; thread-safe; may run beside
 *  synthesis. On a GPU engine the two models run on the GPU as one job of the engine's scheduler
 *  (between its audio batches, so other requests' audio keeps flowing) and the features on CPU
 *  threads; when the engine's memory budget could not hold the GPU models (about 1.1 GB at full
 *  size, fp32) they run on the CPU.
 *  Errors: COSY_ERR_UNSUPPORTED when the model file has no front-end models (convert it with
 *  speech_tokenizer_v3.onnx and campplus.onnx); COSY_ERR_INVALID_ARG for NULL or empty audio, an
 *  unsupported rate, NaN/Inf samples, audio shorter than 0.5 s or longer than 30 s, silent audio
 *  (peak of the signal minus its mean below -80 dBFS), audio not scaled to [-1, 1] (peak above 4)
 *  or clipped (more than 1% of the samples at full scale); the message says which. */
COSY_API cosy_status cosy_voice_from_audio(cosy_engine *e, const float *pcm, int64_t n_samples,
                                           int32_t sample_rate, const char *transcript,
                                           cosy_voice **out);
/** Compute the 80-bin natural-log prompt mel (50 Hz) of mono audio at any rate in [16000, 192000]
 *  (resampled to 24 kHz). Samples must be finite and at most 65536 in magnitude (full scale is
 *  1.0), else COSY_ERR_INVALID_ARG. *mel is [*n_frames][80], freed with cosy_free. */
COSY_API cosy_status cosy_audio_to_mel(const float *pcm, int64_t n_samples, int32_t sample_rate,
                                       float **mel, int32_t *n_frames);
/** Release a voice. NULL is a no-op. Requests using it keep it alive until they end. */
COSY_API void cosy_voice_release(cosy_voice *v);

/* ============================== synthesis ================================================== */

#define COSY_MODE_ZERO_SHOT     0  /**< clone the voice: prompt text + prompt speech tokens + mel */
#define COSY_MODE_CROSS_LINGUAL 1  /**< timbre only: no prompt text or prompt tokens in the LLM */
#define COSY_MODE_INSTRUCT      2  /**< instruct_text steers the style; no prompt tokens in the LLM */

/** flags of cosy_synth_params */
#define COSY_SYNTH_NO_TEXT_NORMALIZATION 0x1u  /**< give the text to the tokenizer as is */
/** The last flow call of an utterance attends over the whole utterance, as the official code's
 *  final streaming call does, instead of block-causally like every earlier chunk (the default).
 *  The default lets the engine reuse what earlier chunks computed (each mel frame is computed
 *  once); this flag recomputes the whole utterance once more at the end. docs/scheduler.md gives
 *  the measured difference between the two. */
#define COSY_SYNTH_FULL_ATTENTION_FINAL 0x2u
/** Non-streaming synthesis, as the official non-streaming call: every speech token first, then
 *  one flow call over the whole utterance (full attention) and one vocoder call, so the audio
 *  arrives at once at the end (one chunk). The mel differs from the streaming schedule's (which
 *  sees each chunk with 3 tokens of look-ahead and block-causal attention). speed != 1 implies
 *  this flag. */
#define COSY_SYNTH_ONE_SHOT 0x4u
/** Text streamed in (cosy_request_submit only; zero-shot mode only, else COSY_ERR_UNSUPPORTED):
 *  the request's text arrives in pieces through cosy_request_push_text and ends with
 *  cosy_request_end_text; the text given to cosy_request_submit may be NULL or "" (else it is the
 *  first piece). The LLM interleaves text and speech as the official bidirectional-streaming
 *  inference does (docs/scheduler.md section 7): the prompt text starts the text cache, 5 text
 *  tokens are fed per 15 speech tokens (the prompt's first, then the generated ones, each group
 *  closed by the fill token 6564, which is not spoken), and after cosy_request_end_text the rest
 *  of the text and the task id are fed and the LLM decodes until its end token. While the text
 *  it needs has not arrived, the request's LLM pauses (other requests go on). The speech tokens,
 *  and so the audio, depend only on the text, never on how it was cut into pushes or when they
 *  came. Text is committed to tokens, on the pushing thread, only when more text cannot change
 *  them: with text normalization (the default) sentence by sentence (a sentence ends after
 *  . ! ? ; followed by white space, after 。！？；… or at a line break, and is normalized alone),
 *  with COSY_SYNTH_NO_TEXT_NORMALIZATION word by word (cut before a space that follows a
 *  non-space, or before punctuation that follows a letter); what follows the last cut waits for
 *  more text or the end. max_tokens 0 means 1000 (40 s) for such a request, and it takes at most
 *  min(max_tokens / 2, COSY_LLM_MAX_TEXT_TOKENS) text tokens and COSY_TEXT_MAX_BYTES bytes;
 *  min_tokens does not apply (the official schedule has no minimum). */
#define COSY_SYNTH_TEXT_STREAM 0x8u

/** Synthesis parameters. Append-only; 0 in any field means the default. */
typedef struct cosy_synth_params {
  uint32_t struct_size;
  uint32_t flags;              /**< COSY_SYNTH_* */
  int32_t mode;                /**< COSY_MODE_*; default zero-shot */
  int32_t sample_rate;         /**< output rate 8000..48000; 0 = native 24000 (else libsamplerate) */
  const char *instruct_text;   /**< COSY_MODE_INSTRUCT only, e.g. "Speak slowly." */
  float speed;                 /**< 0.5 .. 2.0, 0 = 1.0; != 1 implies COSY_SYNTH_ONE_SHOT (the
                                    audio comes as one chunk at the end, also from
                                    cosy_request_submit, which can cancel it meanwhile) */
  float temperature;           /**< 0 = 1.0; (0, 2] */
  float top_p;                 /**< 0 = 0.8; (0, 1] */
  int32_t top_k;               /**< 0 = 25; 1 .. 6561 */
  uint64_t seed;               /**< 0 = from the clock */
  int32_t first_chunk_tokens;  /**< streaming: the first chunk holds at least this many speech
                                    tokens (5..100) and ends where the flow's 50-frame attention
                                    block ends; 0 (default) = auto: 5 at light load (see
                                    first_chunk_wait_max), else 25 (the official schedule);
                                    always 25 with COSY_SYNTH_TEXT_STREAM (its tokens come as
                                    fast as its text, docs/scheduler.md section 2). With
                                    P prompt tokens, pad = the tokens that complete the prompt's last
                                    block; n <= pad gives a first chunk of pad tokens (shorter
                                    than a block: earlier first audio, less of it), else pad +
                                    whole blocks. Later chunks double from n rounded up to 25,
                                    up to 100. Moves chunk boundaries only: the samples are the
                                    same for every value */
  int32_t max_tokens;          /**< most speech tokens (per segment); 0 = 20 per text token
                                    (model's rule), at most COSY_LLM_MAX_SPEECH_TOKENS */
  int32_t min_tokens;          /**< speech tokens before a stop token may end the utterance;
                                    0 = 2 per text token (model's rule); capped by max_tokens.
                                    min_tokens = max_tokens forces the length (benchmarks) */
  int32_t reserved;
} cosy_synth_params;
COSY_API void cosy_synth_params_init(cosy_synth_params *p, uint32_t struct_size);

/** Blocking synthesis of a whole utterance. *pcm (float, mono, [-1, 1]) is freed with cosy_free.
 *  p may be NULL (defaults).
 *
 *  LONG TEXT (this call and cosy_request_submit): with text normalization (the default) the text
 *  is normalized and cut into segments as the official front end does (split_paragraph: about
 *  60-80 tokens each, at sentence ends; punctuation-only pieces dropped), and the segments are
 *  synthesized one after the other within the one request, each as the official code does with
 *  a separate call: the same prompt, a fresh LLM context, its own speech-token limits
 *  (min_tokens / max_tokens apply per segment), fresh flow and vocoder states, and the random
 *  generator seeded with seed + k for segment k (0-based). The audio is one continuous stream
 *  (chunk offsets run on; COSY_CHUNK_LAST only on the request's last chunk) and equals, sample
 *  for sample, the segments' audio one after the other; a segment's LLM starts as soon as the
 *  previous segment's LLM ends, while that one's audio is still being made. With
 *  COSY_SYNTH_NO_TEXT_NORMALIZATION the text is one utterance (as the official code without its
 *  text front end). The split needs no text grammars (a model file without them cuts the
 *  whitespace-normalized text the same way).
 *
 *  PER-SEGMENT CEILING: each segment (or the one utterance) reserves at admission what its
 *  ceiling of speech tokens may need (max_tokens, or 20 per text token of the segment). On the
 *  GPU an utterance holds at most 8000 mel frames, 160 s, of prompt (2 frames per prompt token) +
 *  ceiling + 3 look-ahead tokens, and one LLM sequence 8192 positions; with
 *  COSY_SYNTH_ONE_SHOT or speed != 1 the ceiling's whole mel (2 frames per token / speed) must
 *  also fit one vocoder call of 3000 frames. This holds the default ceiling of every segment the
 *  split makes of sentences up to 80 text tokens with any voice up to 30 s. Every segment is
 *  checked at submission, before any audio: one whose default ceiling does not fit fails with
 *  COSY_ERR_TEXT, a max_tokens (or voice) that does not fit with COSY_ERR_INVALID_ARG; the
 *  message names the segment (index, characters, text tokens) and the largest max_tokens that
 *  fits. The CPU engine reserves only the LLM's positions (no such flow limit; an utterance's
 *  actual length is bounded by the model, 300 s). */
COSY_API cosy_status cosy_synthesize(cosy_engine *e, const cosy_voice *v, const char *text,
                                     const cosy_synth_params *p, float **pcm, int64_t *n_samples);

#define COSY_CHUNK_LAST 0x1u   /**< the final chunk of the request (may hold 0 samples) */

/** One piece of streamed audio. */
typedef struct cosy_chunk {
  uint32_t struct_size;
  uint32_t flags;              /**< COSY_CHUNK_* */
  const float *pcm;            /**< valid only during the callback */
  int64_t n_samples;
  int64_t offset;              /**< index of pcm[0] in the utterance */
  int32_t sample_rate;
  int32_t reserved;
} cosy_chunk;
/** Push callback: runs on an engine thread; copy and return fast; non-zero cancels the request. */
typedef int32_t (*cosy_chunk_fn)(void *user, const cosy_chunk *chunk);

/** Start an utterance. With fn != NULL audio is pushed to fn; with fn == NULL it is pulled with
 *  cosy_request_read. The text is normalized, split and tokenized on the calling thread before
 *  this returns (about 6 ms per 1,000 characters on one CPU core), so that many callers prepare
 *  their texts in parallel; the synthesis itself runs on the engine's threads. A text that turns
 *  out to hold nothing to say still returns COSY_OK here, and the request then ends with
 *  COSY_ERR_TEXT and the reason (cosy_request_wait). A text beyond a limit (COSY_TEXT_MAX_BYTES,
 *  checked first; COSY_LLM_MAX_TEXT_TOKENS for the instruct text and for every segment) is
 *  refused here with COSY_ERR_TEXT, *out NULL. *out must be released with
 *  cosy_request_release. */
COSY_API cosy_status cosy_request_submit(cosy_engine *e, const cosy_voice *v, const char *text,
                                         const cosy_synth_params *p, cosy_chunk_fn fn, void *user,
                                         cosy_request **out);
/** Text streaming (COSY_SYNTH_TEXT_STREAM): append a piece of the request's text (UTF-8, "" is a
 *  no-op; all pushes of a request together, the first piece given to cosy_request_submit
 *  included, at most COSY_TEXT_MAX_BYTES). A UTF-8 character may be cut between two pushes
 *  (the trailing incomplete bytes wait for the next push). Returns at once: a push costs time
 *  in proportion to its own bytes (plus, when it completes sentences or words, the
 *  normalization and tokenization of those), whatever is pending from earlier pushes.
 *  Errors: COSY_ERR_INVALID_ARG for NULL arguments, a request submitted without the flag, a push
 *  after cosy_request_end_text or after the request finished; COSY_ERR_CANCELLED once it was
 *  cancelled; COSY_ERR_TEXT when the piece is not valid UTF-8, when the text would exceed
 *  COSY_TEXT_MAX_BYTES, or when its committed text tokens would exceed min(max_tokens / 2,
 *  COSY_LLM_MAX_TEXT_TOKENS) (the message names the limit and the numbers; the piece is not
 *  taken: the request goes on as before and takes further pushes). */
COSY_API cosy_status cosy_request_push_text(cosy_request *r, const char *utf8);
/** Text streaming: no more text. The LLM then feeds what is left and speaks to the end. A
 *  request whose whole text gave no tokens ends with COSY_ERR_TEXT. Errors as
 *  cosy_request_push_text (a second call is COSY_ERR_INVALID_ARG); COSY_ERR_TEXT when the text
 *  ends inside a UTF-8 character (the text is not ended: push the rest, or cancel). A request
 *  released or cancelled without it just ends (cancelled). */
COSY_API cosy_status cosy_request_end_text(cosy_request *r);
/** Where the speech for a piece of streamed text can start (cosy_request_text_marks). Append-only;
 *  written by the library (set struct_size with cosy_text_mark_init).
 *
 *  A text-streamed request's text is committed in UNITS (COSY_SYNTH_TEXT_STREAM above): with
 *  text normalization a unit is a sentence, with COSY_SYNTH_NO_TEXT_NORMALIZATION a word (the
 *  text between two word cuts). A unit that gives no text token (white space, a sentence that
 *  normalizes to nothing) has no mark of its own: its bytes belong to the next unit's range (and
 *  those after the last unit to the last one, once the text is ended). So the marks' byte ranges
 *  are contiguous, start at 0, and, after cosy_request_end_text, end at the total pushed bytes.
 *
 *  MEANING: sample is the output sample offset (at the request's sample_rate) of the first
 *  spoken speech token the LLM generated after the unit's first text token entered its input
 *  (was fed in a forward pass); every sample before it was generated without seeing any of the
 *  unit's text. It is a LOWER BOUND of where the unit is heard: the model speaks a text some
 *  tokens after it was fed (with the 5:15 schedule, typically one or more groups of 15 tokens,
 *  0.6 s each, later), and where a unit's speech really begins is not known to the library.
 *  Pieces of text inside one unit share its mark. Speech token k (0-based among the spoken
 *  ones: the fill token and dropped silence are not spoken) starts at output sample
 *  floor(k * 960 * sample_rate / 24000) (25 tokens a second). The marks depend only on the
 *  text, the voice and the seed, never on how the text was cut into pushes or when they came
 *  (as the audio). */
typedef struct cosy_text_mark {
  uint32_t struct_size;
  uint32_t reserved;
  int64_t text_begin;          /**< the unit's bytes: [text_begin, text_end) of the concatenation */
  int64_t text_end;            /**<   of every push (the first piece given to submit included) */
  int64_t sample;              /**< output sample where its speech can start; -1 while the unit
                                    has not entered the LLM (and for good if the request ended
                                    first: cancelled or failed) */
  int32_t text_token;          /**< index of its first text token among the request's text
                                    tokens (the prompt's not counted) */
  int32_t speech_token;        /**< sample's speech token (index among the spoken ones); -1
                                    while sample is -1 */
} cosy_text_mark;
COSY_API void cosy_text_mark_init(cosy_text_mark *m, uint32_t struct_size);
/** The request's marks [first, first + cap) into out (fewer when fewer exist), and in *n_marks
 *  how many the request has so far (units committed; units only ever get appended and a mark's
 *  sample, once set, never changes). Any thread, any time before cosy_request_release (also
 *  while another thread pushes text or reads audio); poll it as the audio plays.
 *  out[0].struct_size (cosy_text_mark_init) is the size of the caller's cosy_text_mark and so
 *  the stride of out; every element written gets it as its struct_size. out may be NULL when cap
 *  is 0 (then only *n_marks). A request without COSY_SYNTH_TEXT_STREAM has one mark when its
 *  text is not empty: bytes [0, strlen(text)), sample 0 (its whole text is in the LLM's input
 *  before any speech token; a long text's later segments start later, so 0 is a lower bound
 *  there too).
 *  Errors: COSY_ERR_INVALID_ARG for a NULL request or n_marks, first or cap < 0, or out NULL
 *  with cap > 0 (*n_marks is then 0);
 *  COSY_ERR_STRUCT_SIZE when out[0].struct_size is smaller than the first version of the struct
 *  or a larger caller's unknown tail (of out[0]) is not zero. */
COSY_API cosy_status cosy_request_text_marks(const cosy_request *r, int32_t first,
                                             cosy_text_mark *out, int32_t cap, int32_t *n_marks);
/** Pull up to cap samples. Blocks up to timeout_ms (-1 = forever, 0 = poll). COSY_OK with
 *  *n_read == 0 means the utterance is finished; COSY_ERR_TIMEOUT means nothing arrived in time;
 *  other codes are the request's failure (COSY_ERR_CANCELLED after a cancel).
 *  Only for requests submitted without a callback. */
COSY_API cosy_status cosy_request_read(cosy_request *r, float *buf, int64_t cap, int64_t *n_read,
                                       int32_t timeout_ms);
/** Timing and size of one request, for progress and benchmarks. Append-only. */
typedef struct cosy_request_stats {
  uint32_t struct_size;
  uint32_t reserved;
  double ttfb_s;               /**< submit -> first audio delivered (0 while none) */
  double total_s;              /**< submit -> end (or -> now while running) */
  double llm_s;                /**< time spent in the LLM (prefill + decode) */
  double flow_s;               /**< time spent in the flow decoder */
  double vocoder_s;            /**< time spent in the vocoder (and resampling) */
  int64_t n_samples;           /**< samples delivered so far (output rate) */
  int32_t n_text_tokens;       /**< text tokens given to the LLM (prompt + text) */
  int32_t n_speech_tokens;     /**< speech tokens generated */
  int32_t n_chunks;            /**< chunks delivered */
  int32_t done;                /**< 1 once the request has ended */
} cosy_request_stats;
COSY_API void cosy_request_stats_init(cosy_request_stats *s, uint32_t struct_size);
/** Snapshot of a request's progress; any time before cosy_request_release. */
COSY_API cosy_status cosy_request_get_stats(const cosy_request *r, cosy_request_stats *out);

/** Cancel; any thread; idempotent; NULL is a no-op. */
COSY_API void cosy_request_cancel(cosy_request *r);
/** Wait for the end (-1 = forever). Returns the request's final status, or COSY_ERR_TIMEOUT. */
COSY_API cosy_status cosy_request_wait(cosy_request *r, int32_t timeout_ms);
/** Release (cancels if still running). NULL is a no-op. Once it has returned, the request's push
 *  callback is not called again (a call in progress on an engine thread finishes first), so the
 *  callback's user data may be freed right away. */
COSY_API void cosy_request_release(cosy_request *r);

/** Free memory returned by the library. NULL is a no-op. */
COSY_API void cosy_free(void *p);

#ifdef __cplusplus
}
#endif

#endif /* COSYVOICE_H */
