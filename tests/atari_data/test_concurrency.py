"""Two writers at once, and writers killed mid-way: nothing is lost, raced or left running."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atari_data.cli import main
from atari_data.layout.validate import validate

from ..processes import alive, as_from_a_terminal, deaf_to_ctrl_c, descendants, ended, named, spawned
from ..promises import run_cli

GEN = [
    "generate",
    "--games",
    "Pong",
    "--train-frames",
    "400",
    "--val-frames",
    "40",
    "--min-train-episodes",
    "1",
    "--decision-cap",
    "400",
    "--baseline-episodes",
    "0",
]


def _cli(*args: str, env: dict | None = None, preexec_fn=as_from_a_terminal) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "atari_data.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=preexec_fn,
        env=env,
    )


def _wait_for(paths, timeout: float = 60.0) -> list[Path]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p for p in paths if p.exists()]
        if len(found) == len(paths):
            return found
        time.sleep(0.05)
    raise AssertionError(f"never appeared: {paths}")


def test_a_second_generate_of_the_same_game_is_refused_while_the_first_finishes(tmp_path, capsys):
    root = tmp_path / "root"
    first = _cli(*GEN, "--root", str(root))
    try:
        _wait_for([root / "expert2f" / ".Pong.lock"])
        assert main([*GEN, "--root", str(root)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and ".Pong.lock: (lock): another process" in err
        assert len(err.strip().splitlines()) == 1
    finally:
        assert first.wait(timeout=300) == 0, first.stderr.read()
    report = validate(root, images=True)
    assert report.ok and [g.game for g in report.games] == ["Pong"]
    meta = json.loads((root / "expert2f" / "Pong" / "meta.json").read_text())
    assert meta["train"]["records"] == 400 and meta["val"]["records"] == 40, "no frames lost to a race"
    assert not list(root.rglob(".*")), "no staging folder or lock left behind"


GAMES = ("--games", "Pong,Breakout")
EPISODES = ("--games", "Qbert", "--expert", "planner", "--planner-frames", "300")


@pytest.mark.parametrize(
    "fanned,sig",
    [(GAMES, "SIGKILL"), (EPISODES, "SIGKILL"), (GAMES, "SIGTERM")],
    ids=["games-SIGKILL", "planner-episodes-SIGKILL", "games-SIGTERM"],
)
def test_a_worker_killed_mid_task_ends_generate_on_one_line(tmp_path, fanned, sig):
    """A pool worker killed while it plays (the OOM killer's SIGKILL; a SIGTERM to it alone, which it
    unwinds from) loses its task, and the pool's result for it never came: generate waited for it for
    ever, its replacement idle beside it."""
    root = tmp_path / "root"
    big = ("--train-frames", "100000", "--decision-cap", "100000", "--workers", "2")
    first = _cli(*GEN, *big, *fanned, "--root", str(root))
    deadline = time.monotonic() + 60
    while len(workers := spawned(first.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(2)  # into their tasks
    os.kill(min(workers), getattr(signal, sig))
    _, err = ended(first)
    assert first.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "a worker process" in lines[0] and "rerun the same command" in lines[0], err
    # the killed worker's own lock stays (nothing could remove it; a rerun takes it over); no other
    assert len(list(root.rglob("*.lock"))) <= 1, list(root.rglob("*.lock"))
    assert not [p for p in workers if alive(p)], "a worker outlived generate"


@pytest.mark.parametrize("sig,workers,group", [("SIGTERM", "1", False), ("SIGHUP", "2", False), ("SIGTERM", "2", True)])
def test_generate_stopped_by_sigterm_or_sighup_leaves_no_lock_and_says_so(tmp_path, sig, workers, group):
    """A stop from outside (a scheduler's SIGTERM, a closed terminal's SIGHUP) ends like a Ctrl-C:
    each game's lock and staging folder are removed, one line, exit 128 + the signal's number.
    Python's default for both ended the process where it stood, and the lock files stayed; so did
    worker processes' own locks when the pool stopped them. A signal to the whole group reaches each
    worker twice (its own, then the pool's): the second cut the first's way out short, with two
    "Exception ignored in FileLock.__del__" tracebacks (from an outside review)."""
    root = tmp_path / "root"
    games = ["Pong", "Breakout"][: int(workers)]
    big = ("--train-frames", "100000", "--decision-cap", "100000")
    first = _cli(*GEN, *big, "--games", ",".join(games), "--workers", workers, "--root", str(root))
    _wait_for([root / "expert2f" / f".{game}.lock" for game in games])
    time.sleep(0.3)
    (os.killpg if group else os.kill)(first.pid, getattr(signal, sig))
    _, err = ended(first)
    assert first.returncode == 128 + getattr(signal, sig), err
    assert err.strip().splitlines() == [f"terminated ({sig}); rerun the same command to redo unfinished games"]
    assert not list(root.rglob(".*")), "a staging folder or lock left behind"


RAY_STOPPED = {
    signal.SIGINT: "interrupted; rerun the same command to redo unfinished games",
    signal.SIGTERM: "terminated (SIGTERM); rerun the same command to redo unfinished games",
}


def _none_outlives(pids: list[int], within: float = 5.0) -> bool:
    """Whether every one of ``pids`` has ended ``within`` seconds (Ray's own take a moment to follow)."""
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(alive(p) for p in pids)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Ray's processes from /proc")
@pytest.mark.parametrize(
    "started", [as_from_a_terminal, deaf_to_ctrl_c], ids=["from-a-terminal", "as-a-background-job"]
)
def test_generate_on_ray_stopped_by_sigterm_says_so_and_leaves_nothing(tmp_path, started):
    """``--executor ray`` starts Ray in the driver, and ``ray.init`` took SIGTERM over twice: in
    Python's table (its handler exits with code 15) and in the kernel's (abseil's failure handler,
    which prints a stack dump and aborts three seconds on). A SIGTERM then printed that dump and left
    each game's lock, where the local executor says one line and leaves nothing. Started as a
    background job (SIGINT ignored), Ray's workers inherited the ignored SIGINT, so the interrupt that
    lets a cancelled game unwind did nothing: each was killed, its lock left behind."""
    pytest.importorskip("ray", reason="Ray is an optional extra ([ray])")
    root = tmp_path / "root"
    big = ("--train-frames", "100000", "--decision-cap", "100000", "--executor", "ray")
    own_ray = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a local Ray, started by generate
    first = _cli(
        *GEN, *big, "--games", "Pong,Breakout", "--workers", "2", "--root", str(root), env=own_ray, preexec_fn=started
    )
    _wait_for([root / "expert2f" / f".{game}.lock" for game in ("Pong", "Breakout")], timeout=120)
    time.sleep(0.5)
    ray_processes = descendants(first.pid)
    os.kill(first.pid, signal.SIGTERM)
    _, err = ended(first, timeout=120)
    assert first.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines() == [RAY_STOPPED[signal.SIGTERM]]
    assert "SIGTERM received" not in err, err
    assert not list(root.rglob(".*")), "a staging folder or lock left behind"
    assert _none_outlives(ray_processes), "a Ray process outlived generate"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Ray's processes from /proc")
@pytest.mark.parametrize(
    ("moment", "sent"),
    [("ray::DashboardAgent", signal.SIGINT), ("ray::IDLE", signal.SIGTERM)],
    ids=["ctrl-c-once-rays-agents-run", "sigterm-as-the-driver-joins"],
)
def test_generate_stopped_while_ray_starts_says_so_and_leaves_nothing(tmp_path, moment, sent):
    """A Ctrl-C or SIGTERM inside ``ray.init`` was raised where it stood: once Ray's agents ran, they
    outlived generate by a minute; as the driver joined (its first workers start then), abseil's
    handler printed its dump and aborted the run three seconds on, or the half-joined driver crashed
    on its way out (SIGSEGV). Held until ``ray.init`` returns, each is the usual one line."""
    pytest.importorskip("ray", reason="Ray is an optional extra ([ray])")
    root = tmp_path / "root"
    own_ray = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    first = _cli(
        *GEN, "--executor", "ray", "--games", "Pong,Breakout", "--workers", "2", "--root", str(root), env=own_ray
    )
    deadline = time.monotonic() + 120
    while not named(first.pid, moment):
        assert first.poll() is None and time.monotonic() < deadline, f"{moment} never started"
        time.sleep(0.02)
    ray_processes = descendants(first.pid)
    os.kill(first.pid, sent)
    _, err = ended(first, timeout=120)
    assert first.returncode == 128 + sent, err[-3000:]
    assert err.strip().splitlines() == [RAY_STOPPED[sent]], err[-3000:]
    assert "SIGTERM received" not in err, err
    assert not list(root.rglob(".*")), "a staging folder or lock left behind"
    assert _none_outlives(ray_processes), "a Ray process outlived generate"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads worker states from /proc")
def test_workers_die_with_a_killed_generate_and_the_rerun_is_whole(tmp_path):
    root = tmp_path / "root"
    # Long enough (~5 s a game) that a surviving worker would still be playing when we look.
    cmd = [
        *GEN,
        "--games",
        "Pong,Breakout",
        "--train-frames",
        "3000",
        "--decision-cap",
        "3000",
        "--workers",
        "2",
        "--root",
        str(root),
    ]
    parent = _cli(*cmd)
    locks = _wait_for([root / "expert2f" / ".Pong.lock", root / "expert2f" / ".Breakout.lock"])
    time.sleep(0.2)  # let both workers write their pid into their lock
    workers = [int(p.read_text()) for p in locks]
    assert parent.pid not in workers and all(alive(w) for w in workers)
    os.kill(parent.pid, signal.SIGKILL)  # the main process only: its workers must not outlive it
    parent.wait()
    deadline = time.monotonic() + 1.5
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not any(alive(w) for w in workers), "workers kept running after their parent died"
    finally:
        for w in workers:
            if alive(w):
                os.kill(w, signal.SIGKILL)
    assert main(cmd) == 0  # an immediate rerun: no orphan holds a lock or races the staging folders
    report = validate(root, images=True)
    assert report.ok and sorted(g.game for g in report.games) == ["Breakout", "Pong"]


def test_pack_force_swaps_the_new_folder_in_before_deleting_the_old(layout, tmp_path, monkeypatch):
    import shutil

    from atari_data import layout as layout_mod

    out = tmp_path / "packed"
    assert main(["pack", str(layout), str(out)]) == 0
    real_rmtree = shutil.rmtree

    def killed_half_way(path, *a, **kw):  # a kill during the delete: half of the folder is gone
        files = sorted(p for p in Path(path).rglob("*") if p.is_file())
        for p in files[: len(files) // 2]:
            p.unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(layout_mod.shutil, "rmtree", killed_half_way)
    with pytest.raises(KeyboardInterrupt):
        from atari_data.publish.pack import PackConfig, pack

        pack(PackConfig(root=str(layout), out=str(out), force=True))
    monkeypatch.setattr(layout_mod.shutil, "rmtree", real_rmtree)
    assert main(["doctor", str(out)]) == 0, "OUT is the whole new pack, whatever happened to the old one"


def test_a_game_replaced_with_force_is_ready_the_moment_it_is_in_place(tmp_path, monkeypatch):
    """_READY was written after the swap, once the old game was deleted (seconds for a large one): a
    pack or a training run meanwhile left the game out as not ready, where it was whole before and
    after (an outside review). At the delete, the new game is in place and ready."""
    import shutil

    from atari_data import layout as layout_mod
    from atari_data.produce.generate import generate_game

    from .conftest import small_config

    cfg = small_config(tmp_path, train_frames=30, val_frames=5, baseline_episodes=0)
    generate_game(cfg, "Pong")
    game, seen = tmp_path / "expert2f" / "Pong", []
    real_rmtree = shutil.rmtree

    def deleting(path, *a, **kw):  # the old game's delete: what a reader finds at the game's path now
        if Path(path).name == ".Pong.old":
            seen.append((game / "_READY").is_file())
        return real_rmtree(path, *a, **kw)

    monkeypatch.setattr(layout_mod.shutil, "rmtree", deleting)
    generate_game(
        small_config(tmp_path, train_frames=30, val_frames=5, baseline_episodes=0, seed=1, force=True), "Pong"
    )
    assert seen == [True], seen


def test_doctor_of_a_pack_replaced_while_it_reads_says_so(layout, tmp_path):
    """doctor read part of the old pack and part of the new, and called a healthy pack broken ("meta.json
    files say 10000, the data has 5064"); it said healthy when run again (an outside review)."""
    from ..swaps import SWAPPED_MID_READ

    out = tmp_path / "packed"
    assert main(["pack", str(layout), str(out)]) == 0
    assert main(["pack", str(layout), str(tmp_path / "packed.next")]) == 0
    done = subprocess.run(
        [sys.executable, "-c", SWAPPED_MID_READ, "atari_data.cli:main", str(out), "doctor", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (tmp_path / "packed.old").is_dir(), "the folder was swapped mid-read"
    assert done.returncode == 2 and "was replaced while it was checked" in done.stdout + done.stderr, done
    assert "Traceback" not in done.stderr, done.stderr


def test_pack_refuses_a_target_it_must_not_replace(layout, tmp_path):
    from ..promises import check_promises

    (tmp_path / "afile").write_text("x")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    (tmp_path / "link").symlink_to(tmp_path / "notes")
    for out, what in (
        (layout, "overlaps the layout"),
        (layout.parent, "overlaps the layout"),
        (layout / "inner", "overlaps the layout"),
        (tmp_path / "afile", "is not a packed repository"),
        (tmp_path / "notes", "is not a packed repository"),
        (tmp_path / "link", "is a symlink"),
    ):
        code, err = check_promises(main, ["pack", layout, out, "--force"], sandbox=tmp_path, target=None)
        assert code == 2 and what in err, (out, err)
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine" and validate(layout).ok


def test_a_second_pack_into_the_same_folder_is_refused(layout, tmp_path):
    from atari_data.layout import OutputLock

    out = tmp_path / "packed"
    held = OutputLock(out, str(out))  # another pack is running
    try:
        code, _, err = run_cli(main, ["pack", layout, out])
        assert code == 2 and ".packed.lock: (lock): another process" in err, err
    finally:
        held.release()
    assert main(["pack", str(layout), str(out)]) == 0


SLOW_TASK_S = 8  # past the 3 s a cancelled task has to unwind, after which one still running is killed

RAY_CANCEL = r"""
import json, sys, time
from pathlib import Path

from atari_data.errors import AtariDataError
from atari_data.produce.executors import fan_out
from laya_protocol.ray import connect

SLOW, late = float(sys.argv[1]), Path(sys.argv[2])


def task(x):  # defined in __main__, so Ray ships it by value: workers need not import the tests
    kind, path = x
    started = late.parent / "started"  # not under late's name: only what the tasks leave behind is counted
    if kind == "fail":  # once both others are inside their work: on a busy machine one was cancelled unstarted
        for _ in range(600):
            if len(list(started.glob("*"))) == 2:
                break
            time.sleep(0.05)
        raise AtariDataError("bad input", field="test")
    started.mkdir(exist_ok=True)
    (started / kind).touch()
    if kind == "blocked":  # in C code all along: only a kill stops it
        time.sleep(SLOW)
    else:  # Python lines between short waits, as a game's steps are: an interrupt lands at once
        try:
            for _ in range(int(SLOW / 0.05)):
                time.sleep(0.05)
        except KeyboardInterrupt:
            Path(path + ".interrupted").write_text("unwound")
            raise
    Path(path).write_text("still writing after the run failed")


def warm(x):
    return x


connect(num_cpus=3)  # Ray and three warm workers before the clock: their start-up is not what is measured
fan_out(warm, [("work", ""), ("blocked", ""), ("fail", "")], executor="ray")
started = time.monotonic()
try:
    fan_out(task, [("work", str(late) + "-work"), ("blocked", str(late) + "-blocked"), ("fail", "")], executor="ray")
    raised = None
except AtariDataError as e:
    raised = str(e)
elapsed = time.monotonic() - started
time.sleep(SLOW + 2)
found = sorted(p.name for p in late.parent.glob(late.name + "*"))
print(json.dumps({"raised": raised, "elapsed": elapsed, "found": found}))
"""


@pytest.mark.slow
def test_a_failed_ray_task_cancels_the_others_at_once(tmp_path):
    """The others are interrupted, so they unwind as on a Ctrl-C (a game removes its lock), and one
    that has not ended a few seconds later is killed. In its own interpreter: a Ray driver that dies
    (raylet lost on a busy machine) takes down only this test, with its error shown, never the
    test session."""
    pytest.importorskip("ray", reason="Ray is an optional extra ([ray])")
    late = tmp_path / "late.txt"
    done = subprocess.run(
        [sys.executable, "-c", RAY_CANCEL, str(SLOW_TASK_S), str(late)],
        capture_output=True,
        text=True,
        timeout=180,
        env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},  # a local Ray of its own
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["raised"] and "bad input" in got["raised"]
    assert got["elapsed"] < SLOW_TASK_S, "the failure was reported before the slow tasks could finish"
    # the one between short waits unwound from its interrupt; the blocked one was killed; neither wrote
    assert got["found"] == ["late.txt-work.interrupted"], got["found"]


def _deaf_task(x: int) -> int:
    """A task that swallows its worker's SystemExit, as a SIGTERM landing in a ``__del__`` run by the
    garbage collector is swallowed ("Exception ignored in ...") for a minute; the first returns."""
    for _ in range(600 * (x > 0)):
        try:
            time.sleep(0.1)
        except BaseException:  # noqa: BLE001, S110 - the point of the test
            pass
    return x


def test_leaving_ahead_ends_workers_that_swallow_the_pools_sigterm():
    """Leaving ``ahead`` terminates its pool, whose join waits for every worker: one whose unwinding
    was swallowed used to be waited for for ever (a README example hung 900 s in a test run, once)."""
    from atari_data.produce.executors import ahead

    t = time.monotonic()
    with ahead(_deaf_task, iter(range(4)), workers=2) as results:
        assert next(results) == 0  # the second worker is in its task now; leave
        time.sleep(1)
    assert time.monotonic() - t < 30, "the pool waited for a worker that would not end"


LEAVING_WORKER = """
import multiprocessing as mp, os, signal, time

from atari_data.produce.executors import die_with_parent


def leaving(parent):
    die_with_parent(parent)
    try:  # out of the pool's loop, as a worker is once it has taken the pool's "no more tasks"
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    except BaseException as e:  # noqa: BLE001 - what the signal raised, if anything
        print("raised", type(e).__name__, flush=True)
        raise


if __name__ == "__main__":
    p = mp.get_context("spawn").Process(target=leaving, args=(os.getpid(),))
    p.start()
    p.join(30)
    print("exit", p.exitcode)
"""


def test_a_worker_leaving_the_pool_ends_on_its_sigterm_raising_nothing(tmp_path):
    """From the quickstart's output: Pool.terminate's SIGTERM reached a worker already leaving after its
    last task; the unwinding raised inside the interpreter's exit ("Exception ignored in: <module
    'threading'> ... SystemExit: 143" under the progress bar). Out of the pool's loop there is nothing
    to unwind: it ends at once."""
    script = tmp_path / "leaving.py"
    script.write_text(LEAVING_WORKER)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines() == ["exit 143"] and done.stderr == "", done.stdout + done.stderr


def _short_or_long(x: str) -> str:
    """ "short" returns at once (its worker is idle from then on, waiting for a task in the pool's loop);
    "long" waits for the test's go-ahead."""
    folder = Path(os.environ["POOL_TEST_DIR"])
    (folder / f"{x}.pid").write_text(str(os.getpid()))
    while x == "long" and not (folder / "go").exists():
        time.sleep(0.05)
    return x


def test_an_idle_worker_stopped_by_sigterm_leaves_the_pool_whole(tmp_path, monkeypatch):
    """From an outside review, two ways an idle worker's SIGTERM hung the pool. An idle worker waits for
    its next task holding the task queue's lock: ended by os._exit, it kept it for ever. And the pool's
    replacement for it is started by the pool's worker-handler thread, so a PR_SET_PDEATHSIG (which
    follows the creating thread, not the process) killed it when terminate ended that thread, while it
    held the same lock; terminate then waited for the lock for ever."""
    import threading

    from atari_data.produce.executors import fan_out

    monkeypatch.setenv("POOL_TEST_DIR", str(tmp_path))
    outcome: dict = {}

    def play() -> None:
        try:
            outcome["result"] = fan_out(_short_or_long, ["long", "short"], workers=2, progress=False)
        except BaseException as e:  # noqa: BLE001 - reported below
            outcome["raised"] = repr(e)

    done = threading.Thread(target=play, daemon=True)
    done.start()
    busy, idle = (int(p.read_text()) for p in _wait_for([tmp_path / "long.pid", tmp_path / "short.pid"]))
    time.sleep(0.5)
    os.kill(idle, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while not spawned(os.getpid()) - {busy, idle} and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(2)  # the replacement is in the pool's loop, waiting for a task with the lock held
    (tmp_path / "go").touch()
    done.join(40)
    assert outcome == {"result": ["long", "short"]}, outcome or "the pool hung after its idle worker was stopped"


# A writer replacing a game again and again, as generate --force and import do: through the one
# commit every writer uses (validated when staged, swapped in whole, then marked ready).
REPLACE_FOREVER = """
import shutil, sys
from pathlib import Path
from atari_data.layout import staged_game
from atari_data.layout.validate import commit_game

root, sources = sys.argv[1], sys.argv[2:]
print("replacing", flush=True)
while True:
    for src in sources:
        with staged_game(root, "expert2f", "Pong", "partial") as staged:
            shutil.copytree(Path(src) / "expert2f" / "Pong", staged.path, dirs_exist_ok=True)
            commit_game(staged, images=False, file="Pong")
"""


def test_validate_and_pack_of_a_game_replaced_meanwhile_say_so_and_nothing_else(tmp_path, capsys):
    """From an outside review: validate beside a generate --force of a game reported thousands of
    defects that were not there (records of one game checked against the other's meta.json, frames
    gone), where the layout was valid before and after; pack said a frame 'is missing'."""
    import shutil

    from atari_data.produce.generate import generate_game

    from .conftest import small_config

    games = []
    for n, frames in ((0, 40), (1, 70)):  # two valid Pong games with other record counts
        games.append(tmp_path / f"g{n}")
        generate_game(small_config(games[-1], seed=n, train_frames=frames, baseline_episodes=0), "Pong")
    root = tmp_path / "root"
    shutil.copytree(games[0], root)
    writer = subprocess.Popen(
        [sys.executable, "-c", REPLACE_FOREVER, str(root), *map(str, games)], stdout=subprocess.PIPE, text=True
    )
    said, held = set(), set()
    try:
        assert writer.stdout.readline().strip() == "replacing"
        runs, start = 0, time.monotonic()
        while (runs < 25 or len(held) < 2) and time.monotonic() - start < 30:  # past both versions, at least
            runs += 1
            report = validate(root, images=True)
            said |= {(e.field, e.message.split(" (")[0]) for e in report.defects}
            with contextlib.suppress(OSError):  # between a swap's two renames
                held.add(json.loads((root / "expert2f/Pong/meta.json").read_text())["train"]["records"])
        capsys.readouterr()
        for n in range(8):
            if main(["pack", str(root), str(tmp_path / f"packed{n}")]) != 0:
                said.add(("pack", capsys.readouterr().err.split(": ", 3)[-1].split(" (")[0]))
    finally:
        writer.kill()
        writer.wait()
    assert held == {40, 70}, f"the game was not replaced while it was validated: {held}"
    assert said <= {
        ("(folder)", "was replaced while it was validated"),
        ("pack", "was replaced while it was packed"),
        ("pack", "is being replaced"),  # met between the swap's two renames
        ("pack", "has no ready games to pack"),  # listed there, before _READY
    }, said


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_pinning_a_folder_that_is_gone_is_an_oserror_and_nothing_else(tmp_path):
    """A game gone mid-swap: the pin's OSError said it, and its __del__ then raised AttributeError
    (no descriptor was ever set), which pytest reported as a warning in the suite's run."""
    import gc

    from atari_data.layout import FolderPin

    with pytest.raises(FileNotFoundError):
        FolderPin(tmp_path / "gone")
    gc.collect()


HOLDING_POOL = """
import os, signal, sys, tempfile

tempfile.tempdir = sys.argv[1]
from atari_data.produce.executors import _Tracked

if __name__ == "__main__":
    pool = _Tracked(1)
    print(pool.notes, flush=True)
    if sys.argv[2] == "die":
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer ends a driver: no finally runs
    sys.stdin.read()
    pool.stop()
"""


def test_a_killed_drivers_task_notes_are_removed_by_the_next_pool_and_a_live_ones_kept(tmp_path, monkeypatch):
    """A pool keeps its tasks' notes in a temporary folder that its stop removes; a driver killed by
    SIGKILL left it in the temporary folder for good (39 in a day of test runs on one machine). The
    next pool removes those whose driver is gone, and never one whose driver lives."""
    import tempfile
    import threading

    from atari_data.produce.executors import _Tracked

    script = tmp_path / "holding.py"
    script.write_text(HOLDING_POOL)
    temp = tmp_path / "tmp"
    temp.mkdir()
    live = subprocess.Popen(
        [sys.executable, str(script), str(temp), "live"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        live_notes = Path(live.stdout.readline().strip())
        dead = subprocess.run(
            [sys.executable, str(script), str(temp), "die"], capture_output=True, text=True, timeout=60
        )
        assert dead.returncode == -signal.SIGKILL, dead.stderr
        dead_notes = Path(dead.stdout.strip())
        assert dead_notes.is_dir()
        # planted where pools keep their notes (a shared /tmp): none is a pool's, so none is touched, and
        # a FIFO for its lock file held every pool start waiting for a writer
        foreign = {"fifo": "held", "folder": "held/", "more": "other"}
        for name, what in foreign.items():
            planted = temp / f"atari-data-tasks-{name}"
            planted.mkdir()
            if name == "fifo":
                os.mkfifo(planted / what)
            elif name == "folder":
                (planted / what).mkdir()
            else:  # a free lock file beside something no pool writes
                (planted / "held").touch()
                (planted / what).write_text("precious") and live_notes.is_dir() and dead_notes != live_notes
        monkeypatch.setattr(tempfile, "tempdir", str(temp))
        made: list = []
        starting = threading.Thread(target=lambda: made.append(_Tracked(1)), daemon=True)
        starting.start()
        starting.join(30)
        assert made, "a pool's start waited (for a writer to the planted FIFO)"
        pool = made[0]
        try:
            assert not dead_notes.exists(), "a killed driver's notes outlived it"
            assert live_notes.is_dir(), "a live driver's notes were removed"
            assert all((temp / f"atari-data-tasks-{name}").is_dir() for name in foreign), "a folder not a pool's"
            assert (temp / "atari-data-tasks-more" / "other").read_text() == "precious"
        finally:
            pool.stop()
    finally:
        live.communicate("", timeout=60)
    assert live.returncode == 0 and sorted(p.name for p in temp.iterdir()) == [
        f"atari-data-tasks-{n}" for n in sorted(foreign)
    ]
