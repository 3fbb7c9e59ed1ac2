/* pt2_modules.c — where each node of the program came from, as torch.export records it: the
 * node's nn_module_stack (its transformers modules, outermost first, each as
 * "L__self__<fqn>,<fqn>,<class>", joined by ";") and, in the module call graph, an entry for
 * every module. torch.export.unflatten rebuilds the module tree from them, and passes that pick
 * nodes by module name or class (torch.nn.modules.linear.Linear) read them.
 *
 * The modules are the graph's module table, which the family declared while building
 * (g_module_add): a node is in every declared module whose scope its IR name lies under, by
 * the leaf rule (g_node_modules). Of the aten calls one IR node prints, only the call that is
 * the node itself is a leaf module's op; the SymInts and tensors made for its arguments are
 * its parent's, as torch traces them outside the leaf's forward. One difference remains: the
 * residual add that an RMSNorm fused with it carries is placed in the norm's module, where
 * transformers has it in the decoder layer.
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

/* Records module `m` for the call graph (once; a ModuleList before its first item). */
static void note_module(pt_printer *p, const char *fqn, bool list_item)
{
    for (size_t i = p->n_modules; i-- > 0;)
        if (!strcmp(p->modules[i], fqn))
            return;
    const char *dot = list_item ? strrchr(fqn, '.') : NULL;
    if (dot) {
        char list[512];
        snprintf(list, sizeof list, "%.*s", (int)(dot - fqn), fqn);
        note_module(p, list, false);
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

void pt_module_metadata(pt_printer *p, strbuf *b)
{
    const g_module *root = g_module_at(p->g, "", 0);
    if (!root) {
        sb_puts(b, "{}");
        return;
    }
    const g_module *stack[MAX_DEPTH];
    /* an argument's own node (depth > 1) is never a leaf module's op */
    g_op op = p->depth == 1 ? p->ir_op : G_OP_COUNT;
    int depth = g_node_modules(p->g, p->ir_name, op, stack, MAX_DEPTH);
    /* the innermost module names the whole stack: most nodes repeat the one before */
    const g_module *inner = depth ? stack[depth - 1] : root;
    if (p->stack_json && p->stack_module == inner) {
        sb_puts(b, p->stack_json);
        return;
    }
    strbuf stack_text = {0};
    sb_printf(&stack_text, "L__self__,,%s", root->cls);
    for (int i = 0; i < depth; i++) {
        sb_printf(&stack_text, ";L__self__%s,%s,%s", stack[i]->fqn, stack[i]->fqn,
                  stack[i]->cls);
        note_module(p, stack[i]->fqn, stack[i]->list_item);
    }
    strbuf json = {0};
    sb_puts(&json, "{\"nn_module_stack\": ");
    pt2_json_str(&json, stack_text.data ? stack_text.data : "");
    sb_puts(&json, "}");
    sb_free(&stack_text);
    free(p->stack_json);
    p->stack_json = NULL;
    p->stack_module = NULL;
    if (stack_text.oom || json.oom) {
        sb_puts(b, json.data ? json.data : "{}");
        b->oom = true;
        sb_free(&json);
        return;
    }
    p->stack_module = inner;
    p->stack_json = sb_take(&json);
    sb_puts(b, p->stack_json ? p->stack_json : "{}");
}

bool pt_module_in_layer(const pt_printer *p, const g_node *n)
{
    const g_module *stack[MAX_DEPTH];
    int depth = g_node_modules(p->g, n->name, n->op, stack, MAX_DEPTH);
    for (int i = 0; i < depth; i++)
        if (stack[i]->list_item)
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
