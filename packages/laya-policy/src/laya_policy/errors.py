"""The errors laya-policy reports on one line (exit 2) rather than as a traceback, and their wording.
One home for the command line and for the training processes it starts, which report the same way."""

from __future__ import annotations

from atari_data.errors import AtariDataError
from laya_eval.errors import EvalError
from laya_protocol.errors import one_line, os_said

#: Bad input, a refused file, a missing path: what the user can fix.
EXPECTED = (OSError, ValueError, AtariDataError, EvalError)


class GroupFailed(RuntimeError):
    """A training process started by ``--processes`` crashed or was killed (not bad input: exit 1)."""


def said(e: BaseException) -> str:
    """``e`` as its one line says it: the package errors render themselves."""
    if isinstance(e, OSError):
        return os_said(e)
    return e.render() if isinstance(e, (AtariDataError, EvalError)) else one_line(str(e))
