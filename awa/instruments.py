"""The instruments: one pre-aggregated, per-process instrument per runtime catalogue entry.

Names, units, attributes and boundaries are the catalogue's (``awa.metrics``);
what records into them is ``awa.recording``.  ``METRICS`` (an ``AwaMetrics``) has one
instrument per ``RUNTIME_METRICS`` entry, as an attribute named by
``MetricSpec.attribute_name`` (``awa.job.completed`` -> ``METRICS.job_completed``).

Recording is pre-aggregated in the process (issue 18): each runtime entry is a
``PreCounter`` / ``PreUpDownCounter`` / ``PreGauge`` / ``PreHistogram`` holding
cumulative values keyed by the tuple of its attribute values in catalogue order
(``(kind, queue)``), updated without a lock by the thread that records first
(the runtime's event loop).  Nothing reaches OpenTelemetry per job: each entry
registers one *observable* instrument whose callback reports the state at
collection time -- counters as ObservableCounter (cumulative, monotonic), gauges
and up-down counters as ObservableGauge / ObservableUpDownCounter, histograms as
an ObservableGauge of whole fixed-bucket histograms that the reader-side
aggregation of ``awa.telemetry`` turns into explicit-bucket histogram points
(same boundaries, so Prometheus keeps ``_bucket``/``_sum``/``_count``).

Until a MeterProvider is set (``awa.telemetry`` or the application), nothing
could export a measurement, so recording returns at once and the measurement is
dropped: a one-off gauge (``runtime.info``) must be set after the exporters are
up.

The OTel-shaped ``add(n, attrs)`` / ``record(v, attrs)`` / ``set(v, attrs)``
still work for code holding a dict (``job_attributes`` / ``queue_attributes``
are cached; never mutate them).
"""

from __future__ import annotations

import itertools
import threading
import time
from _thread import get_ident as _get_ident
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.metrics import Counter as _ApiCounter
from opentelemetry.metrics import Histogram as _ApiHistogram
from opentelemetry.metrics import UpDownCounter as _ApiUpDownCounter
from opentelemetry.metrics import _Gauge as _ApiGauge
from opentelemetry.metrics import _internal as _otel_api_state

from awa.metrics import (
    ATTR_KIND,
    ATTR_QUEUE,
    RUNTIME_METRICS,
    SEEDED_VALUES,
    UNSET_LABEL_VALUE,
    MetricSpec,
)


# --- cached attribute sets for the hot path --------------------------------
@lru_cache(maxsize=4096)
def job_attributes(kind: str, queue: str) -> dict[str, str]:
    """``{awa.job.kind, awa.job.queue}``, cached: do not mutate the result."""
    return {ATTR_KIND: kind, ATTR_QUEUE: queue}


@lru_cache(maxsize=1024)
def queue_attributes(queue: str) -> dict[str, str]:
    """``{awa.job.queue}``, cached: do not mutate the result."""
    return {ATTR_QUEUE: queue}


# --- instruments: pre-aggregated per process, exported at collection ---------
METER_NAME = "awa"

# While no MeterProvider is set, nothing can export what is recorded: the
# recording methods return at once (what OTel's proxy did before).  Flips to
# True, and stays, the first time a provider is found.
_live = False


def _went_live() -> bool:
    """True once the application or awa.telemetry set a global MeterProvider."""
    global _live
    if _otel_api_state._METER_PROVIDER is not None:  # set by otel set_meter_provider
        _live = True
    return _live


def recording_live() -> bool:
    """Whether measurements are kept (a MeterProvider exists to export them)."""
    return _live or _went_live()


Key = tuple[Any, ...]


class _Store:
    """One catalogue entry's per-process state: values keyed by the attribute tuple.

    The key is the tuple of attribute values in the catalogue's attribute order
    (``(kind, queue)`` for ``awa.job.*``), so the hot path hashes a tuple it
    already has instead of building a dict; the dict OpenTelemetry needs is built
    once per key, at collection.

    Lock-cheap: the first thread that records (the runtime's event loop) owns
    ``_values`` and updates it without a lock -- it is its only writer, and the
    collecting thread only copies it (one C-level dict copy under the GIL).  Any
    other thread (producers in a thread pool) records into ``_shared`` under a
    lock; collection adds the two.
    """

    def __init__(self, spec: MetricSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.unit = spec.unit
        self.description = spec.help
        self._keys = spec.attributes
        self._lock = threading.Lock()
        self._owner: int | None = None
        self._values: dict[Key, Any] = {}
        self._shared: dict[Key, Any] = {}
        self._dicts: dict[Key, dict[str, Any]] = {}

    def key_of(self, attributes: Mapping[str, Any] | None) -> Key:
        """The key of an attribute dict (the compatible, slower entry point)."""
        if not attributes:
            return ()
        return tuple(attributes.get(k) for k in self._keys)

    def _attributes(self, key: Key) -> dict[str, Any]:
        attrs = self._dicts.get(key)
        if attrs is None:
            # No label value is ever empty: an unset value (None, "") reads UNSET_LABEL_VALUE.
            # Leaving the attribute out would not do: the Prometheus exporter backfills a
            # label that other series of the metric carry with "".
            attrs = {k: UNSET_LABEL_VALUE if v is None or v == "" else v
                     for k, v in zip(self._keys, key)}
            self._dicts[key] = attrs
        return attrs

    def _claim_owner(self) -> bool:
        """Called off the fast path: True when the calling thread (now) owns ``_values``."""
        me = _get_ident()
        if self._owner is None:
            with self._lock:
                if self._owner is None:
                    self._owner = me
        return self._owner == me

    def snapshot(self) -> dict[Key, Any]:
        """The current value per key (both halves added)."""
        values = dict(self._values)
        with self._lock:
            shared = dict(self._shared)
        for key, v in shared.items():
            values[key] = values.get(key, 0) + v
        return values

    def value(self, key: Key = ()) -> Any:
        return self.snapshot().get(key)

    def _callback(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(v, self._attributes(k)) for k, v in self.snapshot().items()]

    def _register(self, meter: Any) -> None:
        raise NotImplementedError


class _Sum(_Store):
    def inc(self, key: Key, n: int | float = 1) -> None:
        """Add ``n`` to the series ``key`` (attribute values in catalogue order)."""
        if not _live and not _went_live():
            return
        if _get_ident() == self._owner or self._claim_owner():
            values = self._values
            values[key] = values.get(key, 0) + n
        else:
            with self._lock:
                self._shared[key] = self._shared.get(key, 0) + n


class PreCounter(_Sum, _ApiCounter):
    """A monotonic counter: cumulative per key, exported as an ObservableCounter."""

    def add(self, amount: int | float, attributes: Mapping[str, Any] | None = None,
            context: Any = None) -> None:
        if amount < 0:
            return  # a counter never goes down (the SDK drops these too)
        self.inc(self.key_of(attributes), amount)

    def _register(self, meter: Any) -> None:
        meter.create_observable_counter(self.name, [self._callback], self.unit, self.description)


class PreUpDownCounter(_Sum, _ApiUpDownCounter):
    """A sum that goes both ways, exported as an ObservableUpDownCounter.

    Besides what is recorded, *sources* can be attached: callables returning
    ``{key: value}`` read at collection and added in, so a count the runtime
    already keeps (its running handlers) costs nothing per job.  A key a
    source reported once reads 0 when no source reports it any more.
    """

    def __init__(self, spec: MetricSpec) -> None:
        super().__init__(spec)
        self._sources: list[Callable[[], Mapping[Key, int | float]]] = []
        self._source_keys: set[Key] = set()

    def add(self, amount: int | float, attributes: Mapping[str, Any] | None = None,
            context: Any = None) -> None:
        self.inc(self.key_of(attributes), amount)

    def add_source(self, source: Callable[[], Mapping[Key, int | float]]) -> None:
        with self._lock:
            self._sources.append(source)

    def remove_source(self, source: Callable[[], Mapping[Key, int | float]]) -> None:
        with self._lock:
            if source in self._sources:
                self._sources.remove(source)

    def snapshot(self) -> dict[Key, Any]:
        values = super().snapshot()
        with self._lock:
            sources = list(self._sources)
        if not sources and not self._source_keys:
            return values
        counted: dict[Key, int | float] = {}
        for source in sources:
            for key, v in source().items():
                counted[key] = counted.get(key, 0) + v
        self._source_keys.update(counted)
        for key in self._source_keys:
            values[key] = values.get(key, 0) + counted.get(key, 0)
        return values

    def _register(self, meter: Any) -> None:
        meter.create_observable_up_down_counter(self.name, [self._callback], self.unit,
                                                self.description)


class PreGauge(_Store, _ApiGauge):
    """The last value per key, exported as an ObservableGauge (one dict store: no lock)."""

    def put(self, key: Key, value: int | float) -> None:
        if not _live and not _went_live():
            return
        self._values[key] = value  # a single store is atomic under the GIL, from any thread

    def set(self, amount: int | float, attributes: Mapping[str, Any] | None = None,
            context: Any = None) -> None:
        self.put(self.key_of(attributes), amount)

    def snapshot(self) -> dict[Key, Any]:
        return dict(self._values)

    def forget(self, drop: Any) -> None:
        """Remove the series whose key ``drop(key)`` is true (an info series replaced)."""
        with self._lock:
            for key in [k for k in list(self._values) if drop(k)]:
                self._values.pop(key, None)

    def _register(self, meter: Any) -> None:
        meter.create_observable_gauge(self.name, [self._callback], self.unit, self.description)


class HistogramPoint(float):
    """A cumulative fixed-bucket histogram of one series, as observed at collection.

    A float (the count) so a reader that does not know awa's aggregation still
    exports a number; ``awa.telemetry.awa_aggregation()`` turns it into a
    histogram data point with the catalogue's bucket boundaries.
    """

    bucket_counts: tuple[int, ...]
    sum: float
    min: float
    max: float
    start_time_unix_nano: int

    def __new__(cls, counts: Sequence[int], total: float, low: float, high: float,
                start_ns: int) -> HistogramPoint:
        point = super().__new__(cls, sum(counts))
        point.bucket_counts = tuple(counts)
        point.sum, point.min, point.max, point.start_time_unix_nano = total, low, high, start_ns
        return point

    @property
    def count(self) -> int:
        return int(self)


class PreHistogram(_Store, _ApiHistogram):
    """Fixed-bucket counts, sum, min and max per key (OTel's explicit-bucket semantics:
    bucket i holds boundaries[i-1] < v <= boundaries[i]).

    One list per key: ``[bucket counts..., sum, min, max]``, updated in place.
    Exported as an ObservableGauge whose observations are ``HistogramPoint``s;
    the reader-side aggregation of ``awa.telemetry`` makes them histograms.
    """

    def __init__(self, spec: MetricSpec) -> None:
        super().__init__(spec)
        self.boundaries: tuple[float, ...] = tuple(float(b) for b in spec.buckets or ())
        self._n = len(self.boundaries) + 1
        self._starts: dict[Key, int] = {}

    def _new(self, table: dict[Key, list[Any]], key: Key, value: float) -> list[Any]:
        series = table[key] = [0] * self._n + [0, value, value]
        self._starts.setdefault(key, time.time_ns())
        return series

    def touch(self, key: Key) -> None:
        """An empty series (count 0) for ``key``, so it is exported before anything is
        observed; its min and max start at +/-inf and the first value sets both."""
        if not _live and not _went_live():
            return
        with self._lock:
            if key not in self._shared:
                self._shared[key] = [0] * self._n + [0, float("inf"), float("-inf")]
                self._starts.setdefault(key, time.time_ns())

    def observe(self, key: Key, value: float) -> None:
        """Count one measurement ``value`` in the series ``key``."""
        if not _live and not _went_live():
            return
        if _get_ident() == self._owner or self._claim_owner():
            series = self._values.get(key) or self._new(self._values, key, value)
            series[bisect_left(self.boundaries, value)] += 1
            series[-3] += value
            if value < series[-2]:
                series[-2] = value
            if value > series[-1]:  # (not elif: a touched, empty series has min inf, max -inf)
                series[-1] = value
        else:
            with self._lock:
                series = self._shared.get(key) or self._new(self._shared, key, value)
                series[bisect_left(self.boundaries, value)] += 1
                series[-3] += value
                series[-2] = min(series[-2], value)
                series[-1] = max(series[-1], value)

    def observe_many(self, key: Key, values: Sequence[float]) -> None:
        """Count every measurement of ``values`` in the series ``key`` (one claimed batch)."""
        if not values or (not _live and not _went_live()):
            return
        if _get_ident() == self._owner or self._claim_owner():
            series = self._values.get(key) or self._new(self._values, key, values[0])
        else:  # another thread: the locked path, one value at a time
            for value in values:
                self.observe(key, value)
            return
        boundaries, low, high, total = self.boundaries, series[-2], series[-1], 0.0
        for value in values:
            series[bisect_left(boundaries, value)] += 1
            total += value
            if value < low:
                low = value
            if value > high:
                high = value
        series[-3] += total
        series[-2], series[-1] = low, high

    def record(self, amount: float, attributes: Mapping[str, Any] | None = None,
               context: Any = None) -> None:
        self.observe(self.key_of(attributes), amount)

    def points(self) -> dict[Key, HistogramPoint]:
        """The cumulative histogram per key (both halves merged)."""
        n = self._n
        rows = {k: list(v) for k, v in list(self._values.items())}
        with self._lock:
            for k, v in self._shared.items():
                mine = rows.get(k)
                if mine is None:
                    rows[k] = list(v)
                else:
                    rows[k] = [a + b for a, b in zip(mine[:n + 1], v[:n + 1])] + \
                        [min(mine[-2], v[-2]), max(mine[-1], v[-1])]
        # An empty (touched) series reports min = max = 0, not its +/-inf starting values.
        return {k: HistogramPoint(v[:n], v[n], v[n + 1] if v[n + 1] <= v[n + 2] else 0.0,
                                  v[n + 2] if v[n + 1] <= v[n + 2] else 0.0,
                                  self._starts.get(k, 0))
                for k, v in rows.items()}

    def snapshot(self) -> dict[Key, Any]:
        return dict(self.points())

    def _callback(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(p, self._attributes(k)) for k, p in self.points().items()]

    def _register(self, meter: Any) -> None:
        meter.create_observable_gauge(self.name, [self._callback], self.unit, self.description)


_STORE_CLASS: dict[str, type[_Store]] = {"counter": PreCounter, "updown": PreUpDownCounter,
                                         "gauge": PreGauge, "histogram": PreHistogram}


class AwaMetrics:
    """One pre-aggregated instrument per runtime catalogue entry, as attributes.

    Hot path: ``METRICS.job_completed.inc((kind, queue), n)``,
    ``METRICS.job_duration.observe((kind, queue), seconds)``,
    ``METRICS.queue_depth.put((queue, state), v)`` -- the key is the attribute
    values in catalogue order.  The OTel-shaped calls still work
    (``.add(n, attrs)``, ``.record(v, attrs)``, ``.set(v, attrs)``) for code
    that holds a dict.  Each instrument registers one observable instrument on
    ``meter`` that reports the cumulative state at collection time.
    """

    def __init__(self, meter: Any | None = None) -> None:
        global _live
        if meter is None:
            meter = otel_metrics.get_meter(METER_NAME)
        else:
            _live = True  # an explicit (SDK) meter exports what is recorded from now on
        self.meter = meter
        for entry in RUNTIME_METRICS:
            store = _STORE_CLASS[entry.kind](entry)
            store._register(meter)
            setattr(self, entry.attribute_name, store)

    def seed_zeros(self, queues: Sequence[str], kinds: Sequence[str]) -> None:
        """Give every counter and up-down counter whose labels are this runtime's queues and
        kinds and small closed sets of values (``SEEDED_VALUES``) a 0 series for each, and
        every histogram not labelled by kind an empty one (count 0, not a 0 observation),
        so its /metrics has them from the start ("0", not "no data", for dashboards and
        alerts).  Histograms by kind are left out: one per kind x queue x bucket would
        swell a big fleet's series for pairs that never run.  Gauges are set by what they
        measure (the leader-only ones by the leader) and are left out."""
        seedable = {ATTR_QUEUE: list(queues), ATTR_KIND: list(kinds), **SEEDED_VALUES}
        for entry in RUNTIME_METRICS:
            if entry.kind == "gauge" or entry.source != "runtime":
                continue
            if not set(entry.attributes) <= set(seedable):
                continue
            if entry.kind == "histogram" and ATTR_KIND in entry.attributes:
                continue
            store = getattr(self, entry.attribute_name)
            for key in itertools.product(*(seedable[a] for a in entry.attributes)):
                if isinstance(store, PreHistogram):
                    store.touch(tuple(key))
                else:
                    store.inc(tuple(key), 0)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not instruments: say which exist.
        raise AttributeError(
            f"AwaMetrics has no instrument {name!r}; add it to RUNTIME_METRICS in awa/metrics.py")


METRICS = AwaMetrics()
