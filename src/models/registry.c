/* registry.c — the architecture name -> family table; adding a family is one line here plus
 * its file. */
#include <string.h>

#include "models/model.h"

static const model_arch *const FAMILIES[] = {
    &model_llama,
    &model_mistral,
    &model_qwen2,
    &model_qwen3,
};

const model_arch *model_find(const char *architecture)
{
    for (size_t i = 0; i < sizeof FAMILIES / sizeof FAMILIES[0]; i++)
        if (strcmp(FAMILIES[i]->architecture, architecture) == 0)
            return FAMILIES[i];
    return NULL;
}

const char *model_supported_list(void)
{
    return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM";
}
