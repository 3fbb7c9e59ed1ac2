/* fuzz_config.c — libFuzzer target for the config.json reader (cfg_parse), followed by what an
 * export does next with an accepted config: the family lookup, the decoder hyper-parameters
 * (arch_hparams, with its own checks) and the rotary inverse-frequency table. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "arch/arch.h"
#include "graph/rope.h"
#include "model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    model_config cfg;
    fy_err err = {0};
    if (cfg_parse((const char *)data, size, "config.json", &cfg, &err) != FERRY_OK) {
        check(cfg.raw == NULL && cfg.layer_types == NULL, "a failed parse frees everything");
        check_message(err.msg);
        return 0;
    }
    /* What config.h promises about an accepted config. */
    check(cfg.num_hidden_layers >= 1 && cfg.num_hidden_layers <= 1024, "layers in range");
    check(cfg.hidden_size >= 1 && cfg.vocab_size >= 1 && cfg.intermediate_size >= 1, "sizes");
    check(cfg.num_attention_heads >= 1 && cfg.num_key_value_heads >= 1 &&
          cfg.num_attention_heads % cfg.num_key_value_heads == 0, "heads");
    check(cfg.head_dim >= 1 && cfg.head_dim <= 4096, "head_dim in range");

    const arch_family *fam = arch_find(cfg.architecture);
    if (fam) {
        decoder_hparams hp;
        fy_err herr = {0};
        if (arch_hparams(fam, &cfg, &hp, &herr) == FERRY_OK) {
            float *inv = malloc((size_t)(hp.head_dim / 2 + 1) * sizeof *inv);
            check(inv != NULL, "malloc");
            rope_inv_freq(&hp.rope, hp.head_dim, hp.max_position_embeddings, inv);
            volatile double scale = rope_attention_scaling(&hp.rope);
            (void)scale;
            free(inv);
        } else {
            check_message(herr.msg);
        }
        arch_hparams_free(&hp);
    }
    cfg_free(&cfg);
    return 0;
}
