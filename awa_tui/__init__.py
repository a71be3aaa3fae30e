"""awa_tui: the live terminal console; reads only through awa_ops.  ``awa_tui.demo`` is the
demo, the one application that uses every layer (workers, the exporter, this console), so
it sits on top.

Installed by the ``tui`` extra (``pip install 'awa-py[tui]'``): this module
imports nothing of Textual, so ``awa-tui`` without the extra says so in one line.
"""

from __future__ import annotations

import sys


def main() -> None:
    """The ``awa-tui`` command (``python -m awa_tui``): the console, once Textual is there."""
    from awa import extras

    if extras.missing_modules("tui"):
        print(f"error: {extras.install_hint('tui', 'awa-tui')}", file=sys.stderr)
        sys.exit(1)
    from awa_tui.app import main as console

    console()
