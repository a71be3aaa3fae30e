"""The `awa-tui` Textual app (issue: awa-tui)."""

import sys


def main() -> None:
    print("awa-tui: not yet available", file=sys.stderr)
    sys.exit(3)
