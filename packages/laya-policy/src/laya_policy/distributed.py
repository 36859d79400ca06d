"""Data parallelism under ``torchrun`` / ``accelerate launch`` (``WORLD_SIZE`` > 1) or started
here (:func:`launch`, ``laya-policy train --processes N``), and the CPU thread choice every
training process makes.

Every process draws its own batch from its own slice of each group; gradients are averaged after
each backward pass; rank 0 evaluates and writes. With one process every method is a no-op.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import torch
from tqdm import tqdm

from laya_policy.errors import EXPECTED, GroupFailed, said
from laya_protocol.errors import Terminated, cause, ctrl_c_ignored, signal_name, stopped, terminations_raised


def launch(fn, args: tuple, processes: int) -> None:
    """``fn(*args)`` in ``processes`` local processes of one data-parallel group, as ``torchrun
    --nproc-per-node`` would start them (RANK, WORLD_SIZE, LOCAL_RANK, a rendezvous store served
    here), from this process, which waits for them. The first to fail stops the others. An error a
    process reports on one line (bad input, a refused file) is raised here as a ValueError with that
    line; a process that crashed or was killed as a :class:`GroupFailed` saying which and how (a
    crash prints its own traceback first). Each process dies with this one, so none outlives the
    lock its starter holds.

    Plain multiprocessing, not ``torch.multiprocessing.spawn``: torch's passes each process's error
    back as a pickle in the temporary folder, which its join unpickles and which a Ctrl-C leaves behind."""
    import multiprocessing

    # The rendezvous store is served from here, as torchrun's agent serves it: its port is bound
    # before any process starts (a port found free and given back could be taken in the seconds
    # before rank 0 bound it), and every rank is its client (TORCHELASTIC_USE_AGENT_STORE).
    store = torch.distributed.TCPStore("127.0.0.1", 0, processes, is_master=True, wait_for_workers=False)
    port = store.port
    spawn = multiprocessing.get_context("spawn")
    deaf = signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # started in the background (`cmd &`): so are they
    with tempfile.TemporaryDirectory(prefix="laya-launch-") as errors:
        group = [
            spawn.Process(target=_process, args=(rank, processes, port, os.getpid(), errors, deaf, fn, args))
            for rank in range(processes)
        ]
        try:
            # Each process starts deaf to Ctrl-C (an ignored signal stays ignored across exec; a mask
            # does not): one that came while they imported torch, seconds, was a traceback from each.
            # `_end` leaves them a `stop` file instead. A Ctrl-C in these milliseconds is lost.
            with ctrl_c_ignored():
                for p in group:
                    p.start()
            _wait(group, errors)
        except BaseException as e:
            # Ctrl-C reaches every process, often twice (uv passes it on): end them here, or the
            # interpreter's exit waits for them and the next SIGINT is a traceback. A SIGTERM or a
            # SIGHUP reached this process alone: pass it on at once.
            if isinstance(e, Terminated):
                for p in group:
                    if p.is_alive():
                        p.terminate()
            _end(group, errors)
            raise


def _wait(group: list, errors: str) -> None:
    """Wait for every process of ``group``; at the first that ends without finishing its work (no
    ``N.done``), end the rest and raise for the cause. One that finished its work counts as done
    however it ended (a signal from outside after its last write)."""
    from multiprocessing.connection import wait

    pending = {p.sentinel: (rank, p) for rank, p in enumerate(group)}
    while pending:
        for sentinel in wait(list(pending)):
            rank, p = pending.pop(sentinel)
            p.join()
            if not Path(errors, f"{rank}.done").exists():  # exit 0 too: its work exited early (a SystemExit)
                stopped = _end(group, errors)
                raise _cause(group, stopped, Path(errors))


def _cause(group: list, stopped: set[int], errors: Path) -> Exception:
    """Why ``group`` failed, when one process's failure ends the others' next all-reduce with an
    error of their own (gloo's "Connection reset by peer"): a line a process wrote (bad input) first;
    then a process ended from outside (a signal this process did not send, its own Ctrl-C) that left
    no traceback; then the traceback written first, printed here as the only one."""
    lines = sorted(errors.glob("*.txt"))
    if lines:
        return ValueError(lines[0].read_text(encoding="utf-8"))
    n = len(group)
    for rank, p in enumerate(group):  # ended from outside: a signal, a Ctrl-C of its own, an exit with no word
        said_why = any(errors.joinpath(f"{rank}.{kind}").exists() for kind in ("crash", "done"))
        if p.exitcode not in (0, None) and rank not in stopped and not said_why:
            how = signal_name(-p.exitcode) if p.exitcode < 0 else _exit_named(p.exitcode)
            return GroupFailed(f"training process {rank} of {n} was ended ({how}); the others have ended")
    crashes = sorted(errors.glob("*.crash"), key=lambda f: f.stat().st_mtime_ns)
    if crashes:
        sys.stderr.write(crashes[0].read_text(encoding="utf-8"))
        first = crashes[0].stem
        return GroupFailed(f"training process {first} of {n} failed (its traceback is above); the others have ended")
    codes = ", ".join(f"{rank}: {p.exitcode}" for rank, p in enumerate(group))
    return GroupFailed(f"the training processes ended without saying why (exit codes {codes})")


def _exit_named(code: int) -> str:
    """A process's exit code in words: 128 + N from a signal it turned into its exit (Ctrl-C, SIGTERM,
    SIGHUP: see ``_process``) is that signal's name."""
    caught = {128 + s: s.name for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    return caught.get(code, f"exit code {code}")


def _end(processes: list, errors: str) -> set[int]:
    """Reap ``processes``, deaf to further SIGINTs while it waits: five seconds in all for them to end
    on their own (a Ctrl-C reached them too; a failed process's peers find it gone; one still
    starting finds the ``stop`` file), then SIGTERM, then SIGKILL. Returns the ranks it had to signal."""
    stopped = set()
    with ctrl_c_ignored():
        Path(errors, "stop").touch()
        deadline = time.monotonic() + 5
        for p in processes:
            if p.pid is not None:
                p.join(max(0.0, deadline - time.monotonic()))
        for rank, p in enumerate(processes):
            if p.is_alive():
                stopped.add(rank)
                p.terminate()
                p.join(10)
            if p.is_alive():
                p.kill()
                p.join()
    return stopped


def _process(rank: int, world: int, port: int, parent: int, errors: str, deaf: bool, fn, args: tuple) -> None:
    """Process ``rank``'s life: :func:`_work`, then out without the interpreter's teardown, its group
    still up. After that teardown C++ destroys gloo's objects, and with the group up that sometimes
    aborted: "terminate called without an active exception" on the starter's terminal, after its one
    line. So ``fn`` may not count on atexit handlers or finalizers: what it writes it closes
    itself; what it printed is flushed here, Python's buffers and C's."""
    code = 1
    try:
        code = _work(rank, world, port, parent, errors, deaf, fn, args)
    except SystemExit as e:  # from fn: its code, and its words, as the interpreter would
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    finally:  # anything else raised past _work (a second Ctrl-C in an except branch) leaves with 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed or broken terminal: nothing more to say there
                pass
        ctypes.CDLL(None).fflush(None)
        os._exit(code)


def _work(rank: int, world: int, port: int, parent: int, errors: str, deaf: bool, fn, args: tuple) -> int:
    """``fn(*args)`` as process ``rank`` of ``world``; returns the exit code."""
    # PR_SET_PDEATHSIG: end with the starter, even if it is killed, with a signal that a starter run
    # as `nohup ... &` does not make its processes ignore (SIGINT, which torch's launcher asks for).
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the line above took hold
        return 1
    # tqdm's default lock is a named semaphore, which a killed process leaves to multiprocessing's
    # resource tracker (it warns on the terminal); one process's bars need a thread lock only
    tqdm.set_lock(threading.RLock())
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        TORCHELASTIC_USE_AGENT_STORE="True",  # the starter serves the store (see launch)
    )
    try:
        if not deaf:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # ignored while it started (see launch)
        if Path(errors, "stop").exists():  # the group ended (a Ctrl-C, a peer's failure) while this one started
            return 0
        with terminations_raised():  # a SIGTERM (the starter's stop, its death) unwinds: no half-written file
            fn(*args)
    except EXPECTED as e:  # reported on one line, as the command line would
        Path(errors, f"{rank}.txt").write_text(said(e) or cause(e), encoding="utf-8")
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM, SIGHUP: the starter says so, once
        return stopped(e)[1]
    except Exception:  # noqa: BLE001 - written whole, not swallowed: the starter prints the first traceback, not each peer's that followed from it
        Path(errors, f"{rank}.crash").write_text(traceback.format_exc(), encoding="utf-8")
        return 1
    Path(errors, f"{rank}.done").touch()
    return 0


class Distributed:
    def __init__(self, device: str):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        # The flags the loop agrees on travel as tensors on the backend's device: NCCL takes CUDA ones only.
        self.device = torch.device("cpu")
        if self.world > 1 and device.startswith("cuda"):
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local)  # so "cuda" means this process's own GPU
            self.device = torch.device("cuda", local)
        if self.world > 1 and not torch.distributed.is_initialized():
            torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def average_gradients(self, params) -> None:
        """Every gradient averaged over the processes, in one collective: one all-reduce a tensor
        (the tiny preset has 106) cost more in gloo's round trips than the step's compute, and two
        processes on two cores trained slower than one."""
        if self.world == 1:
            return
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        torch.distributed.all_reduce(flat)
        flat /= self.world
        at = 0
        for g in grads:
            g.copy_(flat[at : at + g.numel()].view_as(g))
            at += g.numel()

    def any(self, flag: bool) -> bool:
        """True on every process when ``flag`` is true on any (so all stop at the same step)."""
        if self.world == 1:
            return flag
        t = torch.tensor([float(flag)], device=self.device)
        torch.distributed.all_reduce(t)
        return bool(t.item())

    def agree(self, model) -> bool:
        """Whether every process holds the same weights (they must, after every step)."""
        if self.world == 1:
            return True
        with torch.no_grad():  # a float of a tensor that needs grad warns
            total = float(sum(p.double().sum() for p in model.parameters()))
        digest = torch.tensor([total], dtype=torch.float64, device=self.device)
        all_ = [torch.zeros_like(digest) for _ in range(self.world)]
        torch.distributed.all_gather(all_, digest)
        return all(torch.equal(a, all_[0]) for a in all_)


def set_threads(threads: int | None, device: str) -> int:
    """Fix torch's intra-op threads and return the number chosen.

    On a CPU the default is one thread per process. torch's own default (one per core) makes its
    OpenMP threads spin against any other busy process: measured on two cores, a training step took
    5.5 s median with the default against 0.31 s with one thread while another process ran. One
    thread leaves the second core to the frame-decoding thread and to whatever else the machine does.
    On a GPU the host threads matter little; the default leaves torch's choice alone.
    """
    if threads is None:
        if device.startswith("cuda"):
            return torch.get_num_threads()
        threads = 1
    if threads < 1:
        raise ValueError(f"--threads {threads}: expected 1 or more")
    torch.set_num_threads(threads)
    return threads


def check_device(device: str) -> None:
    """``--device`` names a device torch knows and this machine has; refused before any work."""
    try:
        kind = torch.device(device).type
    except RuntimeError:  # its message lists the 20 device types torch knows, not the two we run on
        kind = None
    if kind not in ("cpu", "cuda"):  # mps and the rest failed at the first tensor, with a traceback
        raise ValueError(f"--device {device}: expected cpu or cuda[:N], the devices laya-policy runs on")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: this machine has no CUDA device torch can use")
