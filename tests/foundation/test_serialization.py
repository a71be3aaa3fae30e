"""Kinds and args encoding: what every producer and handler agree on."""

from __future__ import annotations

import dataclasses
import json
import pickle
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest

import awa
from awa.job import ARGS_SOURCE, claimed_job
from awa.serialization import ArgsDecoder, decode_args, derive_kind, encode_args, kind_for

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


# --- claimed jobs' args: checked before the handler, parsed on the first read (issue 48) ---
def pending_args(job: awa.Job[Any]) -> Any:
    """What a claimed job keeps of its args until their first read (None once read)."""
    return None if "args" in vars(job) else vars(job).get(ARGS_SOURCE)


def claimed(args_json: str) -> awa.Job[Any]:
    """A claimed job as the engines' claim rows make it (args as their JSON text)."""
    return claimed_job((1, "k", "default", args_json, 2, 1, 25, None, None, None, None,
                        [], {}, [], 1, None))


@dataclass
class AllDefaults:
    n: int = 0
    tags: list[str] = field(default_factory=list)


@dataclass
class PostInit:
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError("n must not be negative")


@dataclass
class OwnInit:
    n: int

    def __init__(self, **kw: Any) -> None:
        self.n = kw["n"]


@dataclass
class OddFactory:  # a default factory of its own: it might fail, so built before the handler
    n: int
    made: str = field(default_factory=lambda: "made")


@dataclass
class DuckModel:
    n: int

    @classmethod
    def model_validate(cls, data: dict[str, Any]) -> DuckModel:
        return cls(data["n"] * 10)


@pytest.mark.parametrize("args_type, deferred", [
    (dict, True), (Any, True), ("not_a_class", True),
    (SendEmail, True), (AllDefaults, True),  # plain dataclasses: built on the first read
    (PostInit, False), (OwnInit, False), (OddFactory, False), (DuckModel, False),
])
def test_claimed_args_read_as_decode_args_builds_them(args_type, deferred):
    """Whatever the args type, ``job.args`` is what ``decode_args`` builds from the stored
    object; types whose building may fail or validate are built before the handler."""
    text = '{"n": 3, "to": "a@b", "extra": [1]}'
    job = claimed(text)
    assert pending_args(job) == text
    ArgsDecoder(args_type).check(job)
    assert (pending_args(job) is not None) == deferred
    expected = decode_args(args_type, {"n": 3, "to": "a@b", "extra": [1]})
    assert job.args == expected and job.args is job.args
    assert pending_args(job) is None and "args" in vars(job)


@pytest.mark.parametrize("args_type, text", [
    (SendEmail, '{"subject": "no to"}'),  # a required field missing
    (SendEmail, "[1, 2]"), (dict, "[1, 2]"), (AllDefaults, '"text"'),  # not an object
    (PostInit, '{"n": -1}'),  # the class's own check
])
def test_claimed_args_that_do_not_fit_fail_the_check(args_type, text):
    """Args that do not fit fail before the handler runs, read or not, with
    ``decode_args``'s message (the job then fails at once, docs/architecture.md §4)."""
    with pytest.raises(awa.SerializationError) as want:
        decode_args(args_type, json.loads(text))
    with pytest.raises(awa.SerializationError) as got:
        ArgsDecoder(args_type).check(claimed(text))
    assert str(got.value) == str(want.value)


def test_a_claimed_job_waiting_for_its_first_read_copies_and_pickles():
    job = claimed('{"to": "a@b"}')
    ArgsDecoder(SendEmail).check(job)
    for other in (pickle.loads(pickle.dumps(job)), dataclasses.replace(job)):
        assert other.args == SendEmail("a@b")
    assert job.args == SendEmail("a@b")


def test_args_set_before_the_first_read_win():
    job = claimed('{"to": "a@b"}')
    job.args = {"replaced": True}
    assert job.args == {"replaced": True} and pending_args(job) is None
    ArgsDecoder(dict).check(job)  # already parsed: checked as decode_args does
    assert job.args == {"replaced": True}
