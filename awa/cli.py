"""The `awa` command (issue: foundation)."""

import sys


def main() -> None:
    print("awa: not yet available", file=sys.stderr)
    sys.exit(3)
