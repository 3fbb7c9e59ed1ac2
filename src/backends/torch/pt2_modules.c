/* pt2_modules.c — where each node of the program came from, as torch.export records it: the
 * node's nn_module_stack (its transformers modules, outermost first, each as
 * "L__self__<fqn>,<fqn>,<class>", joined by ";") and, in the module call graph, an entry for
 * every module. torch.export.unflatten rebuilds the module tree from them, and passes that pick
 * nodes by module name or class (torch.nn.modules.linear.Linear) read them.
 *
 * The modules are read off the IR node's name, which the model builders scope by module path
 * ("/model/layers.0/self_attn/q_proj"; a lowered node adds its own segments,
 * ".../input_layernorm/Square"): the longest prefix of segments that are transformers module
 * names. A leaf module (a Linear, the Embedding, the activation) holds only its own op; any
 * other op named under it ("q_proj/Reshape") is its parent's, as in transformers' forward.
 * One difference remains: the residual add that a norm fused with it carries is placed in the
 * norm's module, where transformers has it in the decoder layer.
 *
 * unflatten needs each module's nodes to be contiguous; the rotary tables and the mask, which
 * lowering makes where a layer first reads them, are hoisted before the layers
 * (pt2_print.c, with pt_module_in_layer). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/torch/pt2_printer.h"
#include "util/grow.h"

#define MAX_DEPTH 8
#define FQN_MAX 512

typedef enum {
    MOD_NONE, MOD_MODEL, MOD_LAYER, MOD_ATTENTION, MOD_MLP, MOD_LINEAR, MOD_EMBEDDING,
    MOD_NORM, MOD_ACT, MOD_ROTARY
} mod_kind;

static bool ends_with(const char *s, size_t len, const char *tail)
{
    size_t n = strlen(tail);
    return len >= n && memcmp(s + len - n, tail, n) == 0;
}

static bool is(const char *s, size_t len, const char *word)
{
    return len == strlen(word) && memcmp(s, word, len) == 0;
}

/* transformers' attribute names for the modules of the decoders ferry builds */
static mod_kind segment_kind(const char *s, size_t len, int depth)
{
    if (depth == 0 && is(s, len, "model"))
        return MOD_MODEL;
    if (len > 7 && memcmp(s, "layers.", 7) == 0 && strspn(s + 7, "0123456789") == len - 7)
        return MOD_LAYER;
    if (is(s, len, "self_attn"))
        return MOD_ATTENTION;
    if (is(s, len, "mlp"))
        return MOD_MLP;
    if (is(s, len, "lm_head") || (len > 5 && ends_with(s, len, "_proj")))
        return MOD_LINEAR;
    if (is(s, len, "embed_tokens"))
        return MOD_EMBEDDING;
    if (is(s, len, "norm") || is(s, len, "q_norm") || is(s, len, "k_norm") ||
        ends_with(s, len, "layernorm"))
        return MOD_NORM;
    if (is(s, len, "act_fn"))
        return MOD_ACT;
    if (is(s, len, "rotary_emb"))
        return MOD_ROTARY;
    return MOD_NONE;
}

/* Whether aten op `target` is the whole of leaf module `kind`'s forward (an embedding that
 * scales its output holds the scaling too). */
static bool own_op(const be_module_classes *c, mod_kind kind, const char *target)
{
    switch (kind) {
    case MOD_LINEAR: return !strcmp(target, "torch.ops.aten.linear.default");
    case MOD_EMBEDDING:
        return c->scaled_embedding || !strcmp(target, "torch.ops.aten.embedding.default");
    case MOD_ACT:
        return !strncmp(target, "torch.ops.aten.silu.", 20) ||
               !strncmp(target, "torch.ops.aten.gelu.", 20);
    default: return true;
    }
}

static void class_name(const be_module_classes *c, mod_kind kind, char *out, size_t size)
{
    static const char *const suffix[] = {
        [MOD_MODEL] = "Model", [MOD_LAYER] = "DecoderLayer", [MOD_ATTENTION] = "Attention",
        [MOD_MLP] = "MLP", [MOD_NORM] = "RMSNorm", [MOD_ROTARY] = "RotaryEmbedding",
    };
    switch (kind) {
    case MOD_LINEAR: snprintf(out, size, "torch.nn.modules.linear.Linear"); break;
    case MOD_EMBEDDING:
        if (c->scaled_embedding)
            snprintf(out, size, "%s.%s", c->module, c->scaled_embedding);
        else
            snprintf(out, size, "torch.nn.modules.sparse.Embedding");
        break;
    case MOD_ACT: snprintf(out, size, "%s", c->activation); break;
    default: snprintf(out, size, "%s.%s%s", c->module, c->prefix, suffix[kind]); break;
    }
}

/* Records module `fqn` for the call graph (once; "model.layers" before its first layer). */
static void note_module(pt_printer *p, const char *fqn, mod_kind kind)
{
    for (size_t i = p->n_modules; i-- > 0;)
        if (!strcmp(p->modules[i], fqn))
            return;
    if (kind == MOD_LAYER) {
        char list[FQN_MAX];
        snprintf(list, sizeof list, "%.*s", (int)(strrchr(fqn, '.') - fqn), fqn);
        note_module(p, list, MOD_NONE);
    }
    char **grown = fy_grow(p->modules, &p->cap_modules, p->n_modules + 1, sizeof *grown);
    char *copy = strdup(fqn);
    if (!grown || !copy) {
        free(copy);
        if (grown)
            p->modules = grown;
        pt_fail(p, FERRY_ERR_NOMEM, "out of memory");
        return;
    }
    p->modules = grown;
    p->modules[p->n_modules++] = copy;
}

/* The modules along IR node name `name` ("/model/layers.0/self_attn/..."), outermost first:
 * their kinds, and their paths fqn[0, ends[i]) ("model.layers.0"). Returns how many. */
static int modules_of(const char *name, const be_module_classes *c, mod_kind *kinds,
                      size_t *ends, char *fqn, size_t fqn_size)
{
    size_t len = 0;
    int depth = 0;
    if (!name || name[0] != '/')
        return 0;
    const char *s = name + 1;
    while (*s && depth < MAX_DEPTH) {
        size_t n = strcspn(s, "/");
        mod_kind k = segment_kind(s, n, depth);
        if (k == MOD_NONE || (k == MOD_ACT && !c->activation) || len + n + 2 > fqn_size)
            break;
        if (len)
            fqn[len++] = '.';
        memcpy(fqn + len, s, n);
        len += n;
        ends[depth] = len;
        kinds[depth++] = k;
        s += n + (s[n] == '/');
    }
    return depth;
}

void pt_module_metadata(pt_printer *p, const char *target, strbuf *b)
{
    const be_module_classes *c = p->classes;
    if (!c) {
        sb_puts(b, "{}");
        return;
    }
    size_t ends[MAX_DEPTH];
    mod_kind kinds[MAX_DEPTH];
    char fqn[FQN_MAX];
    int depth = modules_of(p->ir_name, c, kinds, ends, fqn, sizeof fqn);
    if (depth > 0 && !own_op(c, kinds[depth - 1], target))
        depth--;
    /* the innermost module's path names the whole stack: most nodes repeat the one before */
    size_t key_len = depth ? ends[depth - 1] : 0;
    if (p->stack_json && strlen(p->stack_key) == key_len &&
        !memcmp(p->stack_key, fqn, key_len)) {
        sb_puts(b, p->stack_json);
        return;
    }
    char cls[512], root[400];
    snprintf(root, sizeof root, "%s.%s", c->module, c->root);
    strbuf stack = {0};
    sb_printf(&stack, "L__self__,,%s", root);
    for (int i = 0; i < depth; i++) {
        fqn[ends[i]] = '\0';
        class_name(c, kinds[i], cls, sizeof cls);
        sb_printf(&stack, ";L__self__%s,%s,%s", fqn, fqn, cls);
        note_module(p, fqn, kinds[i]);
        if (i + 1 < depth)
            fqn[ends[i]] = '.';
    }
    strbuf json = {0};
    sb_puts(&json, "{\"nn_module_stack\": ");
    pt2_json_str(&json, stack.data ? stack.data : "");
    sb_puts(&json, "}");
    sb_free(&stack);
    free(p->stack_json);
    p->stack_json = NULL;
    if (stack.oom || json.oom || key_len >= sizeof p->stack_key) {
        sb_puts(b, json.data ? json.data : "{}");
        b->oom |= stack.oom || json.oom;
        sb_free(&json);
        return;
    }
    memcpy(p->stack_key, fqn, key_len);
    p->stack_key[key_len] = '\0';
    p->stack_json = sb_take(&json);
    sb_puts(b, p->stack_json ? p->stack_json : "{}");
}

bool pt_module_in_layer(const pt_printer *p, const char *ir_name)
{
    static const be_module_classes none = {.activation = NULL};
    size_t ends[MAX_DEPTH];
    mod_kind kinds[MAX_DEPTH];
    char fqn[FQN_MAX];
    int depth = modules_of(ir_name, p->classes ? p->classes : &none, kinds, ends, fqn,
                           sizeof fqn);
    for (int i = 0; i < depth; i++)
        if (kinds[i] == MOD_LAYER)
            return true;
    return false;
}

void pt_module_calls(const pt_printer *p, strbuf *b)
{
    for (size_t i = 0; i < p->n_modules; i++) {
        sb_puts(b, ", {\"fqn\": ");
        pt2_json_str(b, p->modules[i]);
        sb_puts(b, ", \"signature\": null}");
    }
}
