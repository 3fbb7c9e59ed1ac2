/* describe.c — ferry_exported_describe: what an export holds, as `ferry inspect` prints it,
 * read from its validated export.json (through the library's own reader) and the sizes of its
 * files: the export's summary and each component (describe_listing.c lists their tensors,
 * describe_transformers.c describes transformers' own exports). Every string from export.json,
 * and the directory, goes through desc_quote (describe_text.c). */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/describe.h"

/* Whether some component's metadata (kwargs, the inputs transformers' runner passes) names
 * position_ids, which transformers' own exports compute inside and its callers do not pass. */
static bool takes_positions(const cJSON *m)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "components")) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(c, "metadata");
        if (cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(md, "kwargs"),
                                             "position_ids"))
            return true;
    }
    return false;
}

/* A component reads its table with the runtime's quantized kernels (embedding_4bit), which
 * register only when executorch.kernels.quantized is imported */
static bool needs_quantized_kernels(const cJSON *m)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "components")) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(c, "metadata"), "int4_embeddings");
        if (cJSON_IsNumber(n) && n->valueint > 0)
            return true;
    }
    return false;
}

/* Whether the export was asked for a vision-language checkpoint's language model alone (its
 * components' recipe says text_only). */
static bool text_only(const cJSON *m)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "components")) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(c, "metadata");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(md, "export_config"), "text_only")))
            return true;
    }
    return false;
}

static void describe(strbuf *b, const ferry_exported *e, bool brief)
{
    cJSON *m = cJSON_Parse(ferry_exported_manifest(e));
    if (!m) { /* it parsed when loaded: only memory can fail here */
        sb_puts(b, "(out of memory)\n");
        return;
    }
    if (!cJSON_GetObjectItemCaseSensitive(m, "format")) { /* transformers' schema */
        desc_inspect_transformers(b, e, m);
        cJSON_Delete(m);
        return;
    }
    const cJSON *prod = cJSON_GetObjectItemCaseSensitive(m, "producer");
    sb_printf(b, "export %s\n  format %s, producer %s %s, architecture %s\n",
              desc_quote(ferry_exported_dir(e)),
              desc_qstr(m, "format"), desc_qstr(prod, "name"), desc_qstr(prod, "version"),
              desc_qstr(m, "architecture"));
    if (text_only(m))
        sb_puts(b, "  text-only: the checkpoint's language model alone (its vision tower is not "
                   "in this export)\n");
    const cJSON *gen = cJSON_GetObjectItemCaseSensitive(m, "generation");
    /* a stateful export says so in its components' metadata; an explicit cache does not */
    bool stateful = false, vision = false, speech = false;
    const cJSON *comp;
    cJSON_ArrayForEach(comp, cJSON_GetObjectItemCaseSensitive(m, "components")) {
        stateful |= cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(comp, "metadata"), "stateful"));
        vision |= strcmp(comp->string, "vision_embeddings_model") == 0;
        speech |= strcmp(comp->string, "encoder_model") == 0;
    }
    /* openvino-genai's pipelines read the converted tokenizer beside the model */
    int converted = 0;
    const cJSON *name;
    cJSON_ArrayForEach(name, cJSON_GetObjectItemCaseSensitive(m, "tokenizer_files"))
        converted += cJSON_IsString(name) &&
                     (!strcmp(name->valuestring, "openvino_tokenizer.xml") ||
                      !strcmp(name->valuestring, "openvino_detokenizer.xml"));
    const char *ready = converted == 2 ? "with the converted tokenizer it carries"
                                       : "once openvino-tokenizers has converted its tokenizer";
    if (cJSON_IsObject(gen))
        sb_printf(b, "  generation: %s cache%s, %s%s%s\n", desc_qstr(gen, "cache_implementation"),
                  cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(gen, "multi_token_decode"))
                   ? ", multi-token decode" : "",
                  !stateful ? "components are run by the caller's loop"
                  : vision ? "a stateful language model beside the tower's and the text "
                             "embedding's graphs (openvino-genai's VLMPipeline runs this "
                             "directory "
                  : speech ? "a stateful decoder beside the encoder's graph (openvino-genai's "
                             "WhisperPipeline runs this directory "
                           : "one stateful graph (openvino-genai's LLMPipeline runs this "
                             "directory ",
                  stateful ? ready : "", stateful ? ")" : "");
    const cJSON *og = cJSON_GetObjectItemCaseSensitive(m, "onnxruntime_genai");
    if (cJSON_IsObject(og)) {
        const cJSON *cf = cJSON_GetObjectItemCaseSensitive(og, "config");
        const cJSON *tf = cJSON_GetObjectItemCaseSensitive(m, "tokenizer_files");
        /* og.Tokenizer reads tokenizer.json and tokenizer_config.json; a checkpoint's other
         * files (preprocessor_config.json) do not stand in for them */
        int found = 0;
        const cJSON *f;
        cJSON_ArrayForEach(f, tf)
            found += cJSON_IsString(f) && (strcmp(f->valuestring, "tokenizer.json") == 0 ||
                                           strcmp(f->valuestring, "tokenizer_config.json") == 0);
        if (cJSON_IsString(cf))
            sb_printf(b, "  onnxruntime-genai: runs this directory as it is (%s)%s\n",
                      desc_quote(cf->valuestring),
                      cJSON_IsArray(tf) && found < 2
                       ? "; og.Tokenizer needs tokenizer.json and tokenizer_config.json, which "
                         "it does not carry" : "");
        else
            sb_printf(b, "  onnxruntime-genai: cannot run it: %s\n", desc_qstr(og, "unsupported"));
    }
    const cJSON *tf = cJSON_GetObjectItemCaseSensitive(m, "transformers");
    const cJSON *tf_fmt = cJSON_GetObjectItemCaseSensitive(m, "export_format");
    if (tf_fmt)
        sb_printf(b, "  transformers: ExportedModel.from_pretrained loads it%s and runs each "
                  "component, given every input it takes%s\n",
                  cJSON_IsString(tf_fmt) && !strcmp(tf_fmt->valuestring, "dynamo")
                   ? " (with trust_remote_code=True: it gates every pickled torch program)"
                   : cJSON_IsString(tf_fmt) && !strcmp(tf_fmt->valuestring, "executorch") &&
                           needs_quantized_kernels(m)
                   ? " (where torchao is installed: transformers' ExecuTorch support imports it; "
                     "and after `import executorch.kernels.quantized`, which its loader does "
                     "not do)"
                   : cJSON_IsString(tf_fmt) && !strcmp(tf_fmt->valuestring, "executorch")
                   ? " (where torchao is installed: transformers' ExecuTorch support imports it)"
                   : "",
                  takes_positions(m) ? " (position_ids too: transformers derives none)" : "");
    else if (cJSON_IsObject(tf))
        sb_printf(b, "  transformers: ExportedModel.from_pretrained cannot run it: %s\n",
                  desc_qstr(tf, "unsupported"));
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(m, "tokenizer_files"), *t;
    if (cJSON_IsArray(tok)) { /* exports made before ferry carried them have no such key */
        sb_printf(b, "  tokenizer files:");
        cJSON_ArrayForEach(t, tok)
            sb_printf(b, "%s %s", t == tok->child ? "" : ",", desc_quote(t->valuestring));
        sb_printf(b, "%s\n",
                  tok->child ? "" : " none (the checkpoint had none, or --no-tokenizer)");
    }
    const cJSON *comps = cJSON_GetObjectItemCaseSensitive(m, "components"), *c;
    cJSON_ArrayForEach(c, comps) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(c, "metadata");
        const cJSON *opset = cJSON_GetObjectItemCaseSensitive(md, "opset");
        char num[32], opset_text[48] = "";
        if (opset) /* a format's own metadata: ONNX's opset */
            snprintf(opset_text, sizeof opset_text, ", opset %s",
                     desc_int_text(opset, num, sizeof num));
        /* what the recipe changed about the weights and ops (export_config, as recorded) */
        const cJSON *ec = cJSON_GetObjectItemCaseSensitive(md, "export_config");
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(ec, "quantizer");
        const cJSON *fu = cJSON_GetObjectItemCaseSensitive(ec, "ort_fusions");
        char quant_text[192] = "", bits[32], block[32];
        bool half = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ec, "compress_to_fp16"));
        if (half && !cJSON_IsObject(q))
            snprintf(quant_text, sizeof quant_text, ", weights stored fp16 (compress_to_fp16)");
        else if (cJSON_IsObject(q))
            snprintf(quant_text, sizeof quant_text, ", weights int%s in blocks of %s (%s%s%s%s)",
                     desc_int_text(cJSON_GetObjectItemCaseSensitive(q, "bits"), bits, sizeof bits),
                     desc_int_text(cJSON_GetObjectItemCaseSensitive(q, "block_size"), block,
                              sizeof block),
                     cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(q, "symmetric"))
                         ? "asymmetric" : "symmetric",
                     cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(q, "quantize_embeddings"))
                         ? ", embeddings too" : "",
                     cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(q, "quantize_lm_head"))
                         ? ", lm_head float" : "",
                     cJSON_IsString(cJSON_GetObjectItemCaseSensitive(q, "method")) &&
                             !strcmp(cJSON_GetObjectItemCaseSensitive(q, "method")->valuestring,
                                     "mse")
                         ? ", mse-searched scales" : "");
        if (half && cJSON_IsObject(q)) /* the float weights that are not quantized */
            snprintf(quant_text + strlen(quant_text), sizeof quant_text - strlen(quant_text),
                     ", other weights stored fp16");
        sb_printf(b, "\ncomponent %s (role %s, precision %s%s%s%s%s)\n  files:\n",
                  desc_quote(c->string), desc_qstr(c, "role"), desc_qstr(md, "precision"),
                  opset_text, quant_text,
                  cJSON_IsString(fu) ? ", fused for onnxruntime " : "",
                  cJSON_IsString(fu) ? desc_qstr(ec, "ort_fusions") : "");
        desc_print_size(b, ferry_exported_dir(e), desc_str(c, "file"));
        const cJSON *df;
        cJSON_ArrayForEach(df, cJSON_GetObjectItemCaseSensitive(c, "data_files"))
            if (cJSON_IsString(df))
                desc_print_size(b, ferry_exported_dir(e), df->valuestring);
        desc_print_io(b, "inputs", cJSON_GetObjectItemCaseSensitive(md, "inputs"), brief);
        desc_print_io(b, "outputs", cJSON_GetObjectItemCaseSensitive(md, "outputs"), brief);
        desc_print_cache(b, cJSON_GetObjectItemCaseSensitive(md, "cache"),
                    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(md, "stateful")), brief);
        const cJSON *ro = cJSON_GetObjectItemCaseSensitive(md, "runtime_options"), *opt;
        if (cJSON_IsObject(ro) && cJSON_GetArraySize(ro) > 0) {
            /* OpenVINO 2026.4 applies KV_CACHE_PRECISION from rt_info, not the inference
             * precision (docs/design.md): a caller of another runner must pass it */
            sb_printf(b, "  runtime options (in rt_info; ferry's runner compiles with them, other "
                      "callers pass INFERENCE_PRECISION_HINT themselves):\n");
            cJSON_ArrayForEach(opt, ro)
                if (cJSON_IsString(opt))
                    sb_printf(b, "    %-24s %s\n", desc_quote(opt->string),
                              desc_quote(opt->valuestring));
        }
        const cJSON *planned = cJSON_GetObjectItemCaseSensitive(md, "planned_memory_bytes");
        if (cJSON_IsNumber(planned)) {
            /* an ExecuTorch program: what its method asks of the runtime */
            char bytes[32], instrs[32], consts[32];
            int n_ops = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(md, "operators"));
            const cJSON *nd = cJSON_GetObjectItemCaseSensitive(md, "delegates");
            int n_delegates = cJSON_IsNumber(nd) ? nd->valueint : 0;
            sb_printf(b, "  ExecuTorch program: method %s, %s instructions over %d kernels "
                      "(backend %s, %d delegate calls), %s constants; memory plan %s bytes (every "
                      "tensor at its largest size); load it with executorch.runtime's "
                      "Runtime.get().load_program(file)\n", desc_qstr(md, "method"),
                      desc_int_text(cJSON_GetObjectItemCaseSensitive(md, "instructions"), instrs,
                               sizeof instrs),
                      n_ops, desc_qstr(ec, "backend"), n_delegates,
                      desc_int_text(cJSON_GetObjectItemCaseSensitive(md, "constants"), consts,
                               sizeof consts),
                      desc_int_text(planned, bytes, sizeof bytes));
            const cJSON *lin = cJSON_GetObjectItemCaseSensitive(md, "delegated_linears");
            if (cJSON_IsNumber(lin)) {
                char n_lin[32], n_nodes[32], wbytes[32];
                sb_printf(b, "  %s: %d graphs of %s nodes in all (%s of them linears; norms, "
                          "elementwise arithmetic and softmax run there too); %s bytes of their "
                          "weights as named data (XNNPACK packs them when the method loads)\n",
                          desc_qstr(md, "delegate_backend"), n_delegates,
                          desc_int_text(cJSON_GetObjectItemCaseSensitive(md, "delegate_nodes"),
                                   n_nodes, sizeof n_nodes),
                          desc_int_text(lin, n_lin, sizeof n_lin),
                          desc_int_text(cJSON_GetObjectItemCaseSensitive(md,
                                                                    "delegate_weight_bytes"),
                                   wbytes, sizeof wbytes));
            }
            const cJSON *tables = cJSON_GetObjectItemCaseSensitive(md, "int4_embeddings");
            if (cJSON_IsNumber(tables) && tables->valueint > 0)
                sb_printf(b, "  embedding table: int4 blocks read by "
                          "quantized_decomposed::embedding_4bit, one of the runtime's quantized "
                          "kernels (Python: import executorch.kernels.quantized; C++: link "
                          "libexecutorch_kernels_quantized)\n");
        }
        const cJSON *tsyms = cJSON_GetObjectItemCaseSensitive(md, "torch_symbols");
        if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(md, "verifier"))) {
            char params[32], shared[300] = "";
            bool model_output = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ec, "model_output"));
            /* the class's own name (absent: a causal LM's), and the outputs as its fields */
            const char *cls = cJSON_GetStringValue(
                cJSON_GetObjectItemCaseSensitive(md, "output_class"));
            cls = cls && strrchr(cls, '.') ? strrchr(cls, '.') + 1 : "CausalLMOutputWithPast";
            char fields[256] = "";
            size_t flen = 0;
            const cJSON *out;
            cJSON_ArrayForEach(out, cJSON_GetObjectItemCaseSensitive(md, "outputs")) {
                const char *oname = cJSON_GetStringValue(
                    cJSON_GetObjectItemCaseSensitive(out, "name"));
                if (oname && flen < sizeof fields)
                    flen += (size_t)snprintf(fields + flen, sizeof fields - flen,
                                             model_output ? "%s.%s" : "%s\"%s\": ...",
                                             flen ? ", " : "", oname);
            }
            if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(md, "lm_head_shares")))
                snprintf(shared, sizeof shared, " (lm_head.weight over %s's storage, stored "
                         "once)", desc_qstr(md, "lm_head_shares"));
            sb_printf(b, "  torch.export program: schema %s, %s IR, %s parameters%s; call "
                      "torch.export.load(file).module() with the inputs as keywords, it returns "
                      "%s%s%s%s%s\n", desc_qstr(md, "schema_version"), desc_qstr(md, "verifier"),
                      desc_int_text(cJSON_GetObjectItemCaseSensitive(md, "parameters"), params,
                            sizeof params), shared,
                      model_output ? "transformers' " : "{", model_output ? cls : "",
                      model_output ? " (" : "", desc_quote(fields),
                      model_output ? "; import transformers.modeling_outputs before loading it)"
                                : "}");
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(md, "example_inputs")))
                sb_printf(b, "  example inputs: in the archive (program.example_inputs), so "
                          "AOTInductor compiles the program as loaded\n");
            else if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(md, "no_example_inputs")))
                sb_printf(b, "  example inputs: none (%s): set program.example_inputs before "
                          "AOTInductor compiles it\n", desc_qstr(md, "no_example_inputs"));
        }
        const cJSON *syms = cJSON_GetObjectItemCaseSensitive(md, "symbols"), *s;
        if (cJSON_IsObject(syms) && cJSON_GetArraySize(syms) > 0) {
            sb_printf(b, "  symbols:\n");
            cJSON_ArrayForEach(s, syms) {
                const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "min");
                const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "max");
                const cJSON *tr = cJSON_GetObjectItemCaseSensitive(s, "traced");
                const cJSON *ts = cJSON_GetObjectItemCaseSensitive(tsyms, s->string);
                char mins[32], maxs[32], trs[32];
                sb_printf(b, "    %-20s min %s, max %s, traced %s%s%s\n", desc_quote(s->string),
                          desc_int_text(mn, mins, sizeof mins),
                          cJSON_IsNumber(mx) ? desc_int_text(mx, maxs, sizeof maxs) : "unbounded",
                          desc_int_text(tr, trs, sizeof trs), cJSON_IsString(ts) ? ", torch " : "",
                          cJSON_IsString(ts) ? desc_quote(ts->valuestring) : "");
            }
        }
    }
    cJSON_Delete(m);
}

static const char *describe_into(ferry_exported *e, bool brief)
{
    if (!e || !e->manifest_text)
        return NULL;
    strbuf b = {0};
    describe(&b, e, brief);
    free(e->description);
    e->description = sb_take(&b);
    return e->description;
}

const char *ferry_exported_describe(ferry_exported *e)
{
    return describe_into(e, false);
}

const char *ferry_exported_describe_brief(ferry_exported *e)
{
    return describe_into(e, true);
}
