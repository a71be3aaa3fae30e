"""Error fingerprints (``awa.fingerprint``): one poison bug is one group.  They live in
``awa`` so the CLI's bulk commands (``--fingerprint``) match the console's groups exactly."""

from awa.fingerprint import MAX_TEXT, ErrorGroup, fingerprint, group_errors, normalize

__all__ = ["MAX_TEXT", "ErrorGroup", "fingerprint", "group_errors", "normalize"]
