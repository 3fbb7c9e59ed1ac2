/* fuzz_config.c — libFuzzer target for the config.json readers (cfg_parse + lm_config_read),
 * followed by what an export does next with an accepted config: the family lookup, the
 * family's hyper-parameters (with its own checks) and the rotary inverse-frequency tables. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "ir/lower/rope_freq.h"
#include "models/blocks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    model_config mc;
    lm_config cfg;
    fy_err err = {0};
    if (lm_config_parse((const char *)data, size, "config.json", &mc, &cfg, &err) != FERRY_OK) {
        check(mc.raw == NULL && cfg.layer_types == NULL, "a failed parse frees everything");
        check_message(err.msg);
        return 0;
    }
    /* What lm_config.h promises about an accepted config. */
    check(cfg.num_hidden_layers >= 1 && cfg.num_hidden_layers <= 1024, "layers in range");
    check(cfg.hidden_size >= 1 && cfg.vocab_size >= 1 && cfg.intermediate_size >= 1, "sizes");
    check(cfg.num_attention_heads >= 1 && cfg.num_key_value_heads >= 1 &&
          cfg.num_attention_heads % cfg.num_key_value_heads == 0, "heads");
    check(cfg.head_dim >= 1 && cfg.head_dim <= 4096, "head_dim in range");

    const model_arch *arch = model_find(mc.architecture);
    if (arch) {
        void *hp = NULL;
        fy_err herr = {0};
        if (arch->read(&mc, &hp, &herr) == FERRY_OK) {
            const blk_lm *lm = hp;
            float *inv = malloc((size_t)(lm->head_dim / 2 + 1) * sizeof *inv);
            check(inv != NULL, "malloc");
            for (int64_t l = 0; l < lm->n_layers; l++) {
                rope_inv_freq(&lm->rope[l].rope, lm->rope[l].rotary_dim,
                              lm->max_position_embeddings, inv);
                volatile double scale = rope_attention_scaling(&lm->rope[l].rope);
                (void)scale;
            }
            free(inv);
            arch->free_hparams(hp);
        } else {
            check(hp == NULL, "a failed read leaves nothing");
            check_message(herr.msg);
        }
    }
    lm_config_free(&cfg);
    cfg_free(&mc);
    return 0;
}
