"""Read histograms out of a Prometheus text exposition (a worker's /metrics)."""

from __future__ import annotations

import math


def histogram_summary(text: str, name: str) -> dict[str, float | None] | None:
    """count, mean, p50 and p99 of one histogram, summed over all label sets."""
    buckets: dict[float, float] = {}
    total = count = 0.0
    found = False
    # Imported here: prometheus_client costs ~50 ms of CPU to import, and every `awa-ops
    # diagnose` process imports this module, though only --metrics-url parses anything.
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name == name + "_bucket":
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
                found = True
            elif sample.name == name + "_sum":
                total += sample.value
            elif sample.name == name + "_count":
                count += sample.value
    if not found or count == 0:
        return None
    bounds = sorted(buckets)
    return {"count": count, "mean": total / count,
            "p50": _quantile(bounds, buckets, count, 0.5),
            "p99": _quantile(bounds, buckets, count, 0.99)}


def _quantile(bounds: list[float], buckets: dict[float, float], count: float,
              q: float) -> float | None:
    """Linear interpolation inside the bucket holding the q-th observation (as PromQL does)."""
    rank = q * count
    lower, below = 0.0, 0.0
    for bound in bounds:
        cumulative = buckets[bound]
        if cumulative >= rank:
            if math.isinf(bound):
                return lower
            inside = cumulative - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, cumulative
    return None
