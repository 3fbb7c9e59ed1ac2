/* blocks.h — the pieces decoder families share (blocks.c): checked weight binding by checkpoint
 * name, a layer's weights, a component's graph inputs, the attention block (projections, q/k
 * norms, rope, cache inputs, outputs and states, attention, output projection) and the gated
 * MLP; and the standard pre-norm decoder language model built from them (decoder_lm.c: embed,
 * N x [norm, attention, residual, norm, mlp, residual], final norm, head).
 *
 * A family that has this shape fills a blk_lm (hyperparameters + flags) and calls blk_lm_build;
 * the norms may also sit around each block (Gemma 2/3's sandwich) or after it (OLMo 2). A
 * family with another shape (parallel blocks, ...) fills a blk_lm too and writes its own loop
 * over blk_graph_inputs, blk_bind_layer, blk_attention and blk_mlp. */
#ifndef FERRY_MODELS_BLOCKS_H
#define FERRY_MODELS_BLOCKS_H

#include "models/lm_config.h"
#include "models/model.h"

/* Checkpoint names of one decoder family: printf formats taking the layer number. */
typedef struct blk_names {
    const char *embed, *final_norm, *lm_head;
    const char *in_norm, *post_norm, *pre_ff_norm, *post_ff_norm;
    const char *q, *k, *v, *o, *q_bias, *k_bias, *v_bias, *o_bias, *q_norm, *k_norm;
    const char *gate, *up, *down, *gate_bias, *up_bias, *down_bias;
    /* fused projections (Phi-3's qkv_proj: rows q, k, v; gate_up_proj: rows gate, up), read
     * in place of q/k/v or gate/up and sliced after one linear, as transformers computes them;
     * NULL where the family stores them apart */
    const char *qkv, *gate_up;
    /* a mixture of experts (moe_block.c): the router, each expert's gate, up and down (formats
     * taking the layer, then the expert; a checkpoint may instead hold the stacks transformers
     * 5 keeps in memory, model.layers.%d.mlp.experts.gate_up_proj and down_proj); Qwen2-MoE's
     * shared expert and its gate. NULL where the family has none */
    const char *router, *expert_gate, *expert_up, *expert_down;
    const char *shared_gate, *shared_up, *shared_down, *shared_expert_gate;
} blk_names;

/* The initializers of the names every Llama-shaped decoder shares: embeddings, head, the
 * norms around attention, attention's projections with their biases and q/k norms. */
#define BLK_LLAMA_ATTENTION_NAMES                                                                \
    .embed = "model.embed_tokens.weight", .final_norm = "model.norm.weight",                    \
    .lm_head = "lm_head.weight", .in_norm = "model.layers.%d.input_layernorm.weight",           \
    .post_norm = "model.layers.%d.post_attention_layernorm.weight",                             \
    .q = "model.layers.%d.self_attn.q_proj.weight",                                             \
    .k = "model.layers.%d.self_attn.k_proj.weight",                                             \
    .v = "model.layers.%d.self_attn.v_proj.weight",                                             \
    .o = "model.layers.%d.self_attn.o_proj.weight",                                             \
    .q_bias = "model.layers.%d.self_attn.q_proj.bias",                                          \
    .k_bias = "model.layers.%d.self_attn.k_proj.bias",                                          \
    .v_bias = "model.layers.%d.self_attn.v_proj.bias",                                          \
    .o_bias = "model.layers.%d.self_attn.o_proj.bias",                                          \
    .q_norm = "model.layers.%d.self_attn.q_norm.weight",                                        \
    .k_norm = "model.layers.%d.self_attn.k_norm.weight"

/* transformers' Llama names ("model.layers.%d.self_attn.q_proj.weight", ...). */
extern const blk_names blk_llama_names;
/* Qwen2-MoE's and Qwen3-MoE's: Qwen2's and Qwen3's, and the sparse block's ("model.layers.%d.
 * mlp.experts.%d.gate_proj.weight", ...). */
extern const blk_names blk_qwen_moe_names;

/* torch's module classes the families' modules are made of */
#define BLK_LINEAR_CLASS "torch.nn.modules.linear.Linear"
#define BLK_EMBEDDING_CLASS "torch.nn.modules.sparse.Embedding"

/* ACT2FN["gelu_pytorch_tanh"]: what Gemma makes of its legacy "gelu" too. */
#define BLK_GELU_TANH_CLASS "transformers.activations.GELUTanh"

struct blk_lm;

/* A mixture-of-experts decoder's sparse blocks (Qwen2-MoE, Qwen3-MoE, Mixtral): the layers
 * whose MLP is one, what routes in them, and Qwen2-MoE's shared expert. */
typedef struct blk_moe {
    g_moe_opts opts;         /* experts, top-k, renormalising, fp32 scaling (act: the lm's) */
    int64_t expert_ff;       /* each expert's intermediate size */
    int64_t shared_ff;       /* the shared expert's intermediate size; 0: none */
    bool *sparse;            /* per layer: the MLP is a sparse block; owned; NULL: no layer */
} blk_moe;

/* A decoder family of the standard shape as transformers names it, and what it sets over the
 * generic config reading. */
typedef struct blk_family {
    const char *model_type;  /* "llama": its modeling module, transformers.models.llama.modeling_llama */
    const char *prefix;      /* "Llama": its classes' (LlamaModel, LlamaDecoderLayer, ...) */
    const char *genai_type;  /* onnxruntime-genai's model type ("llama"); NULL: it has none */
    const char *base_model;  /* the base model's class suffix; NULL: "Model" (LlamaModel) */
    const char *act_key;     /* the config key naming the MLP's activation; NULL: "hidden_act" */
    const char *act_default; /* ... and its value when the key is absent (with act_key) */
    const char *act_module;  /* the MLP's activation attribute; NULL: "act_fn" */
    /* biases, q/k norm, windows, ...: what the family adds (may be NULL) */
    void (*quirks)(const lm_config *c, struct blk_lm *lm);
    /* the family's own config keys, read after the quirks; an error names the key (may be
     * NULL) */
    ferry_status (*read_extra)(const model_config *cfg, const lm_config *c, struct blk_lm *lm,
                               fy_err *err);
    /* A JSON object of the family's config class defaults (Gemma3TextConfig's vocab_size,
     * heads, ...) for the keys a config leaves out, as transformers fills them in: Google's
     * own configs omit most of them (may be NULL) */
    const char *config_defaults;
    /* its position_ids are M-RoPE's rows (a multimodal model's language model, whose graph
     * takes them as model_io.position_rows says); other families refuse an mrope config */
    bool mrope;
} blk_family;

/* Where a layer's norms sit. */
typedef enum blk_norm_layout {
    BLK_PRE_NORM,            /* h += attn(in_norm(h)); h += mlp(post_attention_norm(h)) */
    BLK_SANDWICH_NORM,       /* h += post_attention_norm(attn(in_norm(h)));
                                h += post_ff_norm(mlp(pre_ff_norm(h))) (Gemma 2/3) */
    BLK_POST_NORM            /* h += post_attention_norm(attn(h)); h += post_ff_norm(mlp(h))
                                (OLMo 2) */
} blk_norm_layout;

/* Which RMSNorm q and k get before rope. */
typedef enum blk_qk_norm {
    BLK_QK_NONE,
    BLK_QK_PER_HEAD,         /* over head_dim, one weight shared by the heads (Qwen3, Gemma 3) */
    BLK_QK_WHOLE             /* over the whole projection, before the heads split (OLMo 2) */
} blk_qk_norm;

/* A decoder language model of the standard shape. */
typedef struct blk_lm {
    const blk_family *family;
    int64_t n_layers, hidden, n_heads, n_kv_heads, head_dim, intermediate, vocab;
    int64_t max_position_embeddings;
    double eps;
    g_op act;                /* G_SILU, G_GELU or G_GELU_TANH (gated MLP) */
    const char *act_class;   /* the transformers class of act_fn ("...SiLUActivation") */
    const char *scaled_embedding_class; /* embed_tokens' when it scales its own output (Gemma's);
                                NULL: a plain embedding, scaled by the model */
    bool qkv_bias;           /* q/k/v projections carry biases */
    bool o_bias;             /* o_proj carries a bias */
    bool mlp_bias;
    blk_qk_norm qk_norm;
    blk_norm_layout norms;
    double norm_offset;      /* added to every RMSNorm weight, in fp32 (Gemma's 1 + w); 0 */
    bool norm_f32_weight;    /* every RMSNorm multiplies by its weight in fp32, then casts
                                (Gemma's, OLMo 2's); else casts, then multiplies (Llama's) */
    double embed_scale;      /* the embedding output times this (Gemma's sqrt(hidden), Granite's
                                embedding_multiplier); 0 = none */
    double attn_scale;       /* the attention scores' scale (Granite's attention_multiplier);
                                0 = 1 / sqrt(head_dim) */
    double residual_scale;   /* each block's output times this before its residual add
                                (Granite's residual_multiplier); 0 = none */
    double logits_divisor;   /* the head's output divided by this (Granite's logits_scaling);
                                0 = none */
    double attn_softcap;     /* scores = tanh(scores / cap) * cap before the mask (Gemma 2's
                                attn_logit_softcapping); 0 = none */
    double final_softcap;    /* logits = tanh(logits / cap) * cap (final_logit_softcapping);
                                0 = none */
    bool allow_partial_rotary; /* the family's attention rotates only rotary_dim of each head */
    bool tie_embeddings;     /* one tensor is both the embedding and the head (config.json's
                                tie_word_embeddings, settled against the checkpoint by
                                blk_lm_bind) */
    const char *tied_name;   /* with tie_embeddings: the checkpoint tensor read for both */
    const char *tied_twin;   /* a stored copy with the same bytes, consumed by the tie; or NULL */
    g_rope_opts *rope;       /* per layer; owned */
    bool *no_rope;           /* per layer: q and k not rotated (SmolLM3's NoPE layers); owned;
                                NULL: every layer rotates */
    int64_t *window;         /* per layer: sliding window or 0; owned */
    const blk_names *names;
    blk_moe moe;             /* the sparse blocks of a mixture of experts; moe.sparse NULL: none */
} blk_lm;

/* transformers' ACT2FN name `name` as ferry's op and the module class it makes (silu, swish,
 * gelu, gelu_pytorch_tanh, gelu_new); false for any other. */
bool blk_activation(const char *name, g_op *op, const char **cls);

/* Fills `lm` from the decoder config: sizes, eps, activation, tying and rope (rotary_dim from
 * partial_rotary_factor). Refuses an activation the gated MLP does not know. Biases, q/k norm,
 * sliding windows and the other flags are the family's to set afterwards (transformers'
 * families differ: Llama has no window, Mistral one for every layer, Qwen2/3 per layer);
 * blk_lm_read then refuses partial rotary unless the family allowed it. */
ferry_status blk_lm_from_config(const lm_config *cfg, const char *origin, const char *arch,
                                bool mrope,
                                blk_lm *lm, fy_err *err);
void blk_lm_free(blk_lm *lm);
/* Per-layer windows as Qwen2/Qwen3 configs give them: `window` (0: none) on the layers that
 * layer_types marks sliding_attention or, without layer_types, on layers from
 * max_window_layers on (transformers derives layer_types so). */
void blk_lm_windows(const lm_config *cfg, int64_t window, blk_lm *lm);

/* A layer's weights (G_NONE where the family has none). */
typedef struct blk_layer {
    int in_norm, post_norm, pre_ff_norm, post_ff_norm;
    int q, k, v, o, q_b, k_b, v_b, o_b, q_norm, k_norm;
    int gate, up, down, gate_b, up_b, down_b;
    int qkv, gate_up;        /* fused projections (blk_names.qkv, gate_up) */
    /* a sparse block's router and expert stacks ([E, 2*ff, h] gate_up, or [E, ff, h] gate and
     * up; [E, h, ff] down), its shared expert and that expert's gate */
    int router, ex_gate_up, ex_up, ex_down, sh_gate, sh_up, sh_down, sh_expert_gate;
} blk_layer;

/* Whether checkpoint tensor `t` (its full name `name`) has shape dims[0..rank): otherwise an
 * error naming the tensor, its file, its shape and the shape config.json implies. */
ferry_status blk_check_shape(const st_tensor *t, const char *name, int rank, const int64_t *dims,
                             fy_err *err);

/* Binds layer l's weights by lm->names, checking each shape against the config. */
ferry_status blk_bind_layer(g_graph *g, ckpt *ck, const blk_lm *lm, int l, ferry_dtype dt,
                            blk_layer *w, fy_err *err);

/* A decoder component's graph inputs: input_ids and position_ids [batch, sequence], and the
 * attention mask its cache calls for (int64 [batch, past + sequence], or bool
 * [batch, 1, sequence, cache length] with a static cache). A plain component computes the mask
 * or the positions its io does not take (model_io.computed_*): `mask` and `positions` are
 * then node values, not inputs, named under g->base_scope ("/model" when unset). */
typedef struct blk_inputs {
    int ids, mask, positions;
    int embeds;              /* inputs_embeds [b, s, hidden] where the io has no embedding
                                (ids is then G_NONE) */
    const model_io *io;
} blk_inputs;

/* `hidden`: the width of inputs_embeds, for an io without the embedding. */
void blk_graph_inputs(g_graph *g, const model_io *io, int64_t hidden, blk_inputs *in);

/* What transformers' forward uses for an input it is not given: a value made [batch, sequence]
 * from input_ids' `shape` (int64 [2]) and extents `bs`, as the input it stands for is. */
int blk_like_ids(g_graph *g, int v, const g_dim *bs);
/* Positions arange(sequence) in every row (LlamaModel's and BertEmbeddings' default). */
int blk_positions_from_zero(g_graph *g, int shape, const g_dim *bs);

/* The family's class `suffix` ("Attention" -> "transformers.models.llama.modeling_llama.
 * LlamaAttention"). */
void blk_class(const blk_lm *lm, const char *suffix, char *out, size_t size);
/* Declares the family's RMSNorm module at node-name scope `scope`. */
void blk_norm_module(g_graph *g, const blk_lm *lm, const char *scope);
/* The family's RMSNorm of x (its eps, offset and weight arithmetic); with a skip, of x + skip,
 * the sum in *sum. */
int blk_norm(g_graph *g, const blk_lm *lm, const char *name, int x, int weight);
int blk_skip_norm(g_graph *g, const blk_lm *lm, const char *name, int x, int skip, int weight,
                  int *sum);

/* Layer l's attention on x [b, s, hidden] -> [b, s, hidden] (after o_proj): q/k/v projections,
 * q/k norms, rope, and the cache the io asks for (its inputs, outputs and states). Declares its
 * modules (the attention, its projections and norms). */
int blk_attention(g_graph *g, const blk_lm *lm, const blk_layer *w, int l, int x,
                  const blk_inputs *in);

/* Layer l's attention proper on q [b, s, heads, d], k and v [b, s, kv_heads, d] (after their
 * projections, norms and rope) -> [b, s, heads * d], scores scaled by `scale`: with the cache
 * the io asks for (its inputs, outputs and states) and the layer's window. */
int blk_attend(g_graph *g, const blk_lm *lm, int l, int q, int k, int v, const blk_inputs *in,
               double scale);

/* Layer l's cache as graph inputs, as blk_attend reads them: the past key and value and, for
 * a static cache, the write position (G_NONE where the io has none). Made once: a family that
 * reads them before the layer (its positions from the past length) gets the inputs blk_attend
 * then uses. */
void blk_cache_inputs(g_graph *g, const blk_lm *lm, const model_io *io, int l, int *pk, int *pv,
                      int *pos);

/* Declares layer l's cache outputs (an attention's present key and value, and a static
 * cache's next write position, read off `attn_out` so that it is written after every read of
 * the old one) as graph outputs and states, paired with the inputs blk_cache_inputs made. */
void blk_cache_outputs(g_graph *g, const model_io *io, int l, int pk, int pv, int pos,
                       int present_k, int present_v, int attn_out);

/* Moves the last graph output (the logits, declared after the cache outputs its layers made)
 * first: logits, then the cache in layer order. */
void blk_logits_first(g_graph *g);

/* Layer l's gated MLP: down(act(gate(x)) * up(x)); declares its modules. */
int blk_mlp(g_graph *g, const blk_lm *lm, const blk_layer *w, int l, int x);

/* A gated MLP of intermediate size ff at module path `scope` ("/model/layers.0/mlp"):
 * down(act(gate(x)) * up(x)) from gate and up (or gate_up, its rows gate then up), biases
 * where given (else G_NONE); declares its modules. */
int blk_gated_mlp(g_graph *g, const blk_lm *lm, const char *scope, int64_t ff, int x,
                  int gate_up, int gate_w, int up_w, int down_w, int gate_b, int up_b, int down_b);

/* Whether layer l's MLP is a sparse block (moe_block.c). */
bool blk_is_sparse(const blk_lm *lm, int64_t l);
/* Binds sparse layer l's router, experts and shared expert, checking each shape against the
 * config; an expert's tensors are stacked unless the checkpoint holds the stacks. */
ferry_status blk_bind_experts(g_graph *g, ckpt *ck, const blk_lm *lm, int l, ferry_dtype dt,
                              blk_layer *w, fy_err *err);
/* Layer l's sparse block on x: router logits, the moe node over the experts, plus the shared
 * expert scaled by sigmoid(its gate) where there is one; declares its modules. */
int blk_moe_block(g_graph *g, const blk_lm *lm, const blk_layer *w, int l, int x);

/* The config keys of a mixture-of-experts family. */
typedef struct blk_moe_keys {
    const char *experts;     /* the experts' count ("num_experts"; Mixtral "num_local_experts") */
    const char *experts_alias; /* its other name, which transformers' attribute_map reads as
                                it (Qwen3-MoE, Mixtral); NULL: none */
    int64_t experts_default; /* when neither is given (the config class's default) */
    const char *expert_ff;   /* an expert's intermediate size ("moe_intermediate_size"); NULL:
                                intermediate_size (Mixtral) */
    const char *shared_ff;   /* the shared expert's ("shared_expert_intermediate_size"); NULL:
                                none */
    bool routed_layers;      /* decoder_sparse_step and mlp_only_layers pick the sparse layers,
                                and 0 experts leaves every layer dense (the Qwens); else every
                                layer is sparse */
    bool norm_key;           /* norm_topk_prob says whether to renormalise; else always */
    bool scale_f32;          /* the routing weights scale in fp32 (Mixtral) */
} blk_moe_keys;

/* Reads the family's mixture keys and num_experts_per_tok into lm->moe (after the generic
 * reading: lm->act and lm->n_layers are set); every key is required (a family's
 * config_defaults fill in its config class's defaults); errors name the key. */
ferry_status blk_moe_read(const model_config *cfg, const blk_moe_keys *keys, blk_lm *lm,
                          fy_err *err);

/* lm_head alone (io->parts MODEL_PART_HEAD): input [b, s, hidden] -> output, the logits. */
ferry_status blk_lm_head_build(const blk_lm *lm, ckpt *ck, const model_io *io, g_graph *g,
                               fy_err *err);
/* The embedded input_ids [b, s] (the input, in *ids) as a value, scaled as the family's
 * embedding scales; G_NONE with err set when the table is missing. */
int blk_lm_embed(const blk_lm *lm, ckpt *ck, const model_io *io, g_graph *g, int *ids,
                 fy_err *err);
/* The embedding alone (io->parts MODEL_PART_EMBED): input_ids -> inputs_embeds, scaled as the
 * family's embedding scales. */
ferry_status blk_lm_embed_build(const blk_lm *lm, ckpt *ck, const model_io *io, g_graph *g,
                                fy_err *err);
/* The forward graph of a standard decoder LM for `io` (the parts it holds). */
ferry_status blk_lm_build(const blk_lm *lm, ckpt *ck, const model_io *io, g_graph *g,
                          fy_err *err);

/* The model_arch of a decoder family of the standard shape, `read_fn` its config reader
 * (which calls blk_lm_read with its blk_family); the file also includes generate/generation.h. */
#define BLK_LM_ARCH(arch, type, read_fn) BLK_LM_ARCH_OUT(arch, type, read_fn, MODEL_CAUSAL_LM_OUTPUT)
/* ... whose forward returns `output` (a mixture of experts' MoeCausalLMOutputWithPast). */
#define BLK_LM_ARCH_OUT(arch, type, read_fn, output)                                       \
    {                                                                                      \
        .architecture = (arch), .model_type = (type), .kind = MODEL_CAUSAL_LM,             \
        .output_class = (output), .read = (read_fn),                                       \
        .free_hparams = blk_lm_destroy, .bind = blk_lm_bind, .plan = gen_decoder_plan,     \
        .build = blk_lm_build_hook, .inputs = blk_lm_inputs, .n_inputs = 3,                \
        .generation = true, .describe = blk_lm_describe,                                   \
    }

/* The model_arch of a vision-language architecture exported text-only as the decoder family
 * of the standard shape its language model is, whose tensors the checkpoint names as one of
 * `layouts` (an array) says. */
#define BLK_LM_TEXT_ARCH(arch, type, read_fn, layouts)                                     \
    {                                                                                      \
        .architecture = (arch), .model_type = (type), .kind = MODEL_CAUSAL_LM,             \
        .output_class = MODEL_CAUSAL_LM_OUTPUT, .read = (read_fn),                         \
        .free_hparams = blk_lm_destroy, .bind = blk_lm_bind, .plan = gen_decoder_plan,     \
        .build = blk_lm_build_hook, .inputs = blk_lm_inputs, .n_inputs = 3,                \
        .generation = true, .describe = blk_lm_describe, .text_layouts = (layouts),        \
        .n_text_layouts = sizeof(layouts) / sizeof(layouts)[0],                            \
    }

/* Defines `var`, the model_arch of a decoder family of the standard shape whose blk_family is
 * `family`, with its config reader. */
#define BLK_LM_DEFINE(var, arch, type, family)                                             \
    static ferry_status var##_read(const model_config *cfg, void **out, fy_err *err)     \
    {                                                                                      \
        return blk_lm_read(cfg, &(family), out, err);                                      \
    }                                                                                      \
    const model_arch var = BLK_LM_ARCH(arch, type, var##_read)

/* ... of a mixture-of-experts family (its forward returns MoeCausalLMOutputWithPast). */
#define BLK_MOE_LM_DEFINE(var, arch, type, family)                                         \
    static ferry_status var##_read(const model_config *cfg, void **out, fy_err *err)     \
    {                                                                                      \
        return blk_lm_read(cfg, &(family), out, err);                                      \
    }                                                                                      \
    const model_arch var = BLK_LM_ARCH_OUT(arch, type, var##_read, MODEL_MOE_CAUSAL_LM_OUTPUT)

/* Refuses use_bidirectional_attention true (Gemma's key): ferry exports a causal decoder. */
ferry_status blk_refuse_bidirectional(const model_config *cfg, fy_err *err);

/* Llama's bias keys, a quirk other families share: "attention_bias" on q/k/v/o, "mlp_bias"
 * on the MLP. */
void blk_llama_biases(const lm_config *c, blk_lm *lm);

/* model_arch hooks for a family of the standard shape: read = lm_config + blk_lm_from_config,
 * then the family's quirks set what it adds (biases, q/k norm, windows on every layer) and its
 * read_extra reads its own keys. */
ferry_status blk_lm_read(const model_config *cfg, const blk_family *family, void **out,
                         fy_err *err);
void blk_lm_destroy(void *lm);
/* model_arch.describe of every blk_lm family. */
void blk_lm_describe(const void *lm, model_hparams *out);
/* Settles lm->tie_embeddings against the checkpoint as transformers 5.x does when it loads one
 * (PreTrainedModel.tie_weights during from_pretrained):
 *   tie_word_embeddings true: the head absent -> tie to the embedding; the embedding absent but
 *     the head present -> tie to the head; both stored with the same dtype, shape and bytes ->
 *     tie (the stored head is consumed by the tie); both stored but not byte-identical -> no
 *     tie, both used, and `warning` says so (transformers warns alike).
 *   tie_word_embeddings false or absent: no tie; a missing head is an error (transformers would
 *     initialise it at random).
 * The comparison reads both tensors in 1 MiB chunks. */
ferry_status blk_lm_bind(void *lm, const ckpt *ck, char *warning, size_t size, fy_err *err);
ferry_status blk_lm_build_hook(const void *lm, ckpt *ck, const model_io *io, g_graph *g,
                               fy_err *err);

/* blk_weight's required [d0, d1] weight, its value named by `value_fmt` (the parameter's name
 * in transformers' module where it differs from the checkpoint's). */
int blk_weight_named(g_graph *g, ckpt *ck, const char *fmt, const char *value_fmt, int layer,
                     int64_t d0, int64_t d1, ferry_dtype dtype, fy_err *err);
/* The checkpoint tensor `name` (printf format with the layer, if any) as a graph weight in
 * `dtype`, after checking it is [d0] (d1 == 0) or [d0, d1]. Absent and not required: G_NONE
 * with no error. */
int blk_weight(g_graph *g, ckpt *ck, const char *fmt, int layer, bool required, int64_t d0,
               int64_t d1, ferry_dtype dtype, fy_err *err);
/* The required convolution kernel `name` of shape `dims` ([out, in, k...], `rank` of them) as
 * the matrix [out, in * k...] a patch embedding multiplies patches by (each patch's values in
 * the kernel's order), in `dtype`. */
int blk_kernel_matrix(g_graph *g, ckpt *ck, const char *name, int rank, const int64_t *dims,
                      ferry_dtype dtype, fy_err *err);

/* The required tensor `name` of shape `dims` (`rank` of them) as it is (a convolution's
 * kernel [out, in, k...]), in `dtype`. */
int blk_tensor(g_graph *g, ckpt *ck, const char *name, int rank, const int64_t *dims,
               ferry_dtype dtype, fy_err *err);

/* The same for a weight stored [in, out] (transformers' Conv1D, GPT-2's): checked as [in, out],
 * read as the [out, in] matrix a linear multiplies by. */
int blk_conv1d_weight(g_graph *g, ckpt *ck, const char *fmt, int layer, int64_t in, int64_t out,
                      ferry_dtype dtype, fy_err *err);

/* The standard inputs of a decoder LM (input_ids, attention_mask, position_ids). */
extern const model_input blk_lm_inputs[3];

#endif
