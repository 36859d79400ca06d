"""Every command on a full disk or beside a lock it cannot remove: one line, never a traceback.

A full disk is the file-size limit (RLIMIT_FSIZE), which fails a write past it with EFBIG as a
full disk fails one with ENOSPC (Python ignores the SIGXFSZ that comes with it): the same OSError
from the same write, with no file system to mount."""

import os
import resource
import subprocess
import sys

import pytest

from laya_protocol.locks import FileLock

LIMIT = 16 << 10  # bytes a file may grow to: a lock's pid fits, a frame set's records.jsonl or a checkpoint does not


def _limited(limit: int = LIMIT):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def _run(module: str, *args, limit: int = LIMIT) -> subprocess.CompletedProcess:
    # no bytecode written: CPython writes a .pyc in one unchecked write, which the limit cuts short,
    # and the next interpreter to import that module fails on it ("marshal data too short")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", module, *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=_limited(limit), timeout=300)


def _one_line(done: subprocess.CompletedProcess, *named: str) -> None:
    err = done.stderr.strip()
    assert done.returncode == 2, f"exit {done.returncode}: {err[-3000:]}"
    assert "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith("error: "), err[-3000:]
    assert "File too large" in err and all(n in err for n in named), err


def test_generate_and_pack_on_a_full_disk_say_so_on_one_line(tmp_path, pong_data):
    root = tmp_path / "root"
    done = _run(
        "atari_data.cli",
        "generate",
        "--root",
        root,
        "--games",
        "Pong",
        "--train-frames",
        200,
        "--val-frames",
        10,
        "--baseline-episodes",
        0,
        "--decision-cap",  # short episodes: records are written an episode at a time
        60,
        "--min-train-episodes",
        1,
    )
    _one_line(done)
    assert not list(root.rglob("_READY")), "nothing marked ready"
    _one_line(_run("atari_data.cli", "pack", pong_data, tmp_path / "packed"))
    assert not (tmp_path / "packed").exists()


# A game whose frames (noise: a PNG of about 100 KB) are what the limit cuts, not its records.
WRITE_NOISY_GAME = """
import sys, numpy as np
from atari_data.layout.writer import GameWriter, Step
from laya_protocol.errors import os_said
rng = np.random.default_rng(0)
w = GameWriter(sys.argv[1], "synth", "Pong", frame_format="rgb_210x160", origin="test", license="CC0-1.0", frames=2)
w.add_episode(2000, "train", (Step(rng.integers(0, 256, (210, 160, 3), np.uint8), 0) for _ in range(2)))
try:
    w.finish()
except OSError as e:
    print(os_said(e))
"""


def test_a_full_disk_names_the_frame_it_cut(tmp_path, pong_data):
    """From an outside review: a write of a frame or a file by Path.write_bytes on a full disk was
    'error: File too large', naming no file (an OSError of a write carries none)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", WRITE_NOISY_GAME, str(tmp_path / "w")],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=_limited(),
        timeout=120,
    )
    assert done.returncode == 0 and "File too large" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "/images/synth-Pong-e002000-s00000" in done.stdout and ".png: " in done.stdout, done.stdout

    packed = _run("atari_data.cli", "pack", pong_data, tmp_path / "repo", "--replay", limit=1 << 30)
    assert packed.returncode == 0, packed.stderr[-2000:]
    # a rebuilt Pong frame (about 850 bytes) is past the limit, the lock's pid is not
    _one_line(_run("atari_data.cli", "rebuild", tmp_path / "repo", "--root", tmp_path / "out", limit=512), ".png")
    assert not list((tmp_path / "out").rglob("_READY")), "nothing marked ready"


def test_the_judge_and_training_on_a_full_disk_say_so_on_one_line(tmp_path, pong_data):
    judge = ["run", "--policy", "random", "--games", "Pong", "--episodes", 1, "--cap", 50, "--random-episodes", 0]
    _one_line(_run("laya_eval.cli", *judge, "--out", tmp_path / "r.json", limit=2 << 10), "r.json")
    # the reference CNN: its process starts without transformers, and its files are as the VLM's
    train = ["train", "--data", pong_data, "--model", "cnn", "--steps", 1, "--batch", 2, "--image-size", 64]
    train += ["--evals", 1]
    _one_line(_run("laya_policy.cli", *train, "--out", tmp_path / "run"), "best")
    # room for a checkpoint's files (2.4 MB), not for state.pt (7.3 MB: the weights and the optimiser's two moments)
    _one_line(_run("laya_policy.cli", *train, "--out", tmp_path / "run2", limit=3 << 20), "state.pt")


@pytest.mark.parametrize(
    "module,argv,lock",
    [
        ("laya_eval.cli", ["run", "--policy", "random", "--games", "Pong", "--out", "{tmp}/r.json"], ".r.json.lock"),
        ("atari_data.cli", ["generate", "--root", "{tmp}/d", "--games", "Pong"], ".Pong.lock"),
    ],
)
def test_a_lock_its_pid_cannot_be_written_into_is_named_and_left_nowhere(tmp_path, module, argv, lock):
    """From an outside review, on a disk with no byte free: 'error: No space left on device', naming
    nothing, and the empty lock file left beside the output."""
    done = _run(module, *[a.format(tmp=tmp_path) for a in argv], limit=0)
    _one_line(done, lock)
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".lock")], "a lock file was left"


def test_a_full_disk_names_the_training_log_and_the_parquet_shard(tmp_path, pong_data):
    """From an outside review: the log's line and a Parquet shard failed in a buffered write's flush
    or in pyarrow, neither of which names the file."""
    train = ["train", "--data", pong_data, "--steps", 1, "--batch", 2, "--image-size", 64, "--evals", 1]
    _one_line(_run("laya_policy.cli", *train, "--out", tmp_path / "run", limit=64), "log.jsonl")
    packed = _run("atari_data.cli", "pack", pong_data, tmp_path / "p", "--formats", "parquet", limit=4 << 10)
    _one_line(packed, ".parquet")
    script = "import sys; from pathlib import Path; from atari_data.layout import write_atomic\n"
    script += "write_atomic(Path(sys.argv[1]), b'x' * 100)"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-c", script, str(tmp_path / "f.json")]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=_limited(10), timeout=60)
    assert "OSError: [Errno 27] File too large: " in done.stderr and "f.json" in done.stderr, done.stderr[-2000:]


def test_a_report_cut_by_a_full_disk_leaves_the_one_before_whole(tmp_path):
    """From an outside review: each file of a report was replaced on its own, so a disk that filled
    at a figure left the new report.md beside the earlier report's figures, and a new folder half
    made. report.md fits in 8 KB; a figure does not."""
    judge = ["run", "--games", "Pong", "--episodes", 1, "--cap", 30, "--random-episodes", 0]
    for policy in ("random", "noop"):
        done = _run("laya_eval.cli", *judge, "--policy", policy, "--out", tmp_path / f"{policy}.json", limit=1 << 30)
        assert done.returncode == 0, done.stderr[-2000:]
    made = _run("laya_eval.cli", "report", tmp_path / "random.json", "--out", tmp_path / "rep", limit=1 << 30)
    assert made.returncode == 0, made.stderr[-2000:]
    before = {p.name: p.read_bytes() for p in (tmp_path / "rep").iterdir()}
    assert {"report.md", "normalised.png"} <= set(before)
    _one_line(_run("laya_eval.cli", "report", tmp_path / "noop.json", "--out", tmp_path / "rep", limit=8 << 10), ".png")
    assert {p.name: p.read_bytes() for p in (tmp_path / "rep").iterdir()} == before, "the earlier report, whole"
    deep = tmp_path / "new" / "deep" / "rep"  # the folders above made too, and removed with it
    _one_line(_run("laya_eval.cli", "report", tmp_path / "noop.json", "--out", deep, limit=8 << 10), ".png")
    assert not (tmp_path / "new").exists(), "a folder the report made and could not fill"
    _one_line(_run("laya_eval.cli", "report", tmp_path / "noop.json", "--out", tmp_path / "new", limit=0), ".new.lock")
    assert not (tmp_path / "new").exists(), "a folder made before its lock failed"
    # a folder where a figure goes: found before any file is put in place (an outside review)
    (tmp_path / "rep" / "profile.png").unlink()
    (tmp_path / "rep" / "profile.png").mkdir()
    before = {p.name: p.read_bytes() for p in (tmp_path / "rep").iterdir() if p.is_file()}
    done = _run("laya_eval.cli", "report", tmp_path / "noop.json", "--out", tmp_path / "rep", limit=1 << 30)
    assert done.returncode == 2 and "profile.png" in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "rep").iterdir() if p.is_file()} == before


def test_a_push_dry_run_on_a_full_disk_leaves_no_half_folder(tmp_path, pong_data):
    """A dry run cut by a full disk left a truncated head.safetensors and an empty training.json in
    its folder, and the rerun was refused because the folder existed. The tiny VLM's checkpoint: files
    are staged in sorted order, so the cut falls in backbone/model.safetensors, inside a subfolder."""
    from laya_policy.cli import main

    train = ["train", "--data", pong_data, "--steps", 1, "--batch", 2, "--image-size", 64, "--evals", 1]
    assert main([*map(str, train), "--out", str(tmp_path / "run")]) == 0  # here: only the cuts need a process
    push = ["push", tmp_path / "run" / "final", "--repo", "me/x", "--dry-run", tmp_path / "staged"]
    _one_line(_run("laya_policy.cli", *push), ".safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"], "no staged folder, no temporary beside it"
    # From an outside review: state.pt's last bytes, flushed when its file closed, failed unnamed. The
    # same run (a name of the same length: the state holds its config) with room for all but one byte.
    cut = _run(
        "laya_policy.cli", *train, "--out", tmp_path / "rum", limit=(tmp_path / "run" / "state.pt").stat().st_size - 1
    )
    _one_line(cut, "state.pt")


def test_a_lock_whose_file_cannot_be_removed_is_still_released(tmp_path):
    """Releasing unlinks the lock file first: when that failed (the folder made read-only, or
    replaced, mid-run), its error replaced the command's own and the descriptor stayed open."""
    path = tmp_path / ".out.lock"
    lock = FileLock(path, "out", lambda m, f: RuntimeError(m))
    os.unlink(path)
    os.mkdir(path)  # what unlink cannot remove: a folder by the lock's name
    lock.release()  # no error: the flock goes with the descriptor, and a file left behind is taken by the next run
    os.rmdir(path)
    again = FileLock(path, "out", lambda m, f: RuntimeError(m))
    again.release()
    assert not path.exists()


@pytest.mark.parametrize(
    "module,argv",
    [("laya_eval.cli", ["policies"]), ("atari_data.cli", ["games"]), ("laya_policy.cli", ["train", "--help"])],
)
def test_output_piped_into_a_reader_that_stops_ends_quietly(module, argv):
    """``laya-eval policies | head -1``: the OSError handler said 'error: Broken pipe' and exit 2."""
    r, w = os.pipe()
    os.close(r)  # the reader has gone before the first line: every write is EPIPE
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", module, *argv], stdout=w, stderr=subprocess.PIPE, text=True, env=env)
    os.close(w)
    assert done.returncode == 0 and not done.stderr.strip(), (done.returncode, done.stderr[-2000:])
