"""The one user-facing error type of atari-data.

Every defect in user input is reported as ``<file>[:<line>]: <field>: <what is wrong>`` so a
person can jump straight to it; the CLI prints that line and exits 2.
"""

from __future__ import annotations

from pathlib import PurePath

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
        said = f"{where}{self.field + ': ' if self.field else ''}{self.message.strip()}"
        hint = cache_hint(self.file)
        return one_line(said + (f"; {hint}" if hint else ""))


def cache_hint(path: str | None) -> str:
    """For a path in the Hub client's cache, how to fetch it again (else ""): the cache keeps what it
    once fetched, so a copy cut or changed since is refused on every rerun, online too."""
    parts = PurePath(path or "").parts
    if "snapshots" not in parts[1:]:
        return ""
    repo = parts.index("snapshots", 1) - 1
    if not parts[repo].startswith(("datasets--", "models--")):
        return ""
    return f"it is the Hub cache's copy: remove {PurePath(*parts[: repo + 1])} to fetch it again"


def cut_off(e: BaseException | None) -> str:
    """How to say that the Hub was reached and a transfer then broke (a connection dropped or stalled
    mid-file), where running again resumes what arrived; "" for any other failure (a Hub not reached,
    one that answered no). The libraries wrap the transfer's error, so its causes are read too."""
    try:
        import httpx2  # huggingface_hub's HTTP client: its errors are not OSErrors
    except ImportError:  # called while an error is handled: a client without it is no cut transfer
        return ""

    broken = (httpx2.ReadError, httpx2.WriteError, httpx2.RemoteProtocolError, httpx2.ReadTimeout)
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, broken):
            why = one_line(str(e))[:160]
            again = "run the same command again to fetch the rest"
            return f"the download from the Hub was cut off ({type(e).__name__}: {why}); {again}"
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return ""
