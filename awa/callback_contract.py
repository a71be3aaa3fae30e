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
from typing import Any

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


def _key(secret: Any) -> bytes:
    """The key ``sign``/``verify`` take: exactly 32 raw bytes, refused as awa-pg 0.6.9 did
    (``coerce_secret`` reads the hex form configuration gives)."""
    if not isinstance(secret, bytes):
        raise ValidationError(f"'{type(secret).__name__}' object is not an instance of 'bytes'")
    if len(secret) != config.CALLBACK_SECRET_BYTES:
        raise ValidationError(f"callback secret must be exactly {config.CALLBACK_SECRET_BYTES} "
                              f"bytes (got {len(secret)})")
    return secret


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValidationError("'None' is not an instance of 'str'" if value is None
                              else f"'{type(value).__name__}' object is not an instance of 'str'")
    return value


def sign(secret: bytes, callback_id: str) -> str:
    """Hex BLAKE3 keyed hash of ``callback_id``: the value of ``X-Awa-Signature``."""
    key = _key(secret)
    return blake3.blake3(_text(callback_id).encode(), key=key).hexdigest()


def verify(secret: bytes, callback_id: str, signature: str) -> bool:
    """Constant-time check of a presented signature (hex, either case)."""
    expected = sign(secret, callback_id)
    return hmac.compare_digest(expected, _text(signature).lower())


def build_callback_url(base: str, prefix: str, callback_id: str, action: str) -> str:
    """``<base><prefix>/<callback_id>/<action>``, e.g. ``https://h/api/callbacks/<id>/complete``
    (as awa-pg 0.6.9 joined them: slashes between the parts normalised, nothing encoded)."""
    path = _text(prefix).rstrip("/")
    if path and not path.startswith("/"):
        path = "/" + path
    return f"{_text(base).rstrip('/')}{path}/{_text(callback_id)}/{_text(action)}"
