/* kregistry.c - the kernel registry (tests/kharness.h): one entry per launcher family.
 *
 * Adding a launcher: put it in the entry of its family (or a new entry with its test in
 * tests/test_kernels.c and its benchmark in bench/bench_kernels.c, both declared in kharness.h).
 * tools/check_kernel_registry.sh (make check-kernels, part of make test) fails when a cosy_k_*
 * function declared in a kernels header is in no entry, or an entry names one that is not declared.
 * The order is the tests' order; the benchmark runs its scenarios in turn and, in each, the
 * families in this order. */
#include "kharness.h"

#ifdef COSY_WITH_CUDA
#define T(name) test_##name, "test_" #name, NULL
#define BENCH(name) bench_##name, NULL
#else /* built without CUDA: the table only (--list, the SKIP path) */
#define T(name) NULL, "test_" #name, NULL
#define BENCH(name) NULL, NULL
#endif
#define ELSEWHERE(where) NULL, NULL, where
#define NO_BENCH(why) NULL, why
#define L(...) (const char *const[]){__VA_ARGS__, NULL}

const kh_entry kh_registry[] = {
    {"args",
     L("cosy_k_device_image_check"), /* and the refusals of most launchers below */
     T(args), NO_BENCH("no: argument checks only"), KH_CEIL_NONE},
    {"norm", L("cosy_k_rmsnorm", "cosy_k_add_rmsnorm", "cosy_k_layernorm_mod"), T(norm),
     BENCH(norm), KH_CEIL_HBM},
    {"rope", L("cosy_k_rope_neox", "cosy_k_rope_interleaved"), T(rope), BENCH(rope), KH_CEIL_HBM},
    {"act",
     L("cosy_k_silu_mul", "cosy_k_gelu_tanh", "cosy_k_gated_residual", "cosy_k_silu", "cosy_k_mish",
       "cosy_k_leaky_relu", "cosy_k_snake", "cosy_k_add_bias"),
     T(act), BENCH(act), KH_CEIL_HBM},
    {"embed", L("cosy_k_embed"), T(embed), BENCH(embed), KH_CEIL_HBM},
    {"gemm", L("cosy_k_gemm", "cosy_k_gemm_inv", "cosy_k_gemm_gelu", "cosy_k_add_bias_gelu"),
     T(gemm), BENCH(gemm), KH_CEIL_BOTH},
    {"sample",
     L("cosy_k_log_softmax", "cosy_k_topk", "cosy_k_ras_sample", "cosy_k_ras_supported"),
     T(sample), BENCH(sample), KH_CEIL_HBM},
    {"attention",
     L("cosy_k_paged_decode", "cosy_k_paged_decode_workspace", "cosy_k_attn_dit"),
     T(attention), BENCH(attention), KH_CEIL_BOTH},
    {"paged_prefill", L("cosy_k_paged_prefill"), T(paged_prefill), BENCH(paged_prefill),
     KH_CEIL_BF16},
    {"llm_gemv", L("cosy_k_llm_gemv", "cosy_k_llm_gemv_supported", "cosy_k_llm_gemv_tc",
                   "cosy_k_llm_gemv_tc_supported", "cosy_k_llm_gemv_tc_workspace",
                   "cosy_k_llm_gemv_tc_xfrag_used"),
     T(llm_gemv), BENCH(llm_gemv),
     KH_CEIL_HBM},
    {"dit_elementwise",
     L("cosy_k_flow_qkv_post", "cosy_k_flow_qkv_post_pos", "cosy_k_flow_qkv_post_store",
       "cosy_k_flow_add_rows", "cosy_k_flow_pack_cond", "cosy_k_flow_mu", "cosy_k_flow_euler"),
     T(dit_elementwise), BENCH(dit_elementwise), KH_CEIL_HBM},
    {"flow_pack",
     L("cosy_k_flow_x_gather", "cosy_k_flow_x_store", "cosy_k_flow_kv_store",
       "cosy_k_rows_gather_f32", "cosy_k_rows_zero_bf16"),
     T(flow_pack), BENCH(flow_pack), KH_CEIL_HBM},
    {"attn_dit_paged",
     L("cosy_k_attn_dit_paged", "cosy_k_attn_dit_paged_split", "cosy_k_attn_dit_paged_auto",
       "cosy_k_attn_dit_paged_v2", "cosy_k_attn_dit_paged_v2_stages",
       "cosy_k_dit_auto_parts", "cosy_k_dit_auto_items"),
     T(attn_dit_paged), BENCH(attn_dit_paged),
     KH_CEIL_BOTH},
    {"llm_step_ops",
     L("cosy_k_llm_decode_prep", "cosy_k_llm_rope_append", "cosy_k_llm_norm_split", "cosy_k_llm_split", "cosy_k_llm_silu_split", "cosy_k_llm_add"),
     T(llm_step_ops), BENCH(llm_step_ops), KH_CEIL_HBM},
    /* tested with the DiT stage's data layouts in tests/test_gpu_flow.c; timed here */
    {"resid_ln", L("cosy_k_flow_resid_ln"), ELSEWHERE("test_gpu_flow.c (resid_ln_case)"),
     BENCH(resid_ln), KH_CEIL_HBM},
    {"conv_pos", L("cosy_k_flow_conv_pos"), ELSEWHERE("test_gpu_flow.c (conv_case)"),
     BENCH(conv_pos), KH_CEIL_BOTH},
    /* the vocoder's and the front end's launchers: tested against lib/ref in their stage tests,
     * timed only inside whole runs */
    {"hift",
     L("cosy_k_hift_conv", "cosy_k_hift_conv_split", "cosy_k_hift_conv_plan",
       "cosy_k_hift_conv_prepare", "cosy_k_hift_conv64", "cosy_k_hift_conv64_group",
       "cosy_k_hift_f0_classify", "cosy_k_hift_f0_classify_group",
       "cosy_k_hift_noise", "cosy_k_hift_sine", "cosy_k_hift_sine_at", "cosy_k_hift_source",
       "cosy_k_hift_source_at", "cosy_k_hift_stft", "cosy_k_hift_istft"),
     ELSEWHERE("test_gpu_hift.c"), BENCH(hift), KH_CEIL_BF16},
    {"frontend",
     L("cosy_k_fe_act", "cosy_k_fe_bn_relu", "cosy_k_fe_cam_mask", "cosy_k_fe_flatten",
       "cosy_k_fe_fsmn_add", "cosy_k_fe_fsq", "cosy_k_fe_im2col1d", "cosy_k_fe_im2col2d",
       "cosy_k_fe_layernorm", "cosy_k_fe_seg_ctx", "cosy_k_fe_stats"),
     ELSEWHERE("test_gpu_frontend.c"),
     NO_BENCH("no: timed inside cosy_voice_from_audio (bench_voice)"), KH_CEIL_NONE},
};
const int kh_n_registry = (int)(sizeof kh_registry / sizeof kh_registry[0]);
