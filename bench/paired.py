"""Paired A/B in one process (bench/decode_ab.py, vlm_decode_ab.py, vlm_encoder_ab.py): every
export measured once a round, the order rotated each round, so that the machine's drift hits
every export alike; then each export's per-round ratio to the first export's."""

import statistics
from pathlib import Path


def rounds(measures, count):
    """{name: [value each round]}: `measures` is {name: fn() -> value}, called once a round
    each, the first name first in round 0, the second first in round 1, and so on."""
    order = list(measures)
    values = {name: [] for name in order}
    for r in range(count):
        for name in order[r % len(order):] + order[:r % len(order)]:
            values[name].append(measures[name]())
    return values


def ratios(values, ref):
    """{name: {"median", "min", "max"}} of values[name][r] / values[ref][r] over the rounds."""
    out = {}
    for name, got in values.items():
        each = [x / y for x, y in zip(got, values[ref])]
        out[name] = {"median": statistics.median(each), "min": min(each), "max": max(each)}
    return out


def summary(values, ref, unit, agreement):
    """{"median_ms", "ratio_to_<ref>"} of the rounds' `values`, each export's line printed with
    `agreement` ({name: max |diff| of its outputs from ref's})."""
    medians = {k: statistics.median(v) for k, v in values.items()}
    each = ratios(values, ref)
    for name in values:
        r = each[name]
        print(f"{name:24s} median {medians[name]:9.2f} {unit}; over {ref}: median "
              f"{r['median']:.3f} (range {r['min']:.3f}-{r['max']:.3f}); outputs vs {ref}: "
              f"max |diff| {agreement.get(name, 0.0):.1e}", flush=True)
    return {"median_ms": medians, "ratio_to_" + ref: each}


def exports(specs, kinds, flag="--export"):
    """[(kind, Path)] of `flag` KIND=DIR arguments, each kind one of `kinds`, once."""
    out = []
    for spec in specs:
        kind, sep, directory = spec.partition("=")
        if not sep or kind not in kinds:
            raise SystemExit(f"{flag} {spec}: KIND=DIR, KIND one of {', '.join(kinds)}")
        out.append((kind, Path(directory)))
    if len({kind for kind, _ in out}) != len(out):
        raise SystemExit(f"{flag}: each kind once")
    return out
