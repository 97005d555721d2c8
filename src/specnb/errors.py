"""One-line errors for the user, and one way to word them.

Every user-facing parser (sweep TOML, notebook parameters, traffic tables, ledgers) refuses
bad input in one line that names where the first problem is, so the messages read alike
everywhere and a caller can catch :class:`SpecnbError` for all of them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from pydantic import ValidationError

__all__ = ["SpecnbError", "first_error", "plain_name", "exit_code"]


class SpecnbError(ValueError):
    """Bad input or a run that cannot go on; the message is one line meant for the user."""


def first_error(exc: ValidationError, count_more: bool = False) -> str:
    """``"<field.path>: <message>"`` for the first error (``(top level)`` without a path);
    with ``count_more``, a ``" (+N more)"`` suffix when there were others."""
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
    more = f" (+{exc.error_count() - 1} more)" if count_more and exc.error_count() > 1 else ""
    return f"{loc}: {err['msg']}{more}"


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
        print(f"specnb: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"specnb: interrupted; finished points are kept, {resume}", file=sys.stderr)
        return 130
