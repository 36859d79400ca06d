"""Every benchmark in tools/bench that has a smoke mode runs in it: its numbers are not checked
(tests never assert timings), only that it runs to its table on this machine, and that every ratio
it prints is a number (a nan or inf ratio would print as readily as a real one)."""

import re

import pytest

from .scripts import ROOT, load_script


def bench(script: str):
    return load_script(f"tools/bench/{script}")


@pytest.mark.slow
def test_the_training_bench_measures_quiet_and_loaded_in_one_run(capsys):
    bench("train.py").main(["--smoke", "--background-load", "1"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "x |" in line]
    assert len(rows) == 3 and "1 thread" in rows[0] and "(--processes)" in rows[2], out
    assert "x of 1 core |" in rows[0] and re.search(r"x of \d+ cores? \|", rows[2]), out
    assert "GFLOP (forward and backward); one thread multiplies 256x256" in out, out
    ratios_are_numbers(out)


def test_the_load_bench_reports_rates_and_bytes_against_the_layout(capsys):
    bench("load.py").main(["--smoke"])
    out = capsys.readouterr().out
    assert "| (a) WebDataset helper (frames at libdeflate 9) |" in out, out
    assert "| packed Parquet (frames at libdeflate 9) |" in out, out
    assert "ms per record re-compressing" in out, out
    ratios_are_numbers(out)


SMOKED = {  # script: a line its table must print
    "validate.py": "| validate --images |",
    "eval_overhead.py": "| gymnasium make_vec, default: ale-py's AtariVectorEnv (raw stepping) |",
    "generate.py": "| generate expert2f records |",
    "import.py": "| atari_head |",
    "png.py": "| OpenCV imdecode |",
    "play.py": "| cache | decisions/s |",
    "preprocess.py": "| device-side, training's resize + normalise | 32 |",
    "play_gpu.py": "| device-side + cache |",
    "train_gpu.py": "steps past 1 of warm-up |",
    "planner.py": "| Pong |",
    "record.py": "samples/s read, round by round",
    "stats.py": "| 5 x 4 |",
    "fan_out.py": "| ray |",
}
SPAWNS = {"generate.py"}


def test_every_bench_has_a_smoke_mode_and_the_suite_runs_it():
    """A bench nobody runs rots (validate.py did: an argument renamed under it); so each runs here."""
    scripts = {p.name for p in (ROOT / "tools" / "bench").glob("*.py") if not p.name.startswith("_")}  # _: helpers
    assert scripts == {*SMOKED, "load.py", "train.py"}, "a new bench needs a smoke run here"
    for script in scripts:
        assert "--smoke" in (ROOT / "tools" / "bench" / script).read_text(), script


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMOKED))
def test_the_bench_runs_in_its_smoke_mode(script, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if script in SPAWNS:  # its worker processes import the script by name, so it runs as a program
        import subprocess
        import sys

        done = subprocess.run(
            [sys.executable, str(ROOT / "tools" / "bench" / script), "--smoke"], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-3000:]
        out = done.stdout
    else:
        bench(script).main(["--smoke"])
        out = capsys.readouterr().out
    assert SMOKED[script] in out, out
    ratios_are_numbers(out)


def ratios_are_numbers(out: str) -> None:
    """Each ratio a bench prints (``1.23x``, ``nanx``, ``infx``) is a finite number, not below 0."""
    for cell in re.findall(r"(?<![\w.])([-\w.]+)x(?![A-Za-z0-9])", out):
        try:
            value = float(cell)
        except ValueError:
            continue  # a word ending in x ("max", "1024x"), not a ratio
        assert value == value and abs(value) != float("inf") and value >= 0, f"ratio {cell}x: {out}"


def test_sides_are_timed_in_rounds_of_alternating_order():
    """Each side once untimed, then once a round, every other round reversed: the order the benches'
    fairness rests on (a fixed order puts one side always on the machine's earlier minutes)."""
    timing = load_script("tools/bench/_timing.py")
    calls = []
    sides = {k: (lambda k=k: calls.append(k) or k.upper()) for k in "abc"}
    seconds, last = timing.in_rounds(sides, 3)
    assert calls == list("abc" + "abc" + "cba" + "abc")
    assert {k: len(v) for k, v in seconds.items()} == dict.fromkeys("abc", 3) and last == {"a": "A", "b": "B", "c": "C"}
    calls.clear()
    timing.in_rounds(sides, 2, warm=False)
    assert calls == list("abc" + "cba")
    calls.clear()  # an untimed step before every timed call (a disk flush), none before the warm calls
    timing.in_rounds(sides, 1, before=lambda: calls.append("|"))
    assert calls == list("abc" + "|a|b|c")
