"""The engine-neutral core: what every storage engine writes or decodes the same way.

Canonical and queue storage each build on these modules; nothing here imports an engine, so
an engine's change cannot silently change another through it.  ``collisions``: the unique
fallback every batch write uses; ``claims``: decoding a claimed row; ``runtime_snapshot``: the
runtime's row in ``awa.runtime_instances`` (a control table outside every engine's layout);
``reads``: the ops reads every engine serves alike, written out per engine relation of job
rows.  Every statement is a named query in ``sql/``.
"""
