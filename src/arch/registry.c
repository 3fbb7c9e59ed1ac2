/* registry.c — the name -> family table; adding a family is one line here plus its file. */
#include <string.h>

#include "arch/arch.h"

static const arch_family *const families[] = {
    &arch_llama,
    &arch_mistral,
    &arch_qwen2,
    &arch_qwen3,
};

const arch_family *arch_find(const char *architecture)
{
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (strcmp(families[i]->architecture, architecture) == 0)
            return families[i];
    return NULL;
}

const char *arch_supported_list(void)
{
    return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM";
}
