"""Kinds and args encoding: what every producer and handler agree on."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pytest

import awa
from awa.serialization import decode_args, derive_kind, encode_args, kind_for

from .conftest import HTMLToPDF, SendEmail


@pytest.mark.parametrize("name, kind", [
    ("SendEmail", "send_email"), ("SMTPEmail", "smtp_email"), ("HTMLToPDF", "html_to_pdf"),
    ("Job", "job"), ("ResizeImage2X", "resize_image2_x"), ("already_snake", "already_snake"),
])
def test_derive_kind_snake_cases_class_names(name, kind):
    assert derive_kind(name) == kind
    assert awa.derive_kind(name) == kind


def test_kind_for_uses_class_or_override():
    assert kind_for(HTMLToPDF("u")) == "html_to_pdf"
    assert kind_for(HTMLToPDF("u"), "render") == "render"
    assert kind_for({"a": 1}, "raw") == "raw"
    with pytest.raises(awa.ValidationError, match="explicit kind="):
        kind_for({"a": 1})


def test_encode_dataclass_dict_and_duck_typed_model():
    class Model:  # the pydantic protocol, without pydantic
        def model_dump(self, mode="python"):
            return {"x": 1, "mode": mode}

    assert encode_args(SendEmail("a@b")) == {"to": "a@b", "subject": "hi"}
    assert encode_args({"n": [1, 2]}) == {"n": [1, 2]}
    assert encode_args(Model()) == {"x": 1, "mode": "json"}


def test_encode_rejects_non_json_in_one_line():
    with pytest.raises(awa.SerializationError) as info:
        encode_args({"when": datetime(2024, 1, 1)})
    assert "\n" not in str(info.value) and "not JSON-serializable" in str(info.value)
    with pytest.raises(awa.SerializationError):
        encode_args(["not", "an", "object"])


def test_decode_builds_the_args_type_and_reports_misfits():
    assert decode_args(SendEmail, {"to": "x"}) == SendEmail("x")
    # Fields a newer producer added are ignored, like pydantic's default.
    assert decode_args(SendEmail, {"to": "x", "extra": 1}) == SendEmail("x")
    assert decode_args(dict, {"a": 1}) == {"a": 1}
    with pytest.raises(awa.SerializationError, match="cannot build SendEmail"):
        decode_args(SendEmail, {"subject": "missing to"})
    with pytest.raises(awa.SerializationError):
        decode_args(SendEmail, [1, 2])


def test_decode_uses_model_validate_when_present() -> None:
    @dataclass
    class Validated:
        n: int

        @classmethod
        def model_validate(cls, data):
            if not isinstance(data.get("n"), int):
                raise ValueError("n must be an int")
            return cls(data["n"])

    assert decode_args(Validated, {"n": 3}) == Validated(3)
    with pytest.raises(awa.SerializationError, match="n must be an int"):
        decode_args(Validated, {"n": "x"})
