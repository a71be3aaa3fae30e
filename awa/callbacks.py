"""External callbacks: register, resolve, complete/fail/retry/resume (issue: callbacks)."""

from __future__ import annotations


class CallbackMixin:
    """Placeholder until its issue fills it in."""
