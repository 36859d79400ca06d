"""The one user-facing error type of laya-eval."""

from __future__ import annotations

from laya_protocol.errors import one_line


class EvalError(Exception):
    """Bad input to laya-eval: a file, a setting or a policy that is not as expected."""

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None):
        self.message, self.file, self.field = message, file, field
        super().__init__(self.render())

    def render(self) -> str:
        where = f"{self.file}: " if self.file else ""
        return one_line(f"{where}{self.field + ': ' if self.field else ''}{self.message}")
