"""The `awa-ops` command (issue: awa-ops)."""

import sys


def main() -> None:
    print("awa-ops: not yet available", file=sys.stderr)
    sys.exit(3)
