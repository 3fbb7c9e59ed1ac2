/* model.c — ferry_model: a checkpoint opened for export (config parsed, safetensors headers
 * indexed, weights left on disk). */
#include <stdlib.h>
#include <string.h>

#include "export/internal.h"
#include "model/hub.h"
#include "model/safetensors.h"
#include "util/text.h"

ferry_status ferry_model_open(const char *path_or_id, const char *revision, ferry_model **out)
{
    ferry_model *m = calloc(1, sizeof *m);
    *out = m;
    if (!m)
        return FERRY_ERR_NOMEM;
    if (!path_or_id || !*path_or_id)
        return fy_fail(&m->err, FERRY_ERR_INVALID_ARG, "no model path or hub id given");
    if (hub_resolve(path_or_id, revision, m->dir, sizeof m->dir, &m->err) != FERRY_OK)
        return m->err.status;
    m->source = strdup(path_or_id);
    m->revision = revision ? strdup(revision) : NULL;
    if (!m->source || (revision && !m->revision))
        return fy_fail(&m->err, FERRY_ERR_NOMEM, "out of memory");
    if (ckpt_check_weights_format(m->dir, &m->err) != FERRY_OK ||
        cfg_load(m->dir, &m->cfg, &m->err) != FERRY_OK)
        return m->err.status;
    m->cfg_loaded = true;
    m->arch = model_find(m->cfg.architecture);
    if (!m->arch) {
        char qarch[TEXT_QUOTE_MAX];
        return fy_fail(&m->err, FERRY_ERR_UNSUPPORTED,
                       "%s/config.json: architecture '%s' is not supported (supported: %s)",
                       m->dir, text_quote(m->cfg.architecture, qarch, sizeof qarch),
                       model_supported_list());
    }
    if (m->arch->read(&m->cfg, &m->hparams, &m->err) != FERRY_OK)
        return m->err.status;
    if (ckpt_open(m->dir, &m->ck, &m->err) != FERRY_OK)
        return m->err.status;
    if (m->arch->text_layouts)
        ckpt_use_layout(m->ck, m->arch->text_layouts, m->arch->n_text_layouts);
    else if (m->arch->layouts)
        ckpt_use_layout(m->ck, m->arch->layouts, m->arch->n_layouts);
    /* What depends on the checkpoint's contents, not only its config (tying). */
    if (m->arch->bind &&
        m->arch->bind(m->hparams, m->ck, m->warning, sizeof m->warning, &m->err) != FERRY_OK)
        return m->err.status;
    return FERRY_OK;
}

void ferry_model_free(ferry_model *m)
{
    if (!m)
        return;
    if (m->arch && m->hparams)
        m->arch->free_hparams(m->hparams);
    if (m->cfg_loaded)
        cfg_free(&m->cfg);
    ckpt_close(m->ck);
    free(m->source);
    free(m->revision);
    free(m);
}

const char *ferry_model_errmsg(const ferry_model *m)
{
    if (!m)
        return "out of memory";
    return m->err.status == FERRY_OK ? "" : m->err.msg;
}

const char *ferry_model_architecture(const ferry_model *m)
{
    return m && m->cfg_loaded ? m->cfg.architecture : "";
}

unsigned ferry_model_inputs(const ferry_model *m)
{
    unsigned bits = 0;
    for (int i = 0; m && m->arch && i < m->arch->n_inputs; i++)
        bits |= exp_input_bit(m->arch->inputs[i].name);
    return bits;
}

const char *ferry_model_dir(const ferry_model *m)
{
    return m ? m->dir : "";
}

const char *ferry_supported_architectures(void)
{
    return model_supported_list();
}
