// guide_decode_loop.cpp — the Exporters guide's ExecuTorch decode loop, against the C++ runtime
// of the pinned executorch wheel: a static-cache decode.pte exported with alloc_graph_input,
// alloc_graph_output and alloc_mutable_buffers false, its inputs [input_ids, attention_mask,
// position_ids, cache x N] and outputs [cache x N, logits, cache x N]. The caller owns the cache
// buffers: each is set as its input and bound onto the matching one of the last N outputs with
// Method::set_output_data_ptr, so the program's writes land in them in place, call after call.
// Shapes and sizes come from the program's method_meta.
//
//   guide_decode_loop decode.pte PROMPT_IDS NEW_TOKENS     (PROMPT_IDS: "5,17,42")
//
// Prints the greedy tokens after the prompt, space-separated, then one line "counter C" per
// integer cache tensor (the layers' write positions, read from the caller's own buffers). On
// stderr, one line "timing prompt_ms P decode_ms_median D": the prompt's call and the median
// one-token call (set_input, binding and execute; bench/pte_bench.py reads it).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/portable_type/tensor_impl.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::aten::TensorImpl;
using executorch::extension::FileDataLoader;
using namespace executorch::runtime;

// A contiguous tensor over bytes the caller owns.
class Owned {
public:
    Owned(ScalarType type, const std::vector<int32_t> &shape, size_t capacity = 0)
    {
        size_t numel = 1;
        for (size_t i = 0; i < shape.size(); i++) {
            sizes_.push_back(shape[i]);
            order_.push_back(static_cast<TensorImpl::DimOrderType>(i));
            numel *= static_cast<size_t>(shape[i]);
        }
        strides_.resize(sizes_.size());
        TensorImpl::StridesType stride = 1;
        for (size_t i = sizes_.size(); i-- > 0;) {
            strides_[i] = stride;
            stride *= sizes_[i];
        }
        size_t bytes = numel * elementSize(type);
        data_.assign(capacity > bytes ? capacity : bytes, 0);
        impl_.reset(new TensorImpl(type, static_cast<ssize_t>(sizes_.size()), sizes_.data(),
                                   data_.data(), order_.data(), strides_.data()));
    }
    Tensor tensor() { return Tensor(impl_.get()); }
    uint8_t *data() { return data_.data(); }
    size_t capacity() const { return data_.size(); }

private:
    std::vector<TensorImpl::SizesType> sizes_;
    std::vector<TensorImpl::DimOrderType> order_;
    std::vector<TensorImpl::StridesType> strides_;
    std::vector<uint8_t> data_;
    std::unique_ptr<TensorImpl> impl_;
};

static int fail(const char *what, Error e)
{
    std::fprintf(stderr, "guide_decode_loop: %s failed (0x%x)\n", what, static_cast<unsigned>(e));
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        std::fprintf(stderr, "usage: guide_decode_loop decode.pte PROMPT_IDS NEW_TOKENS\n");
        return 2;
    }
    std::vector<int64_t> prompt;
    for (char *s = argv[2]; *s;) {
        prompt.push_back(std::strtoll(s, &s, 10));
        if (*s == ',')
            s++;
    }
    const int new_tokens = std::atoi(argv[3]);

    runtime_init();
    auto loader = FileDataLoader::from(argv[1]);
    if (!loader.ok())
        return fail("FileDataLoader::from", loader.error());
    auto program = Program::load(&loader.get());
    if (!program.ok())
        return fail("Program::load", program.error());
    auto meta = program->method_meta("forward");
    if (!meta.ok())
        return fail("method_meta", meta.error());

    // method memory: bookkeeping, and one buffer per memory-planned arena
    static uint8_t pool[16 << 20];
    MemoryAllocator method_allocator(sizeof pool, pool);
    std::vector<std::vector<uint8_t>> planned(meta->num_memory_planned_buffers());
    std::vector<Span<uint8_t>> spans;
    for (size_t i = 0; i < planned.size(); i++) {
        planned[i].resize(meta->memory_planned_buffer_size(i).get());
        spans.push_back({planned[i].data(), planned[i].size()});
    }
    HierarchicalAllocator planned_allocator({spans.data(), spans.size()});
    MemoryManager memory_manager(&method_allocator, &planned_allocator);
    auto decode = program->load_method("forward", &memory_manager);
    if (!decode.ok())
        return fail("load_method", decode.error());

    // inputs [ids, mask, position_ids, cache x N]; outputs [cache x N, logits, cache x N]
    const size_t n_cache = meta->num_inputs() - 3;
    const size_t logits_at = n_cache;
    if (meta->num_outputs() != 2 * n_cache + 1) {
        std::fprintf(stderr, "guide_decode_loop: %zu outputs for %zu cache tensors\n",
                     meta->num_outputs(), n_cache);
        return 1;
    }
    std::vector<std::unique_ptr<Owned>> cache;
    int32_t slots = 0;
    for (size_t i = 0; i < n_cache; i++) {
        auto info = meta->input_tensor_meta(3 + i).get();
        std::vector<int32_t> shape(info.sizes().begin(), info.sizes().end());
        if (shape.size() == 4)
            slots = shape[2];
        cache.emplace_back(new Owned(info.scalar_type(), shape, info.nbytes()));
    }
    auto logits_info = meta->output_tensor_meta(logits_at).get();
    const int32_t vocab = logits_info.sizes()[logits_info.sizes().size() - 1];
    std::vector<uint8_t> logits(logits_info.nbytes());

    int64_t length = 0; // tokens in the cache
    auto forward = [&](const std::vector<int64_t> &ids, int64_t *next) -> int {
        const int32_t q = static_cast<int32_t>(ids.size());
        Owned input_ids(ScalarType::Long, {1, q}), positions(ScalarType::Long, {1, q});
        Owned mask(ScalarType::Bool, {1, 1, q, slots});
        for (int32_t i = 0; i < q; i++) {
            reinterpret_cast<int64_t *>(input_ids.data())[i] = ids[static_cast<size_t>(i)];
            reinterpret_cast<int64_t *>(positions.data())[i] = length + i;
            for (int32_t j = 0; j < slots; j++) // causal over the cached and the new tokens
                mask.data()[static_cast<size_t>(i) * slots + j] = j <= length + i;
        }
        Error e = decode->set_input(EValue(input_ids.tensor()), 0);
        if (e == Error::Ok)
            e = decode->set_input(EValue(mask.tensor()), 1);
        if (e == Error::Ok)
            e = decode->set_input(EValue(positions.tensor()), 2);
        for (size_t i = 0; i < n_cache && e == Error::Ok; i++)
            e = decode->set_input(EValue(cache[i]->tensor()), 3 + i);
        // the returned cache (the last N outputs) bound onto the caller's buffers: in place
        for (size_t i = 0; i < n_cache && e == Error::Ok; i++)
            e = decode->set_output_data_ptr(cache[i]->data(), cache[i]->capacity(),
                                            n_cache + 1 + i);
        if (e == Error::Ok)
            e = decode->set_output_data_ptr(logits.data(), logits.size(), logits_at);
        if (e == Error::Ok)
            e = decode->execute();
        if (e != Error::Ok)
            return fail("a decode call", e);
        const float *row = reinterpret_cast<const float *>(logits.data()) +
                           static_cast<size_t>(q - 1) * vocab;
        int32_t best = 0;
        for (int32_t v = 1; v < vocab; v++)
            if (row[v] > row[best])
                best = v;
        *next = best;
        length += q;
        return 0;
    };

    using clock = std::chrono::steady_clock;
    auto ms_since = [](clock::time_point t) {
        return std::chrono::duration<double, std::milli>(clock::now() - t).count();
    };
    int64_t token;
    auto start = clock::now();
    if (forward(prompt, &token))
        return 1;
    const double prompt_ms = ms_since(start);
    std::vector<double> steps;
    for (int step = 0; step < new_tokens; step++) {
        std::printf("%s%lld", step ? " " : "", static_cast<long long>(token));
        start = clock::now();
        if (step + 1 < new_tokens && forward({token}, &token))
            return 1;
        if (step + 1 < new_tokens)
            steps.push_back(ms_since(start));
    }
    std::printf("\n");
    std::sort(steps.begin(), steps.end());
    std::fprintf(stderr, "timing prompt_ms %.3f decode_ms_median %.3f\n", prompt_ms,
                 steps.empty() ? 0.0 : steps[steps.size() / 2]);
    for (size_t i = 0; i < n_cache; i++)
        if (meta->input_tensor_meta(3 + i)->scalar_type() == ScalarType::Long)
            std::printf("counter %lld\n",
                        static_cast<long long>(*reinterpret_cast<int64_t *>(cache[i]->data())));
    return 0;
}
