"""The one user-facing error type of atari-data.

Every defect in user input is reported as ``<file>[:<line>]: <field>: <what is wrong>`` so a
person can jump straight to it; the CLI prints that line and exits 2.
"""

from __future__ import annotations

from laya_protocol.errors import one_line


class AtariDataError(Exception):
    """Bad input to atari-data: a file, a record or a field that is not as expected."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None, field: str | None = None):
        self.message = message
        self.file = file
        self.line = line
        self.field = field
        super().__init__(self.render())

    def render(self) -> str:
        where = ""
        if self.file is not None:
            where = str(self.file) + (f":{self.line}" if self.line is not None else "") + ": "
        return one_line(f"{where}{self.field + ': ' if self.field else ''}{self.message.strip()}")
