"""The pre-aggregated instruments: same numbers as the OTel SDK's own aggregation, exported
through every reader awa creates, cheap and allocation-free per recording."""

from __future__ import annotations

import random
import threading
import time
import tracemalloc

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

from awa import instruments, metrics, telemetry
from awa.instruments import METRICS, job_attributes

from .conftest import scrape, value


def _unique(name: str) -> str:
    return f"{name}_{time.monotonic_ns()}"


def _sdk_histogram(values: list[float]) -> HistogramDataPoint:
    """The SDK's own explicit-bucket aggregation of ``values`` (the reference)."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    histogram = provider.get_meter("reference").create_histogram(
        "reference", "s", explicit_bucket_boundaries_advisory=metrics.SECONDS_BUCKETS)
    for v in values:
        histogram.record(v)
    data = reader.get_metrics_data()
    assert data is not None
    (point,) = data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
    provider.shutdown()
    assert isinstance(point, HistogramDataPoint)
    return point


def test_histogram_buckets_equal_the_sdk_s_aggregation(prometheus_endpoint):
    queue = _unique("q")
    rng = random.Random(18)
    # boundaries themselves, values between them, below the first and past the last
    values = [*metrics.SECONDS_BUCKETS, 0.0, 0.0001, 61.0, 3600.0] + \
        [rng.lognormvariate(-3, 2) for _ in range(500)]
    for v in values:
        METRICS.job_duration.observe(("k", queue), v)
    (point,) = [p for key, p in METRICS.job_duration.points().items() if key == ("k", queue)]
    reference = _sdk_histogram(values)
    assert point.bucket_counts == tuple(reference.bucket_counts)
    assert point.count == reference.count == len(values)
    assert abs(point.sum - reference.sum) < 1e-9
    assert (point.min, point.max) == (reference.min, reference.max)
    # and Prometheus sees exactly these as cumulative le buckets
    series = scrape(prometheus_endpoint.url)
    buckets = {float(s.labels["le"]): s.value for s in series["awa_job_duration_seconds_bucket"]
               if s.labels["awa_job_queue"] == queue}
    cumulative = 0
    for bound, n in zip([*metrics.SECONDS_BUCKETS, float("inf")], reference.bucket_counts):
        cumulative += n
        assert buckets[bound] == cumulative, bound
    assert value(series, "awa_job_duration_seconds_count", awa_job_queue=queue) == len(values)


def test_counters_are_cumulative_and_monotonic_across_scrapes(prometheus_endpoint):
    queue = _unique("q")
    METRICS.job_completed.inc(("k", queue), 3)
    METRICS.job_duration.observe(("k", queue), 0.5)
    METRICS.job_in_flight.inc((queue,), 2)
    METRICS.job_in_flight.inc((queue,), -2)
    first = value(scrape(prometheus_endpoint.url), "awa_job_completed_total", awa_job_queue=queue)
    METRICS.job_completed.inc(("k", queue), 2)
    METRICS.job_completed.add(-5, job_attributes("k", queue))  # ignored, as the SDK does
    second = value(scrape(prometheus_endpoint.url), "awa_job_completed_total", awa_job_queue=queue)
    assert (first, second) == (3, 5)
    text = __import__("httpx").get(prometheus_endpoint.url, timeout=5).text
    assert "# TYPE awa_job_completed_total counter" in text
    assert "# TYPE awa_job_duration_seconds histogram" in text
    assert "# TYPE awa_job_in_flight gauge" in text


def test_the_dict_entry_points_land_on_the_same_series(prometheus_endpoint):
    queue = _unique("q")
    METRICS.job_failed.add(1, {**job_attributes("k", queue), metrics.ATTR_TERMINAL: True})
    METRICS.job_failed.inc(("k", queue, True), 2)
    METRICS.job_failed.inc(("k", queue, False), 1)
    series = scrape(prometheus_endpoint.url)
    assert value(series, "awa_job_failed_total", awa_job_queue=queue,
                 awa_job_terminal="true") == 3
    assert value(series, "awa_job_failed_total", awa_job_queue=queue,
                 awa_job_terminal="false") == 1


def test_concurrent_producer_threads_lose_no_increment(prometheus_endpoint):
    """One thread owns the lock-free half, the others record under the lock; both add up."""
    queue = _unique("q")
    key = (_unique("branch"),)

    def work() -> None:
        for _ in range(20_000):
            METRICS.job_inserted.inc(("k", queue))
            METRICS.maintenance_branch_duration.observe(key, 0.001)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    series = scrape(prometheus_endpoint.url)
    assert value(series, "awa_job_inserted_total", awa_job_queue=queue) == 80_000
    assert value(series, "awa_maintenance_branch_duration_seconds_count",
                 awa_maintenance_branch=key[0]) == 80_000
    assert value(series, "awa_maintenance_branch_duration_seconds_bucket",
                 awa_maintenance_branch=key[0], le="0.001") == 80_000


def test_histograms_travel_over_otlp_as_histograms(otlp_receiver):
    telemetry.init_telemetry(otlp_receiver.url, export_interval_ms=100)
    queue = _unique("q")
    METRICS.dispatch_claim_duration.observe((queue,), 0.02)
    METRICS.dispatch_claim_duration.observe((queue,), 7.0)
    telemetry.shutdown_telemetry()
    points = [p for p in otlp_receiver.metric_points()["awa.dispatch.claim_duration"]
              if {a.key: a.value.string_value for a in p.attributes}.get(metrics.ATTR_QUEUE)
              == queue]
    assert points and points[-1].count == 2
    assert list(points[-1].explicit_bounds) == list(metrics.SECONDS_BUCKETS)
    assert abs(points[-1].sum - 7.02) < 1e-9


def test_an_application_reader_gets_histograms_through_preferred_aggregation():
    """A reader the application builds itself passes telemetry.preferred_aggregation()."""
    reader = InMemoryMetricReader(preferred_aggregation=telemetry.preferred_aggregation())
    provider = telemetry._sdk_meter_provider()
    provider.add_metric_reader(reader)
    try:
        queue = _unique("q")
        METRICS.job_wait_duration.observe(("k", queue), 0.3)
        found = [p for rm in reader.get_metrics_data().resource_metrics
                 for sm in rm.scope_metrics for m in sm.metrics
                 if m.name == "awa.job.wait_duration" for p in m.data.data_points
                 if p.attributes.get(metrics.ATTR_QUEUE) == queue]
        assert len(found) == 1 and isinstance(found[0], HistogramDataPoint)
        assert found[0].count == 1 and found[0].explicit_bounds == metrics.SECONDS_BUCKETS
    finally:
        provider.remove_metric_reader(reader)


def test_recording_is_cheap_and_allocates_nothing_per_call(prometheus_endpoint):
    key = ("k", _unique("q"))
    counter, histogram = METRICS.job_completed, METRICS.job_duration
    counter.inc(key)
    histogram.observe(key, 0.01)  # the series exists: steady state from here
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(10_000):
            counter.inc(key)
            histogram.observe(key, 0.01)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename")
                if stat.traceback[0].filename == instruments.__file__)
    assert grown < 4096, f"recording allocated {grown} bytes in awa/instruments.py"
    # generous bound (a shared, noisy machine): the SDK path cost about 6-7 us per record
    started = time.perf_counter()
    for _ in range(20_000):
        histogram.observe(key, 0.01)
    per_call = (time.perf_counter() - started) / 20_000
    assert per_call < 5e-6, f"{per_call * 1e6:.2f} us per histogram recording"


def test_observe_many_equals_one_observe_per_value(prometheus_endpoint):
    rng = random.Random(8)
    values = [rng.lognormvariate(-4, 2) for _ in range(300)] + [0.0, 60.0, 61.0]
    one, many = ("k", _unique("one")), ("k", _unique("many"))
    for v in values:
        METRICS.job_wait_duration.observe(one, v)
    for start in range(0, len(values), 64):  # claimed batches
        METRICS.job_wait_duration.observe_many(many, values[start:start + 64])
    points = METRICS.job_wait_duration.points()
    a, b = points[one], points[many]
    assert a.bucket_counts == b.bucket_counts and a.count == b.count == len(values)
    assert abs(a.sum - b.sum) < 1e-9 and (a.min, a.max) == (b.min, b.max)


def test_in_flight_is_counted_from_the_runtime_s_running_handlers(prometheus_endpoint):
    """No recording per job: the running-handler map is counted at collection."""
    from types import SimpleNamespace

    from awa import recording

    queue = _unique("q")
    running = {(i, 1): SimpleNamespace(job=SimpleNamespace(queue=queue)) for i in range(3)}
    source = recording.track_in_flight(running)
    try:
        assert value(scrape(prometheus_endpoint.url), "awa_job_in_flight",
                     awa_job_queue=queue) == 3
        running.clear()  # every handler finished: the series stays, at 0
        samples = [s for s in scrape(prometheus_endpoint.url)["awa_job_in_flight"]
                   if s.labels["awa_job_queue"] == queue]
        assert [s.value for s in samples] == [0]
    finally:
        recording.untrack_in_flight(source)
