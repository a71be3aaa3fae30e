"""``python -m awa_tui``: the same console as the ``awa-tui`` command (used by ``awa serve``)."""

from awa_tui import main

main()
