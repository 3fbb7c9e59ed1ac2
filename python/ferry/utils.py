"""The guide's transformers.exporters.utils, as ferry takes it.

    from ferry.utils import decompose_for_generation

    components = decompose_for_generation(model, inputs)
    for name, (submodel, subinputs) in components.items():
        eager_outputs = submodel(**subinputs)
        exported[name] = exporter.export(submodel, subinputs, config=config)

The capture is transformers' own (one model.generate(**inputs, max_new_tokens=2) with hooks
on forward): each entry is the submodule and the kwargs it was called with, so the caller can
run it eagerly. ferry does not trace those kwargs: each entry's inputs remember which of
ferry's generation components they stand for (ComponentInputs), and exporter.export writes
that component from the checkpoint, as export_for_generation would with the same settings.
"""

from ._lib import FerryError, _escape


class ComponentInputs(dict):
    """The kwargs one component was called with in the capture (a dict: submodel(**inputs)
    runs), and what exporter.export needs to write that component: the model, the inputs
    generate() was given, and the generation settings of the capture."""

    def __init__(self, kwargs, *, component, submodel, model, generate_inputs,
                 generation_config, multi_token_decode):
        super().__init__(kwargs)
        self.component, self.submodel, self.model = component, submodel, model
        self.generate_inputs = generate_inputs
        self.generation_config, self.multi_token_decode = generation_config, multi_token_decode
        self._captured = _shapes(self)

    def changed(self):
        """The names of the tensors whose shape differs from the capture's (added or removed
        ones too): ferry does not trace these kwargs, so a change would not reach the export."""
        now, then = _shapes(self), self._captured
        return sorted(name for name in set(now) | set(then) if now.get(name) != then.get(name))


def _shapes(kwargs):
    return {name: tuple(value.shape) for name, value in kwargs.items() if hasattr(value, "shape")}


def decompose_for_generation(model, inputs, generation_config=None, multi_token_decode=False):
    """{component name: (submodel, forward kwargs)}, transformers' decomposition of a loaded
    `model` on `inputs` (generate's kwargs): "prefill"/"decode" for a decoder,
    "<modality>_encoder"/"language_model"/"lm_head"/"decode" for a vision-language model.
    The kwargs are ComponentInputs, which exporter.export turns into that component."""
    if not (hasattr(model, "generate") and hasattr(model, "config")):
        raise FerryError(f"decompose_for_generation takes a loaded transformers model (it runs "
                         f"its generate() once), not {_escape(type(model).__name__)}: for a "
                         "checkpoint path, ferry.decompose_for_generation describes its "
                         "components", status=1)
    try:
        from transformers.exporters.utils import decompose_for_generation as capture
    except ImportError as exc:
        raise FerryError("decompose_for_generation captures with transformers.exporters "
                         f"(transformers 5.24 or later), which this transformers lacks: {exc}",
                         status=4) from None
    stages = capture(model, inputs, generation_config=generation_config,
                     multi_token_decode=multi_token_decode)
    return {name: (submodel, ComponentInputs(kwargs, component=name, submodel=submodel,
                                             model=model,
                                             generate_inputs=inputs,
                                             generation_config=generation_config,
                                             multi_token_decode=multi_token_decode))
            for name, (submodel, kwargs) in stages.items()}
