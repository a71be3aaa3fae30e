"""``awa adopt``'s one entry into storage: ``awa/adopt.py`` runs its phases through this
module only, since only ``awa/storage/`` reaches into an engine (docs/architecture.md §2, §8).

The source side is the Rust-core layout's (``awa.storage.rust_core.adopt``: the adoption's
lock and record, staging, the stash of the Rust schema); the target side is the engine that
serves the database once ``awa migrate`` laid it out (``target``: its ``AdoptTarget``).
"""

from __future__ import annotations

from typing import cast

from awa.schema.layout import QUEUE_STORAGE
from awa.storage.engine import Engine
from awa.storage.rust_core.adopt import (
    RUST_VERSION,
    STAGING,
    STASH,
    AdoptTarget,
    StagedCounts,
    adoption,
    drop,
    live_runtimes,
    lock,
    lock_rust_tables,
    record,
    restore,
    schema_exists,
    set_phase,
    stage,
    staged_counts,
)


def target(engine: Engine) -> AdoptTarget:
    """What writes the staged rows into ``engine``'s layout (``open_engine``'s engine, after
    ``awa migrate``): canonical's engine is its own target, queue storage's is wrapped."""
    if engine.name == QUEUE_STORAGE:
        from awa.storage.queue_storage.adopt import QueueStorageAdopt  # engines load on use

        return QueueStorageAdopt(engine)
    return cast(AdoptTarget, engine)


__all__ = ["RUST_VERSION", "STAGING", "STASH", "AdoptTarget", "StagedCounts", "adoption",
           "drop", "live_runtimes", "lock", "lock_rust_tables", "record", "restore",
           "schema_exists", "set_phase", "stage", "staged_counts", "target"]
