"""The known queues of the ops tools: ``awa.known_queues`` (one rule for the console's
Overview, ``awa queue stats``, the exporter and the dashboards' queue picker)."""

from awa.known_queues import CONFIGURED_QUEUES, known_queues, read_known_queues

__all__ = ["CONFIGURED_QUEUES", "known_queues", "read_known_queues"]
