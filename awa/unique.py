"""Unique jobs: the key a job's uniqueness is judged by, and its state mask.

``unique_key`` is the first 16 bytes of BLAKE3 over the kind and, as the
options ask, the queue, the canonical JSON of the args and the period bucket.
``unique_states`` is a ``bit(8)`` mask over ``awa.job_state`` in enum order:
while the job is in one of those states it holds the key's row in
``awa.job_unique_claims`` (the schema's triggers take and release it).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import blake3

from awa import config
from awa.job import ValidationError
from awa.serialization import canonical_json

_SEPARATOR = b"\x00"
_OPTION_NAMES = ("by_queue", "by_args", "by_period", "states")


@dataclass(frozen=True)
class UniqueOpts:
    by_queue: bool = False
    by_args: bool = True
    by_period: int | None = None  # seconds
    states: tuple[str, ...] = config.DEFAULT_UNIQUE_STATES

    @classmethod
    def parse(cls, opts: dict[str, Any] | UniqueOpts | None) -> UniqueOpts | None:
        """Validate a user's ``unique_opts`` dict (``None`` = not unique)."""
        if opts is None or isinstance(opts, UniqueOpts):
            return opts
        if not isinstance(opts, dict):
            raise ValidationError(f"unique_opts must be a dict with keys "
                                  f"{', '.join(_OPTION_NAMES)}, got {type(opts).__name__}")
        unknown = sorted(set(opts) - set(_OPTION_NAMES))
        if unknown:
            raise ValidationError(f"unknown unique_opts key(s) {', '.join(unknown)}; "
                                  f"expected {', '.join(_OPTION_NAMES)}")
        period = opts.get("by_period")
        if period is not None:
            if hasattr(period, "total_seconds"):
                period = period.total_seconds()
            if isinstance(period, bool) or not isinstance(period, (int, float)) or period < 1:
                raise ValidationError(f"unique_opts by_period must be a number of seconds >= 1, "
                                      f"got {opts.get('by_period')!r}")
            period = int(period)
        states = opts.get("states")
        if states is None:
            states = config.DEFAULT_UNIQUE_STATES
        else:
            if isinstance(states, str):
                raise ValidationError("unique_opts states must be a list of state names")
            states = tuple(str(s) for s in states)
            bad = [s for s in states if s not in config.JOB_STATES]
            if bad:
                raise ValidationError(f"unknown state(s) in unique_opts states: {', '.join(bad)}; "
                                      f"expected some of {', '.join(config.JOB_STATES)}")
        return cls(by_queue=bool(opts.get("by_queue", False)),
                   by_args=bool(opts.get("by_args", True)),
                   by_period=period, states=states)

    @property
    def states_mask(self) -> str:
        """The ``bit(8)`` literal, e.g. ``11111000`` for the default states."""
        return "".join("1" if s in self.states else "0" for s in config.JOB_STATES)


def period_bucket(by_period: int, now: float | None = None) -> int:
    return math.floor((time.time() if now is None else now) / by_period)


def unique_key(kind: str, *, queue: str | None = None, args: Any = None,
               period_bucket: int | None = None) -> bytes:
    """The 16-byte key; each part present only when the options include it."""
    hasher = blake3.blake3(kind.encode())
    if queue is not None:
        hasher.update(_SEPARATOR + queue.encode())
    if args is not None:
        hasher.update(_SEPARATOR + canonical_json(args).encode())
    if period_bucket is not None:
        hasher.update(_SEPARATOR + str(period_bucket).encode())
    return hasher.digest(length=config.UNIQUE_KEY_BYTES)


def key_for(opts: UniqueOpts, kind: str, queue: str, args: dict[str, Any],
            now: float | None = None) -> bytes:
    return unique_key(
        kind,
        queue=queue if opts.by_queue else None,
        args=args if opts.by_args else None,
        period_bucket=period_bucket(opts.by_period, now) if opts.by_period else None,
    )
