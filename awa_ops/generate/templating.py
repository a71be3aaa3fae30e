"""Prometheus' alert template functions, as far as the rule descriptions use them.

promtool's unit tests compare annotations as rendered text, so the generator
renders the expected descriptions itself: ``{{ $labels.x }}`` and ``{{ $value }}``
through ``humanize``, ``humanize1024``, ``humanizeDuration`` and ``humanizePercentage``, written
after prometheus/template/template.go (Go's ``%.4g`` is C's, and so Python's).
"""

from __future__ import annotations

import math
import re

_TEMPLATE = re.compile(r"\{\{\s*(\$labels\.(\w+)|\$value(?:\s*\|\s*(\w+))?)\s*\}\}")


def render_template(text: str, labels: dict[str, str], value: float) -> str:
    """``text`` as Prometheus renders an annotation for an alert with ``labels`` and ``value``."""
    def replace(match: re.Match[str]) -> str:
        if match.group(2):
            return labels.get(match.group(2), "")
        function = match.group(3)
        if function not in _HUMANIZERS:
            raise ValueError(f"template function {function!r} is not supported in descriptions")
        return _HUMANIZERS[function](float(value))
    return _TEMPLATE.sub(replace, text)


def _g4(value: float) -> str:
    return f"{value:.4g}"


def humanize(v: float) -> str:
    if v == 0 or math.isnan(v) or math.isinf(v):
        return _g4(v)
    prefix = ""
    if abs(v) >= 1:
        for p in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(v) < 1000:
                break
            prefix, v = p, v / 1000
    else:
        for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
            if abs(v) >= 1:
                break
            prefix, v = p, v * 1000
    return _g4(v) + prefix


def humanize1024(v: float) -> str:
    if abs(v) <= 1 or math.isnan(v) or math.isinf(v):
        return _g4(v)
    prefix = ""
    for p in ("ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"):
        if abs(v) < 1024:
            break
        prefix, v = p, v / 1024
    return _g4(v) + prefix


def humanize_duration(v: float) -> str:
    if math.isnan(v) or math.isinf(v):
        return _g4(v)
    if v == 0:
        return _g4(v) + "s"
    if abs(v) >= 1:
        sign = "-" if v < 0 else ""
        v = abs(v)
        whole = int(v)
        seconds, minutes = whole % 60, (whole // 60) % 60
        hours, days = (whole // 3600) % 24, whole // 86400
        if days:
            return f"{sign}{days}d {hours}h {minutes}m {seconds}s"
        if hours:
            return f"{sign}{hours}h {minutes}m {seconds}s"
        if minutes:
            return f"{sign}{minutes}m {seconds}s"
        return f"{sign}{_g4(v)}s"
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            break
        prefix, v = p, v * 1000
    return f"{_g4(v)}{prefix}s"


def humanize_percentage(v: float) -> str:
    return _g4(v * 100) + "%"


_HUMANIZERS = {"humanize": humanize, "humanize1024": humanize1024,
               "humanizeDuration": humanize_duration,
               "humanizePercentage": humanize_percentage}
