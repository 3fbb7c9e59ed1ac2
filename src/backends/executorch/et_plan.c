/* et_plan.c — ExecuTorch's memory plan, computed here: every planned tensor lives from the
 * first instruction that reads or writes it to the last (the program's inputs from the start,
 * its outputs to the end), sized at its bound; tensors are placed largest first (as exir's
 * greedy planner does), each at the lowest offset (ET_ALIGN-aligned) that no tensor alive with
 * it holds. The arena
 * (memory id 1) is what they span. The runtime checks only that a tensor ends inside the
 * arena (docs/pte-format.md §5): that no two live tensors overlap is this file's promise,
 * which the tests check by decoding the program. */
#include <stdlib.h>
#include <string.h>

#include "backends/executorch/executorch.h"
#include "util/dtype.h"

static void touch(et_program *p, int v, int at)
{
    et_value *x = &p->values[v];
    if (x->kind == ET_TENSOR) {
        if (x->first < 0 || at < x->first)
            x->first = at;
        if (at > x->last)
            x->last = at;
    } else if (x->kind == ET_TENSOR_LIST || x->kind == ET_OPT_TENSOR_LIST) {
        for (int i = 0; i < x->n_items; i++)
            if (x->items[i] >= 0)
                touch(p, x->items[i], at);
    }
}

/* The most memory a plan may ask for: no device has more, and a plan past it (a bound of
 * 2^31 tokens) would overflow its own arithmetic. */
#define ET_PLAN_MAX ((uint64_t)1 << 40)

/* bytes of `x` at its bounds; ET_PLAN_MAX + 1 for more than ET_PLAN_MAX */
static uint64_t tensor_bytes(const et_value *x)
{
    uint64_t numel = 1;
    for (int i = 0; i < x->rank; i++) {
        if (x->sizes[i] && numel > ET_PLAN_MAX / (uint64_t)x->sizes[i])
            return ET_PLAN_MAX + 1;
        numel *= (uint64_t)x->sizes[i];
    }
    uint64_t bytes = numel > ET_PLAN_MAX ? ET_PLAN_MAX + 1 : dt_nbytes(x->dtype, numel);
    return bytes > ET_PLAN_MAX ? ET_PLAN_MAX + 1 : bytes;
}

typedef struct placed {
    uint64_t start, end;     /* bytes */
    int first, last;         /* instructions */
} placed;

static uint64_t aligned_size(const et_value *x)
{
    uint64_t size = tensor_bytes(x);
    return size ? (size + ET_ALIGN - 1) / ET_ALIGN * ET_ALIGN : ET_ALIGN;
}

/* larger first; then the earlier first use; then the value's order */
static bool before(const et_program *p, int a, int b)
{
    uint64_t sa = aligned_size(&p->values[a]), sb = aligned_size(&p->values[b]);
    if (sa != sb)
        return sa > sb;
    if (p->values[a].first != p->values[b].first)
        return p->values[a].first < p->values[b].first;
    return a < b;
}

/* qsort_r is not C11: a merge sort by `before` */
static void sort_values(const et_program *p, int *idx, int *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    sort_values(p, idx, tmp, h);
    sort_values(p, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = !before(p, idx[j], idx[i]) ? idx[i++] : idx[j++];
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

ferry_status et_plan_memory(et_program *p, const et_plan_opts *opts)
{
    if (p->st != FERRY_OK)
        return p->st;
    int end = (int)p->n_instrs;
    for (size_t i = 0; i < p->n_inputs; i++) {
        et_value *x = &p->values[p->inputs[i]];
        x->first = 0;
        if (x->last < 0)
            x->last = 0;
        x->planned = x->state ? opts->alloc_mutable_buffers : opts->alloc_graph_input;
    }
    for (size_t i = 0; i < p->n_instrs; i++)
        for (int a = 0; a < p->instrs[i].n_args; a++)
            touch(p, p->instrs[i].args[a], (int)i);
    for (size_t i = 0; i < p->n_outputs; i++) {
        et_value *x = &p->values[p->outputs[i]];
        x->last = end;
        if (x->first < 0)
            x->first = 0;
        bool input = false; /* a cache input written in place: planned as an input */
        for (size_t k = 0; k < p->n_inputs && !input; k++)
            input = p->inputs[k] == p->outputs[i];
        if (!input)
            x->planned = opts->alloc_graph_output && x->planned;
    }
    size_t n = 0;
    int *order = malloc((p->n_values ? p->n_values : 1) * sizeof *order);
    int *tmp = malloc((p->n_values ? p->n_values : 1) * sizeof *tmp);
    placed *alive = malloc((p->n_values ? p->n_values : 1) * sizeof *alive);
    if (!order || !tmp || !alive) {
        free(order), free(tmp), free(alive);
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < p->n_values; i++) {
        et_value *x = &p->values[i];
        if (x->kind != ET_TENSOR || !x->planned || x->constant)
            continue;
        if (x->first < 0) /* made and never read nor written: no place */
            x->first = x->last = 0;
        order[n++] = (int)i;
    }
    sort_values(p, order, tmp, n);
    /* alive: the tensors placed so far that meet x's lifetime, by offset */
    size_t n_placed = 0;
    placed *all = malloc((n ? n : 1) * sizeof *all);
    if (!all) {
        free(order), free(tmp), free(alive);
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory");
    }
    uint64_t arena = 0;
    for (size_t i = 0; i < n; i++) {
        et_value *x = &p->values[order[i]];
        size_t n_alive = 0;
        for (size_t j = 0; j < n_placed; j++)
            if (all[j].first <= x->last && all[j].last >= x->first) {
                size_t k = n_alive++;
                for (; k > 0 && alive[k - 1].start > all[j].start; k--)
                    alive[k] = alive[k - 1];
                alive[k] = all[j];
            }
        uint64_t size = aligned_size(x), at = 0;
        if (size > ET_PLAN_MAX) {
            arena = size;
            break;
        }
        for (size_t k = 0; k < n_alive && alive[k].start < at + size; k++)
            if (alive[k].end > at)
                at = alive[k].end;
        if (at > ET_PLAN_MAX) {
            arena = at;
            break;
        }
        all[n_placed++] = (placed){at, at + size, x->first, x->last};
        x->offset = at;
        if (at + size > arena)
            arena = at + size;
    }
    free(all);
    free(order), free(tmp), free(alive);
    if (arena > ET_PLAN_MAX)
        return et_fail(p, FERRY_ERR_UNSUPPORTED, "the memory plan needs more than 1 TiB at the "
                       "dynamic axes' bounds (every tensor at its largest size): lower them "
                       "(max_seq_len, max_batch_size, or a --dim max)");
    p->arena = arena;
    return FERRY_OK;
}
