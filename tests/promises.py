"""The promises every command makes about bad input, as one check the hostile-input tests share.

1. It succeeds, or it exits 2 with one line ``error: <file>[:<line>]: <field>: <what>`` (commands
   that report defects, ``validate`` and ``doctor``, print one line per defect instead).
2. Nothing is written outside the target it was given.
3. Nothing is marked ready that does not validate.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path


def files_under(path: Path) -> set[Path]:
    return {p for p in Path(path).rglob("*")} if Path(path).exists() else set()


def run_cli(main, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def check_promises(main, argv: list, *, sandbox: Path, target: Path | None, report: bool = False) -> tuple[int, str]:
    """Run ``main(argv)`` and assert the promises; returns (exit code, stderr). ``sandbox`` is a folder
    holding the inputs and the target: anything new in it must lie inside ``target``."""
    before = files_under(sandbox)
    code, out, err = run_cli(main, argv)
    assert code in (0, 2), f"exit {code}: {err[-2000:]}"
    assert "Traceback" not in err and "Traceback" not in out
    if code == 2 and not report:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), f"not one error line: {err!r}"
    created = files_under(sandbox) - before
    outside = sorted(p for p in created if target is None or (p != target and target not in p.parents))
    assert not outside, f"written outside the target: {outside[:5]}"
    if target is not None and target.is_dir() and list(target.rglob("_READY")):
        from atari_data.layout.validate import validate

        result = validate(target, images=True)
        assert result.ok, f"marked ready but invalid: {result.defects[0].render()}"
    return code, err


def returns_within(seconds: float, call, fifos=()) -> tuple[bool, object]:
    """Run ``call`` in a daemon thread: (whether it returned in time, its value). A call still blocked
    then, in open() on one of ``fifos`` (waiting for the other end), is let go by opening that end
    and closing it again, so the failing test leaves no thread behind holding stdout redirected."""
    import os
    import threading

    box: list = []
    t = threading.Thread(target=lambda: box.append(call()), daemon=True)
    t.start()
    t.join(seconds)
    finished = not t.is_alive()
    if not finished:
        for fifo in fifos:
            os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))  # both ends: frees a reader or a writer
        t.join(30)
    return finished, box[0] if box else None


@contextlib.contextmanager
def lock_held_elsewhere(lock: Path):
    """Another process holding ``lock`` as a writer takes it (laya_protocol's FileLock) until the
    block ends; yields that process's pid."""
    import subprocess
    import sys

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from laya_protocol.locks import FileLock; "
            f"held = FileLock({str(lock)!r}, 'out', lambda m, f: RuntimeError(m)); print('held', flush=True); "
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.communicate("", timeout=30)
