"""``PartitionedQueue``: one hot logical queue spread over physical queues (awa-pg 0.6.9).

Partition 0 keeps the logical name, the others are ``<name>__p<i>``.  A key is
routed by a stable hash (BLAKE3 of its UTF-8 bytes), so one key always lands
in one partition and keeps its order there (it is also the ``ordering_key``).
"""

from __future__ import annotations

from typing import Any

import blake3

from awa.job import ValidationError
from awa.worker import OutOfRange

MAX_PARTITIONS = 1024


def _as_bytes(key: Any) -> bytes:
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise ValidationError("ordering_key must be bytes-like or str")


class PartitionedQueue:
    """Deterministic physical queue partitions for one hot logical queue."""

    def __init__(self, logical_queue: str, partitions: int) -> None:
        if not isinstance(partitions, int) or isinstance(partitions, bool):
            raise TypeError(f"partitions must be an int, got {type(partitions).__name__}")
        if not isinstance(logical_queue, str) or not logical_queue:
            raise ValidationError("partitioned queue logical queue must not be empty")
        if partitions < 1:
            raise ValidationError("partitioned queue partitions must be > 0")
        if partitions > MAX_PARTITIONS:
            raise ValidationError(f"partitioned queue supports at most {MAX_PARTITIONS} "
                                  f"partitions, got {partitions}")
        self._logical = logical_queue
        self._physical = [logical_queue] + [f"{logical_queue}__p{i}"
                                            for i in range(1, partitions)]

    @classmethod
    def from_physical_queues(cls, logical_queue: str,
                             physical_queues: list[str]) -> PartitionedQueue:
        queues = list(physical_queues)
        if not queues:
            raise ValidationError("partitioned queue partitions must be > 0")
        if any(not isinstance(q, str) or not q for q in queues):
            raise ValidationError("partitioned queue physical queue must not be empty")
        for i, q in enumerate(queues):
            if q in queues[:i]:
                raise ValidationError(f"partitioned queue physical queue {q!r} is duplicated")
        self = cls(logical_queue, 1)
        self._physical = queues
        return self

    @property
    def logical_queue(self) -> str:
        return self._logical

    @property
    def partitions(self) -> int:
        return len(self._physical)

    @property
    def physical_queues(self) -> list[str]:
        return list(self._physical)

    def __len__(self) -> int:
        return len(self._physical)

    def __repr__(self) -> str:
        return f"PartitionedQueue(logical_queue={self._logical!r}, partitions={len(self)})"

    def _index(self, index: int) -> int:
        if not isinstance(index, int) or isinstance(index, bool):
            raise ValidationError(f"partition index must be an int, got {index!r}")
        if index < 0:
            raise ValidationError("index must be >= 0")
        return index % len(self._physical)

    def queue_for_index(self, index: int) -> str:
        return self._physical[self._index(index)]

    def route_by_index(self, index: int) -> dict[str, Any]:
        return {"queue": self.queue_for_index(index)}

    def queue_for_key(self, key: str | bytes) -> str:
        digest = blake3.blake3(_as_bytes(key)).digest()
        return self._physical[int.from_bytes(digest[:8], "little") % len(self._physical)]

    def route_by_key(self, key: str | bytes) -> dict[str, Any]:
        """``insert(**pq.route_by_key(k))``: the partition and the ordering key."""
        return {"queue": self.queue_for_key(key), "ordering_key": _as_bytes(key)}

    def queue_configs(self, max_workers_per_partition: int | None = None, *,
                      min_workers_per_partition: int | None = None, weight: int = 1,
                      rate_limit_per_partition: Any = None,
                      priority_aging_interval_ms: int | None = None,
                      deadline_duration_ms: int | None = None, claimers: int | None = None,
                      claim_batch_size: int | None = None) -> list[dict[str, Any]]:
        """One ``start()`` queue config per physical queue (capacity is per partition)."""
        if (max_workers_per_partition is None) == (min_workers_per_partition is None):
            raise ValidationError("use max_workers_per_partition or min_workers_per_partition,"
                                  " not both" if max_workers_per_partition is not None else
                                  "queue_configs requires max_workers_per_partition or "
                                  "min_workers_per_partition")
        # Refused here with 0.6.9's messages, not later by start().
        for name, value in (("weight", weight if min_workers_per_partition is not None
                             else None), ("claimers", claimers),
                            ("claim_batch_size", claim_batch_size)):
            if value is not None and value < 1:
                raise ValidationError(f"{name} must be > 0")
        base: dict[str, Any] = {}
        if max_workers_per_partition is not None:
            if max_workers_per_partition < 0:
                raise OutOfRange("out of range integral type conversion attempted")
            if max_workers_per_partition < 1:
                raise ValidationError("max_workers_per_partition must be > 0")
            base["max_workers"] = max_workers_per_partition
        else:
            assert min_workers_per_partition is not None
            if min_workers_per_partition < 0:
                raise OutOfRange("out of range integral type conversion attempted")
            base["min_workers"] = min_workers_per_partition
            base["weight"] = weight
        for name, value in (("rate_limit", rate_limit_per_partition),
                            ("priority_aging_interval_ms", priority_aging_interval_ms),
                            ("deadline_duration_ms", deadline_duration_ms),
                            ("claimers", claimers), ("claim_batch_size", claim_batch_size)):
            if value is not None:
                base[name] = value
        return [{"name": q, **base} for q in self._physical]
