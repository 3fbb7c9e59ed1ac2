/* describe_transformers.c — `ferry inspect` of an export transformers' exporters wrote (its
 * schema: each component's ExportMetadata, traced kwargs and out_spec). */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>

#include "export/describe.h"

/* "name version, name version, ..." of transformers' metadata.packages. */
static void print_packages(strbuf *b, const cJSON *md)
{
    const cJSON *p, *pk = cJSON_GetObjectItemCaseSensitive(md, "packages");
    if (!pk || !pk->child)
        return;
    sb_printf(b, "  packages:");
    cJSON_ArrayForEach(p, pk)
        sb_printf(b, "%s %s %s", p == pk->child ? "" : ",", desc_quote(p->string),
                  desc_quote(cJSON_IsString(p) ? p->valuestring : "?"));
    sb_printf(b, "\n");
}

/* What a transformers runner returns: out_spec's root type and, for a ModelOutput or a dict, its
 * keys (the context, JSON text), then how many leaves are tensors (not out_constants). The
 * spec was checked when loaded. */
static void print_out_spec(strbuf *b, const cJSON *md)
{
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(md, "out_spec");
    cJSON *spec = cJSON_IsString(text) ? cJSON_Parse(text->valuestring) : NULL;
    const cJSON *root = cJSON_GetArrayItem(spec, 1);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "type");
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(root, "context");
    cJSON *keys = cJSON_IsString(ctx) ? cJSON_Parse(ctx->valuestring) : NULL;
    sb_printf(b, "  returns: %s", cJSON_IsString(type) ? desc_quote(type->valuestring)
                            : cJSON_IsObject(root) ? "a tensor" : "(no out_spec)");
    if (cJSON_IsArray(keys) && keys->child) {
        const cJSON *k;
        sb_printf(b, " (");
        cJSON_ArrayForEach(k, keys)
            sb_printf(b, "%s%s", k == keys->child ? "" : ", ",
                      desc_quote(cJSON_IsString(k) ? k->valuestring : "?"));
        sb_printf(b, ")");
    }
    sb_printf(b, "\n");
    cJSON_Delete(keys);
    cJSON_Delete(spec);
}

/* transformers' traced kwargs: a tensor's dtype and traced shape, a mapping's leaves, or the
 * type of anything else (a cache object). */
static void print_kwargs(strbuf *b, const cJSON *kwargs, int depth)
{
    const cJSON *k;
    cJSON_ArrayForEach(k, kwargs) {
        const cJSON *leaves = cJSON_GetObjectItemCaseSensitive(k, "leaves");
        const cJSON *container = cJSON_GetObjectItemCaseSensitive(k, "container");
        char traced[256] = "[]";
        sb_printf(b, "    %*s%-20s ", 2 * depth, "", desc_quote(k->string));
        if (cJSON_IsObject(leaves)) {
            sb_printf(b, "(mapping)\n");
            if (depth < 4)
                print_kwargs(b, leaves, depth + 1);
        } else if (cJSON_IsString(container)) {
            sb_printf(b, "(%s)\n", desc_quote(container->valuestring));
        } else {
            desc_print_dims(cJSON_GetObjectItemCaseSensitive(k, "shape"), traced, sizeof traced);
            sb_printf(b, "%-9s traced %s\n", desc_qstr(k, "dtype"), desc_quote(traced));
        }
    }
}

/* An export transformers' ExportedModel.save_pretrained wrote: its schema has no producer,
 * roles, data files or symbolic shapes, but each component's ExportMetadata. */
void desc_inspect_transformers(strbuf *b, const ferry_exported *e, const cJSON *m)
{
    const cJSON *comps = cJSON_GetObjectItemCaseSensitive(m, "components"), *c;
    const cJSON *first_md = cJSON_GetObjectItemCaseSensitive(comps ? comps->child : NULL,
                                                             "metadata");
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(first_md, "packages"), "transformers");
    sb_printf(b, "export %s\n  format %s, producer transformers %s, architecture %s\n"
              "  schema: transformers' (ExportedModel.save_pretrained; its from_pretrained loads "
              "it)\n", desc_quote(ferry_exported_dir(e)), desc_qstr(m, "export_format"),
              desc_quote(cJSON_IsString(version) ? version->valuestring : "?"),
              desc_qstr(first_md, "architecture"));
    int i = 0;
    cJSON_ArrayForEach(c, comps) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(c, "metadata");
        sb_printf(b, "\ncomponent %s (precision %s, traced on %s)\n  files:\n",
                  desc_quote(c->string), desc_qstr(md, "export_dtype"),
                  desc_qstr(md, "export_device"));
        desc_print_size(b, ferry_exported_dir(e), ferry_exported_component_file(e, i));
        if (ferry_exported_component_data_file(e, i))
            desc_print_size(b, ferry_exported_dir(e), ferry_exported_component_data_file(e, i));
        sb_printf(b, "  inputs (the call's keyword arguments, as traced):\n");
        print_kwargs(b, cJSON_GetObjectItemCaseSensitive(md, "kwargs"), 0);
        print_out_spec(b, md);
        print_packages(b, md);
        i++;
    }
}
