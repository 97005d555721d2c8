"""One-line errors for the user, and one way to word them.

Every user-facing parser (sweep TOML, notebook parameters, study parameters, traffic tables,
ledgers) refuses bad input in one line that names where the first problem is and what would
be accepted, so the messages read alike everywhere and a caller can catch
:class:`SpecnbError` for all of them. A misspelt key is named with the closest known one
(:func:`unknown_key`), never hidden behind the "field required" it causes.
"""

from __future__ import annotations

import difflib
import re
import sys
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

__all__ = ["SpecnbError", "first_error", "unknown_key", "RENAMED_KEYS", "read_toml", "did_you_mean", "plain_name", "exit_code",
           "one_line", "EXIT_BAD_INPUT", "EXIT_FAILED_POINTS", "EXIT_INTERRUPTED"]

EXIT_FAILED_POINTS = 1  # the run finished, but some points have no usable measurement
EXIT_BAD_INPUT = 2  # refused before anything started (or a file that cannot be read or written)
EXIT_INTERRUPTED = 130  # Ctrl-C: finished points are kept


class SpecnbError(ValueError):
    """Bad input or a run that cannot go on; the message is one line meant for the user."""


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest known word, else ``" (known: a, b, ...)"``."""
    known = sorted(str(k) for k in known)
    close = difflib.get_close_matches(str(word), known, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    if not known:
        return ""
    shown = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
    return f" (known: {shown})"


def read_toml(path: Any, error: type[SpecnbError] = SpecnbError) -> dict[str, Any]:
    """A TOML file's tables, or ``error`` in one line naming the file (unreadable, or not TOML)."""
    import tomllib
    from pathlib import Path

    path = Path(path)
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise error(f"{path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML ({exc})") from None


# keys a schema version replaced: a user's old file is told what took their place, not the
# nearest spelling (requests_per_user is not a misspelt request_timeout_s)
RENAMED_KEYS = {
    "requests_per_user": "panel_size and work_floor_tokens (points are sized in work over one prompt panel "
                         "since ledger schema v2)",
}


def unknown_key(key: str, known: Iterable[str], what: str = "key") -> str:
    """``"unknown key 'concurency' (did you mean 'concurrency'?)"``; a key a schema version
    replaced names what replaced it."""
    if key in RENAMED_KEYS:
        return f"{what} {key!r} is gone: it was replaced by {RENAMED_KEYS[key]}"
    return f"unknown {what} {key!r}{did_you_mean(key, known)}"


# --------------------------------------------------------------------------- pydantic errors

def _members(t: Any) -> list[Any]:
    """The types a field annotation can hold (unions and Annotated unwrapped, None dropped)."""
    origin = typing.get_origin(t)
    if origin is typing.Annotated:
        return _members(typing.get_args(t)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(t) for m in _members(a) if m is not type(None)]
    return [t]


def _step(t: Any, part: str | int) -> Any:
    """The type one step of an error location leads to, or None when it cannot be followed."""
    for m in _members(t):
        origin, args = typing.get_origin(m), typing.get_args(m)
        if isinstance(m, type) and issubclass(m, BaseModel):
            if isinstance(part, str) and part in m.model_fields:
                return m.model_fields[part].annotation
            if part == m.__name__:  # pydantic tags a union member by its class name
                return m
        elif origin in (list, tuple, set, frozenset) and isinstance(part, int) and args:
            return args[0]
        elif origin is dict and isinstance(part, str) and len(args) == 2:
            return args[1]
    return None


def _known_at(model: type[BaseModel] | None, loc: tuple[str | int, ...]) -> list[str] | None:
    t: Any = model
    for part in loc:
        if t is None:
            return None
        t = _step(t, part)
    for m in _members(t) if t is not None else []:
        if isinstance(m, type) and issubclass(m, BaseModel):
            # and the keys a before-validator folds into a field (a sweep's flat load keys)
            return [*m.model_fields, *sorted(set(getattr(m, "input_keys", ())) - set(m.model_fields))]
    return None


_TAG = re.compile(r"^(str|int|float|bool|none|[A-Z]\w*|(list|dict|tuple|set|function-\w+|literal)\[.*)$")


_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|AUTH)", re.IGNORECASE)


def _is_tag(part: str | int) -> bool:
    """A union member's tag in an error location ('str', 'TrafficSource'), not a key."""
    return isinstance(part, str) and bool(_TAG.match(part))


def _branch(loc: tuple[str | int, ...]) -> tuple[tuple[str | int, ...], str] | None:
    """(where a union was tried, which member) for an error inside a union, else None."""
    for i, part in enumerate(loc):
        if _is_tag(part):
            return tuple(loc[:i]), str(part)
    return None


def _where(loc: Iterable[str | int]) -> str:
    return ".".join(str(x) for x in loc if not _is_tag(x))


def _input(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def first_error(exc: ValidationError, count_more: bool = False,
                model: type[BaseModel] | None = None) -> str:
    """``"<field.path>: <message>"`` for the first error (just the message without a path).

    An unknown key comes first, named with the closest known key of ``model`` at that place
    (``"unknown key 'concurency' (did you mean 'concurrency'?)"``): the "field required" it
    causes would hide it. With ``count_more``, a ``" (+N more)"`` suffix when there were
    other errors (not counting the field the misspelling was meant to be).
    """
    # a union tried every member: the errors of a plain-type member ('str') rarely say what
    # was wrong with a table that was meant for a model member
    errors = sorted(exc.errors(), key=lambda e: (e["type"] != "extra_forbidden",
                                                 any(_is_tag(p) and not p[:1].isupper() for p in e["loc"])))
    extra = [e for e in errors if e["type"] == "extra_forbidden"]
    if extra:
        err = extra[0]
        *parent, key = err["loc"]
        known = _known_at(model, tuple(parent))
        if known is None:  # no model to follow: the fields said missing at the same place
            known = [e["loc"][-1] for e in errors if e["type"] == "missing"
                     and tuple(e["loc"][:-1]) == tuple(parent)]
        text = unknown_key(str(key), [k for k in known if isinstance(k, str)])
        where = _where(parent)
        meant = difflib.get_close_matches(str(key), [str(k) for k in known], n=1, cutoff=0.6)
        others = [e for e in errors if e is not err and not (
            e["type"] == "missing" and meant and tuple(e["loc"]) == (*parent, meant[0]))]
        msg = f"{where}: {text}" if where else text
    else:
        err = errors[0]
        loc = _where(err["loc"])
        text = err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        got = ""
        # the value given, where the message does not say it already; never near a secret
        if (err["type"] not in ("missing", "value_error", "assertion_error")
                and isinstance(err.get("input"), (str, int, float, bool))
                and not any(_SECRET.search(str(p)) for p in err["loc"])):
            got = f" (got {_input(err['input'])})"
        msg = f"{loc}: {text}{got}" if loc else f"{text}{got}"
        others = errors[1:]
    # a union member the input was not meant for ('str' beside 'TrafficSource') is not another mistake
    mine = _branch(err["loc"])
    others = [e for e in others if not (mine and (b := _branch(e["loc"])) and b[0] == mine[0] and b[1] != mine[1])]
    more = f" (+{len(others)} more)" if count_more and others else ""
    return " ".join(msg.split()) + more  # one line, whatever the message held


def plain_name(value: str, what: str) -> str:
    """A name that becomes one folder of a ledger path: non-empty, no '/', not hidden."""
    if not value or "/" in value or value.startswith("."):
        raise ValueError(f"{what} {value!r} must be a plain folder name: non-empty, without '/', "
                         "not starting with '.'")
    return value


def exit_code(main: Callable[[], int], resume: str, also: tuple[type[BaseException], ...] = ()) -> int:
    """Run a command-line entry point: a :class:`SpecnbError` (or one of ``also``) is one line on
    stderr and exit 2; Ctrl-C says what is kept and how to resume (``resume``), exit 130."""
    try:
        return main()
    except (SpecnbError, *also) as exc:
        print(f"specnb: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"specnb: interrupted; finished points are kept, {resume}", file=sys.stderr)
        return EXIT_INTERRUPTED


def one_line(exc: BaseException) -> str:
    """An exception as one line: its message with line breaks folded."""
    return " ".join(str(exc).split()) or type(exc).__name__
