"""The wire contract between awa and an external system that calls back.

An outside system receives a callback id and URLs built here; it proves it
was handed that id by presenting ``X-Awa-Signature``: the hex BLAKE3 keyed
hash of the callback id under a 32-byte secret shared by the HTTP worker
(which signs) and the callback receiver (which verifies).  The signature is
a capability for exactly one callback id, so leaking one cannot resolve
another job.
"""

from __future__ import annotations

import hmac
from urllib.parse import quote

import blake3

from awa import config
from awa.job import ValidationError

DEFAULT_HEARTBEAT_TIMEOUT_SECS = config.CALLBACK_TIMEOUT_SECONDS
DEFAULT_PATH_PREFIX = config.CALLBACK_PATH_PREFIX
SIGNATURE_HEADER = "X-Awa-Signature"
ACTIONS = ("complete", "fail", "heartbeat", "resume", "resolve")


def coerce_secret(secret: bytes | str) -> bytes:
    """The 32-byte key from raw bytes, or from its 64-character hex form."""
    size = config.CALLBACK_SECRET_BYTES
    if isinstance(secret, (bytes, bytearray)) and len(secret) == size:
        return bytes(secret)
    text = secret.decode("ascii", "replace") if isinstance(secret, (bytes, bytearray)) else secret
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        key = b""
    if len(key) != size:
        raise ValidationError(
            f"callback secret must be {size} raw bytes or {2 * size} hex characters "
            f"(generate one with: python -c 'import secrets; print(secrets.token_hex({size}))')")
    return key


def sign(secret: bytes | str, callback_id: str) -> str:
    """Hex BLAKE3 keyed hash of ``callback_id``: the value of ``X-Awa-Signature``."""
    return blake3.blake3(str(callback_id).encode(), key=coerce_secret(secret)).hexdigest()


def verify(secret: bytes | str, callback_id: str, signature: str | None) -> bool:
    """Constant-time check of a presented signature; False for a missing one."""
    if not signature:
        return False
    return hmac.compare_digest(sign(secret, callback_id), signature.strip().lower())


def build_callback_url(base: str, prefix: str, callback_id: str, action: str) -> str:
    """``<base><prefix>/<callback_id>/<action>``, e.g. ``https://h/api/callbacks/<id>/complete``."""
    if action not in ACTIONS:
        raise ValidationError(f"unknown callback action {action!r}; expected one of "
                              f"{', '.join(ACTIONS)}")
    path = "/" + (prefix or "").strip("/")
    if path == "/":
        path = ""
    return f"{base.rstrip('/')}{path}/{quote(str(callback_id), safe='')}/{action}"
