"""Paired A/B in one process (bench/decode_ab.py, vlm_decode_ab.py, vlm_encoder_ab.py): every
export measured once a round, the order rotated each round, so that the machine's drift hits
every export alike; then each export's per-round ratio to the first export's."""

import statistics


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
