/* testutil.h - helpers for the cmocka tests: where ../shared is, .npy loading, error metrics. */
#ifndef COSY_TESTUTIL_H
#define COSY_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Directory of the shared reference data: $COSY_SHARED, else the Makefile's SHARED_DIR (../shared)
 * as an absolute path compiled in (TU_SHARED_DEFAULT), so that a test binary finds it from any
 * current directory. Returns NULL when it does not exist. */
const char *tu_shared_dir(void);
/* Full path of a file under the shared dir (static buffer; NULL if the dir is absent). */
const char *tu_shared(const char *rel);
/* The small golden model converted to the project's format by `make test` (f32 weights):
 * $COSY_TEST_MODEL, else build/test/small-f32.gguf (the build's, an absolute path compiled in:
 * TU_TEST_MODEL_DEFAULT). NULL if absent. */
const char *tu_small_model(void);
/* The same plus the small random front-end models of tests/data/frontend (`make test`):
 * $COSY_TEST_FE_MODEL, else build/test/small-fe-f32.gguf (absolute, TU_FE_MODEL_DEFAULT). NULL if
 * absent. */
const char *tu_fe_model(void);
/* A file of the golden front-end data: $COSY_TEST_FE_DATA/name, else tests/data/frontend/name
 * (absolute, TU_FE_DATA_DEFAULT). Static buffer, one per thread. */
const char *tu_fe_file(const char *name);
/* A scratch file path in $TMPDIR (else /tmp), unique to this process and tag (static buffer, one
 * per thread). Tests remove what they write there. */
const char *tu_tmp_path(const char *tag);
/* the library's environment knobs as they are now (lib/knobs.h), for tests that create a GPU
 * context of their own (cosy_gpu_create) */
struct cosy_knobs;
const struct cosy_knobs *tu_knobs(void);

/* A file of the repository's tests/ directory (absolute, compiled in: TU_TESTS_DIR; static
 * buffer, one per thread). */
const char *tu_tests_file(const char *name);

/* Load a .npy (little-endian <f4, <f8, <i4 or <i8; C order). Returns a malloc'd float array
 * (or int32 for tu_npy_i32), and the shape. NULL on failure (message printed). */
float *tu_npy_f32(const char *path, int *ndim, int64_t shape[8]);
int32_t *tu_npy_i32(const char *path, int *ndim, int64_t shape[8]);
double *tu_npy_f64(const char *path, int *ndim, int64_t shape[8]);
int64_t tu_numel(int ndim, const int64_t *shape);

/* A file under the shared dir: ids as int32 (*n = element count), or floats checked to hold
 * `want` elements (want < 0: any). NULL (with a message) when absent or of another size. */
int32_t *tu_load_ids(const char *rel, int *n);
float *tu_load_f32(const char *rel, int64_t want);

/* The golden flow inputs (golden/inputs): prompt speech tokens followed by the flow tokens,
 * the prompt mel [2 * n_prompt][80] and the speaker embedding [192]. 0 on success. */
typedef struct tu_flow_inputs {
  int32_t *tokens;
  int n_prompt, n_flow;
  float *prompt_feat;
  float *spk;
} tu_flow_inputs;
int tu_golden_flow_inputs(tu_flow_inputs *in);
void tu_flow_inputs_free(tu_flow_inputs *in);

/* A voice of engine e from the golden flow inputs (prompt tokens, prompt mel, speaker) with the
 * given prompt text; NULL (the reason printed) when the data are absent or the engine refuses. */
struct cosy_engine;
struct cosy_voice;
struct cosy_voice *tu_golden_voice(struct cosy_engine *e, const char *prompt_text);

/* The golden HiFT inputs (golden/hift): mel [80][T] channels-first; mel_nf [80][32], its first
 * TU_HIFT_T_NONFINAL frames (the non-final call's input); the injected source noise rand_ini [nh]
 * and sine_waves [n_rows][nh], nh = the model's harmonics + 1. 0 on success (all or nothing). */
#define TU_HIFT_T_NONFINAL 32
typedef struct tu_hift_inputs {
  float *mel, *mel_nf, *rand_ini, *sine_waves;
  int T;
  int64_t n_rows;
} tu_hift_inputs;
int tu_golden_hift_inputs(int nh, tu_hift_inputs *in);

/* ||a - ref||_2 / ||ref||_2 (computed in double) */
double tu_rel_l2(const float *a, const float *ref, size_t n);
double tu_max_abs_diff(const float *a, const float *ref, size_t n);

/* Skip the current cmocka test with a message when cond is false. */
#define TU_REQUIRE(cond, ...)                                 \
  do {                                                        \
    if (!(cond)) {                                            \
      print_message("SKIP: " __VA_ARGS__);                    \
      print_message("\n");                                    \
      skip();                                                 \
    }                                                         \
  } while (0)

#endif
