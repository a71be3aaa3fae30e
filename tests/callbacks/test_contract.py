"""The signing contract and the callback URLs an outside system receives."""

from __future__ import annotations

import pytest

import awa
from awa import callback_contract as cc

# From the official BLAKE3 test vectors (keyed_hash, input length 0).
VECTOR_KEY = b"whats the Elvish word for friend"
VECTOR_KEYED_EMPTY = "92b2b75604ed3c761f9d6f62392c8a9227ad0ea3f09573e783f1498a4ed60d26"


def test_signature_is_the_blake3_keyed_hash_of_the_callback_id():
    assert cc.sign(VECTOR_KEY, "") == VECTOR_KEYED_EMPTY
    # Configuration may give the key in hex; sign() takes the raw 32 bytes, as awa-pg 0.6.9.
    assert cc.sign(cc.coerce_secret(VECTOR_KEY.hex()), "") == VECTOR_KEYED_EMPTY
    cid = "4b0d1b4e-4bd0-4c1c-9f0e-3d1c6d0f2a11"
    sig = cc.sign(VECTOR_KEY, cid)
    assert len(sig) == 64 and sig != VECTOR_KEYED_EMPTY
    assert cc.verify(VECTOR_KEY, cid, sig) and cc.verify(VECTOR_KEY, cid, sig.upper())
    with pytest.raises(TypeError, match="'None' is not an instance of 'str'"):
        cc.verify(VECTOR_KEY, cid, None)  # what 0.6.9 refused too
    assert not cc.verify(VECTOR_KEY, cid, " " + sig)
    assert not cc.verify(VECTOR_KEY, cid, sig[:-1] + ("0" if sig[-1] != "0" else "1"))
    assert not cc.verify(VECTOR_KEY, cid.replace("4b0d", "4b0e"), sig)
    assert not cc.verify(b"x" * 32, cid, sig)


@pytest.mark.parametrize("secret", [b"short", "zz" * 32, "ab" * 31, b"a" * 33])
def test_configured_secret_must_be_32_bytes(secret):
    with pytest.raises(awa.ValidationError, match="32 raw bytes or 64 hex characters"):
        cc.coerce_secret(secret)


@pytest.mark.parametrize(("secret", "message"), [
    (b"short", r"callback secret must be exactly 32 bytes \(got 5\)"),
    ("ab" * 32, "'str' object is not an instance of 'bytes'"),
    (bytearray(32), "'bytearray' object is not an instance of 'bytes'")])
def test_sign_takes_32_raw_bytes_as_awa_pg(secret, message):
    with pytest.raises(awa.ValidationError, match=message):
        cc.sign(secret, "id")


def test_build_callback_url():
    assert cc.build_callback_url("https://cb.example.com/", cc.DEFAULT_PATH_PREFIX, "abc",
                                 "complete") == "https://cb.example.com/api/callbacks/abc/complete"
    assert cc.build_callback_url("http://h:8470", "hooks/", "ab", "fail") == \
        "http://h:8470/hooks/ab/fail"
    assert cc.build_callback_url("http://h", "", "x", "resume") == "http://h/x/resume"


def test_reference_constants():
    assert cc.DEFAULT_HEARTBEAT_TIMEOUT_SECS == 3600.0
    assert cc.DEFAULT_PATH_PREFIX == "/api/callbacks"
    assert cc.SIGNATURE_HEADER == "X-Awa-Signature"
    assert awa.callback_contract is cc
