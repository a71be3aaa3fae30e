"""What queue storage installs, as files, and how the engine calls its hot-path functions.

Everything the engine installs is written out in ``sql/`` beside this module, as installed,
run in the order of ``FILES``: ``layout.sql`` (tables, partitions, indexes),
``open_receipts.sql`` (which entries can still be claimed, which receipts are open, the
watermark), ``claim.sql`` (lane reservation, the claim, claim-head settling),
``jobs_view.sql`` (the ``awa.jobs`` view and its triggers), ``enqueue.sql`` (a plain batch
by statement), ``execution.sql`` (the hot path's attempt-closing and attempt-state
functions; its header says why these statements are functions), ``arrange.sql`` (jobs
placed in a given state and ring times set, for tests; the engine never calls it),
``compat.sql`` (what older releases call, as wrappers; ``contract.sql`` drops it) and
``layout_version.sql``
(last: a layout that has it is complete).  Python only reads the files (``script``,
installed by ``schema.install_sql``) and, from each hot-path function's signature, the
statement that calls it (``Procedure``); tests/storage/test_installed_sql.py checks what is
installed against the files.

A function's parameters are ``p_<name> <type>``; the call binds each to ``%(<name>)s`` cast to
that type, so the engine passes one mapping of names to values.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from awa.db import placeholder_format
from awa.statements import named_statements

# Install order.
FILES = ("layout.sql", "open_receipts.sql", "claim.sql", "jobs_view.sql", "enqueue.sql",
         "execution.sql", "arrange.sql", "compat.sql", "layout_version.sql")
# The last of ``FILES``: the layout's version, in the control schema (``awa``).
VERSION = "layout_version.sql"
# What is kept for older releases' runtimes (expand/contract): left out of the install once
# ``awa migrate --contract`` ran at this layout; ``CONTRACT`` drops it.
COMPAT = "compat.sql"
CONTRACT = "contract.sql"
# The files of the hot-path functions the engine calls through ``Procedure``.
CALLED = ("enqueue.sql", "execution.sql")

_SIGNATURE = re.compile(r"^CREATE OR REPLACE FUNCTION awa\.(\w+)\(([^)]*)\) RETURNS",
                        re.MULTILINE)
_PARAMETER = re.compile(r"^p_(\w+) (\S+)$")


def read(name: str) -> str:
    """The text of ``sql/<name>``."""
    return (resources.files(__package__) / "sql" / name).read_text()


def named(file: str, name: str) -> str:
    """The statement ``name`` of the named-query file ``sql/<file>`` (what the engine sends,
    which is not installed: ``awa.statements.named_statements``)."""
    return named_statements(__package__ or "awa.storage.queue_storage", f"sql/{file}")[name]


@cache
def script(compat: bool = True) -> str:
    """Every file of ``FILES``, in order, as one script (for the layout in schema ``awa``);
    without ``COMPAT`` once the contract step ran."""
    return "\n".join(read(name) for name in files(compat))


def files(compat: bool = True) -> tuple[str, ...]:
    """``FILES``, without ``COMPAT`` unless ``compat``."""
    return FILES if compat else tuple(f for f in FILES if f != COMPAT)


@cache
def signatures() -> dict[str, tuple[tuple[str, str], ...]]:
    """Each hot-path function's parameters (the files of ``CALLED``) as ``(name, type)``,
    ``p_`` left off the name."""
    found: dict[str, tuple[tuple[str, str], ...]] = {}
    text = "\n".join(read(name) for name in CALLED)
    for match in _SIGNATURE.finditer(text):
        params = []
        for declared in filter(None, (p.strip() for p in match.group(2).split(","))):
            parameter = _PARAMETER.match(declared)
            if parameter is None:
                raise ValueError(f"awa.{match.group(1)}: parameter {declared!r} is not "
                                 f"'p_<name> <type>'")
            params.append((parameter.group(1), parameter.group(2)))
        found[match.group(1)] = tuple(params)
    return found


class Procedure:
    """An installed function as the engine calls it.

    ``call``: ``SELECT * FROM awa.<name>(...)`` with each parameter bound by name, in
    binary where the type allows it (``awa.db.placeholder_format``).  ``ids_only``: its
    batch arrays are ids and leases only (no ``p_delay``), so the engine sends nothing else
    (``execution._params``).
    """

    def __init__(self, name: str) -> None:
        params = signatures().get(name)
        if params is None:
            raise ValueError(f"awa.{name} is in none of the files {', '.join(CALLED)}")
        self.name = name
        self.ids_only = "delay" not in dict(params)
        self.call = (f"SELECT * FROM awa.{name}("
                     + ", ".join(f"%({p}){placeholder_format(t)}::{t}" for p, t in params)
                     + ")")
