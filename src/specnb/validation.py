"""One-line messages from pydantic validation errors.

Every user-facing parser (sweep TOML, notebook parameters, traffic tables) refuses bad input
in one line that names where the first problem is, so the messages read alike everywhere.
"""

from __future__ import annotations

from pydantic import ValidationError

__all__ = ["first_error"]


def first_error(exc: ValidationError, count_more: bool = False) -> str:
    """``"<field.path>: <message>"`` for the first error (``(top level)`` without a path);
    with ``count_more``, a ``" (+N more)"`` suffix when there were others."""
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
    more = f" (+{exc.error_count() - 1} more)" if count_more and exc.error_count() > 1 else ""
    return f"{loc}: {err['msg']}{more}"
