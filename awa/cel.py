"""CEL expressions that decide what a callback payload does to its job.

Expressions are compiled when the callback is registered, so a typo fails the
handler's ``register_callback`` call instead of every later callback.  The
only variable is ``payload`` (the callback's JSON body); compile also rejects
any other free name, because a misspelt variable would otherwise fail at
every evaluation and silently fall through to the default action.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from awa.db import one_line
from awa.job import ValidationError

if TYPE_CHECKING:  # celpy/lark cost ~300 ms to import: loaded on first compile only
    import celpy
    import lark

VARIABLE = "payload"
# Macros whose first argument binds a new name inside the expression.
_BINDING_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
# Names CEL resolves itself (type denotations usable as values).
_BUILTIN_NAMES = frozenset({"int", "uint", "double", "bool", "string", "bytes", "list",
                            "map", "type", "null_type", "dyn"})


class CelEvaluationError(Exception):
    """An expression failed at evaluation time (bad type, missing field...)."""


@lru_cache(maxsize=1)
def _environment() -> celpy.Environment:
    import celpy

    return celpy.Environment()


@lru_cache(maxsize=1024)
def compile_expression(source: str, role: str = "expression") -> celpy.Runner:
    """A runnable program for ``source``; ``ValidationError`` with a one-line reason if bad."""
    if not isinstance(source, str) or not source.strip():
        raise ValidationError(f"CEL {role} must be a non-empty string")
    import celpy

    env = _environment()
    try:
        tree = env.compile(source)
    except celpy.CELParseError as exc:
        context = str(exc.__context__ or "").splitlines()
        reason = context[0].split(" at line")[0].rstrip(", ") if context else "syntax error"
        reason = " ".join(reason.split()) or "syntax error"
        raise ValidationError(f"invalid CEL {role} {source!r}: {reason} at column "
                              f"{getattr(exc, 'column', '?')}") from None
    unknown = sorted(_free_names(tree) - {VARIABLE} - _BUILTIN_NAMES)
    if unknown:
        raise ValidationError(f"invalid CEL {role} {source!r}: unknown variable "
                              f"{unknown[0]!r} (the only variable is {VARIABLE!r})")
    return env.program(tree)


def validate(**expressions: str | None) -> None:
    """Compile each given expression (keyword = its role), rejecting the first bad one."""
    for role, source in expressions.items():
        if source is not None:
            compile_expression(source, role)


def evaluate(source: str, payload: Any, role: str = "expression") -> Any:
    """Evaluate with ``payload`` bound; returns plain Python (dict, list, str, ...)."""
    program = compile_expression(source, role)
    import celpy

    try:
        result = program.evaluate({VARIABLE: celpy.json_to_cel(payload)})
    except celpy.CELEvalError as exc:
        raise CelEvaluationError(f"CEL {role} {source!r} failed: "
                                 f"{one_line(exc.args[0] if exc.args else exc)}") from None
    if isinstance(result, celpy.CELEvalError):
        raise CelEvaluationError(f"CEL {role} {source!r} failed: {one_line(result.args[0])}")
    return to_python(result)


def evaluate_bool(source: str, payload: Any, role: str = "expression") -> bool:
    """A condition: anything but a boolean result is an evaluation error."""
    value = evaluate(source, payload, role)
    if not isinstance(value, bool):
        raise CelEvaluationError(f"CEL {role} {source!r} returned {type(value).__name__}, "
                                 f"not a boolean")
    return value


def to_python(value: Any) -> Any:
    """CEL values back to JSON-compatible Python values."""
    import celpy

    return json.loads(json.dumps(value, cls=celpy.CELJSONEncoder))


def _free_names(tree: lark.Tree[Any]) -> set[str]:
    """Identifiers used as variables, minus those a macro binds."""
    import lark

    used: set[str] = set()
    bound: set[str] = set()
    for node in tree.iter_subtrees():
        if node.data == "primary":
            for child in node.children:
                if isinstance(child, lark.Tree) and child.data == "ident":
                    used.add(str(child.children[0]))
        elif node.data == "member_dot_arg" and len(node.children) >= 3:
            method, args = node.children[1], node.children[2]
            if str(method) in _BINDING_MACROS and isinstance(args, lark.Tree) and args.children:
                bound |= {str(t) for t in args.children[0].scan_values(
                    lambda v: isinstance(v, lark.Token))
                    if isinstance(t, lark.Token) and t.type == "IDENT"}
    return used - bound
