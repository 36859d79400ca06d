"""One writer at a time: an exclusive lock held through a file, used by every command that writes
an output another run of it could be writing (atari-data's game folders and packs, laya-eval's
results files).

The lock is flock-ed (the kernel releases it if the holder dies), never opened through a symlink,
and removed on release, so a finished output holds no trace. A second writer is refused at once;
the caller chooses the error it raises (``error(message, path)``), so each package reports it in
its own one-line form.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Callable
from pathlib import Path


class FileLock:
    def __init__(self, path: str | os.PathLike, what: str, error: Callable[[str, str], Exception]):
        self._fd: int | None = None
        self.path, self.what = Path(path), what
        while True:
            try:  # never through a symlink: a planted link would have us truncate whatever it points at
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            except OSError as e:
                why = f"{e.strerror}; a symlink?" if e.errno == errno.ELOOP else e.strerror
                raise error(f"cannot be opened as a lock file ({why})", str(self.path)) from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise error("is not a regular file", str(self.path))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
                os.close(fd)
                raise error(
                    f"another process (pid {holder}) is writing {self.what}; wait for it to finish "
                    "or stop it, then rerun",
                    str(self.path),
                ) from None
            try:  # the previous holder may have removed the file between our open and our flock
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        try:  # a full disk: the file is this lock's, so it goes, and the error names it
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as e:
            try:
                self.path.unlink(missing_ok=True)
            except OSError:  # a file left behind is free once closed: the write's error is the one to say
                pass
            finally:
                os.close(fd)
            raise OSError(e.errno, e.strerror, str(self.path)) from None
        self._fd = fd

    @classmethod
    def beside(cls, target: str | os.PathLike, what: str, error: Callable[[str, str], Exception]) -> FileLock:
        """The lock of ``target``: ``.NAME.lock`` in its folder, so a finished output holds none."""
        target = Path(target)
        return cls(target.parent / f".{target.name}.lock", what, error)

    def release(self) -> None:
        fd, self._fd = self._fd, None  # first: a release cut short by a signal is not run again by __del__
        if fd is not None:
            try:  # while still held: no one can lock the old file meanwhile
                self.path.unlink(missing_ok=True)
            except OSError:  # a folder made read-only, or the name taken by another kind of file: a
                pass  # file left behind is free once closed, and the next run takes it; the command's own error stands
            finally:
                os.close(fd)

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):
        self.release()
