import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from atari_data.cli import build_parser, main

from ..processes import as_from_a_terminal, deaf_to_ctrl_c, ended


def test_help_explains_every_command():
    text = build_parser().format_help()
    for cmd in ("validate", "stats", "generate", "games", "schema"):
        assert cmd in text
    for cmd in ("validate", "stats", "generate"):
        with pytest.raises(SystemExit) as e:
            main([cmd, "--help"])
        assert e.value.code == 0


def test_stats_json(layout_master, capsys):
    assert main(["stats", str(layout_master), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by = {(r["source"], r["game"]): r for r in rows}
    b = by[("expert2f", "Breakout")]
    meta = json.loads((layout_master / "expert2f/Breakout/meta.json").read_text())
    assert b["ready"] and b["frames"] == 2 and b["train"] == meta["train"]["records"]
    assert b["labels"] == meta["train"]["labels"], "an object, as in meta.json, not JSON text"
    assert 0 < b["label_entropy_bits"] <= 2 and b["target"] is True


def test_stats_of_a_number_past_a_floats_range_is_one_line(layout, capsys):
    """An integer of 401 digits where meta.json holds a number was an OverflowError traceback."""
    meta = layout / "expert2f/Breakout/meta.json"
    text = meta.read_text()
    meta.write_text(text.replace('"repeat_action_probability": 0.25', '"repeat_action_probability": 1' + "0" * 400))
    assert main(["stats", str(layout)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "repeat_action_probability" in err[0] and "(401 digits) is not finite" in err[0], err


def test_generate_then_validate_in_a_fresh_process(tmp_path, capsys):
    root = tmp_path / "data"
    cmd = [sys.executable, "-m", "atari_data.cli"]
    args = ["generate", "--root", str(root), "--games", "Freeway", "--source", "expert2f"]
    args += ["--min-train-episodes", "1", "--train-frames", "30", "--val-frames", "10"]
    args += ["--decision-cap", "60", "--baseline-episodes", "1"]
    gen = subprocess.run(cmd + args, capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr
    assert "expert2f/Freeway: 30 train, 10 val records" in gen.stdout
    again = subprocess.run(cmd + args, capture_output=True, text=True)
    assert "already complete" in again.stdout
    written = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    # Asked for other records (the default caps), the game held is not passed off as them.
    assert main(args[:7]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: expert2f/Freeway/meta.json: caps.train: written with "), out + err
    assert err.count("\n") == 1 and "--force" in err, err
    assert main([*args[:-1], "2"]) == 2  # --baseline-episodes 2: measured with the game, so held by it
    assert capsys.readouterr().err == (
        "error: expert2f/Freeway/meta.json: baselines: written with 1, this run asks for 2: pass --force to "
        "replace the game\n"
    )
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == written
    val = subprocess.run(cmd + ["validate", str(root), "--images"], capture_output=True, text=True)
    assert val.returncode == 0 and "valid: 1 game, 40 records" in val.stdout, val.stdout + val.stderr


def test_unknown_game_is_a_one_line_error(tmp_path, capsys):
    assert main(["generate", "--root", str(tmp_path), "--games", "Pongg"]) == 2
    err = capsys.readouterr().err
    assert err == "error: --games: unknown ALE v5 game 'Pongg'; did you mean Pong?\n", "named by the flag typed"
    for source in ("jat", "atari_head"):
        argv = ["import", source, "--from", str(tmp_path), "--root", str(tmp_path / source), "--games", "Pongg"]
        assert main(argv) == 2
        assert capsys.readouterr().err.startswith("error: --games: unknown ALE v5 game 'Pongg'"), source


def test_what_generate_could_only_refuse_after_playing_is_refused_first(tmp_path, capsys):
    """A seed past meta.json's int64, and more val episodes than their numbers hold (1,000 before the
    train episodes' 2,000), were refused only once every episode had been played."""
    base = ["generate", "--root", str(tmp_path / "d"), "--games", "Pong", "--train-frames", "10"]
    for extra, said in (
        (["--seed", str(2**63)], "error: --seed: 9223372036854775808: expected 0 to 9,223,372,036,854,775,807"),
        (["--val-frames", "1001", "--decision-cap", "1"], "error: --val-frames: 1,001 val records"),
    ):
        assert main(base + extra) == 2
        out, err = capsys.readouterr()
        assert err.startswith(said) and err.count("\n") == 1, err
    assert not (tmp_path / "d").exists()


def test_a_packed_repository_is_no_root_to_write_games_into(tmp_path, capsys):
    from atari_data.publish.repo import check_out_root

    """DAgger and generate wrote games into one: every reader of the repository ignored them, validate
    took the folder for a layout of those games alone, and publish would have uploaded them."""
    packed = tmp_path / "repo"
    (packed / "data").mkdir(parents=True)
    (packed / "README.md").write_text("---\nconfigs: []\n---\n")  # what atari-data pack writes, in part
    (tmp_path / "copy").mkdir()  # an importer's local copy: the root is refused before it is read
    (packed / "replay").mkdir()  # rebuild reads its own repository's replay/ folder: this one, say
    before = sorted(p.name for p in packed.iterdir())
    for argv in (
        ["generate", "--root", str(packed), "--games", "Pong", "--train-frames", "10"],
        ["import", "jat", "--from", str(tmp_path / "copy"), "--root", str(packed), "--games", "Pong"],
        ["import", "atari_head", "--from", str(tmp_path / "copy"), "--root", str(packed), "--games", "Pong"],
        ["rebuild", str(packed), "--root", str(packed)],
        ["rebuild", str(tmp_path / "other"), "--root", str(packed)],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "--root: is a packed repository" in err and err.count("\n") == 1, (argv, err)
        assert sorted(p.name for p in packed.iterdir()) == before
    # nor a folder inside one: games written into its data/ were uploaded with it
    for part in ("meta", "schema"):  # what pack writes beside the card and data/ in every repository
        (packed / part).mkdir()
    inside = ["generate", "--root", str(packed / "data"), "--games", "Pong", "--train-frames", "10"]
    assert main(inside) == 2
    err = capsys.readouterr().err
    assert f"--root: is inside the packed repository {packed}" in err and err.count("\n") == 1, err
    assert not any((packed / "data").iterdir())
    # a project folder with a README and a data/ folder is no repository: a layout root inside it is one
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "README.md").write_text("# my project\n")
    check_out_root(str(project / "data" / "atari"))


def test_games_and_schema(capsys):
    assert main(["games"]) == 0
    out = capsys.readouterr().out
    assert any(
        line.split()[0] == "Breakout" and line.split()[1:] == ["NOOP", "FIRE", "RIGHT", "LEFT"]
        for line in out.splitlines()
    )
    assert main(["schema", "--of", "meta"]) == 0
    assert "schema_version" in json.loads(capsys.readouterr().out)["properties"]


def test_games_lists_only_the_games_asked_for_and_an_unknown_one_is_one_line(capsys):
    assert main(["games", "--games", "pong,BREAKOUT"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["Pong", "Breakout"], "the asked order, canonical names"
    assert lines[1].split()[1:] == ["NOOP", "FIRE", "RIGHT", "LEFT"]
    assert main(["games", "--games", "Pong,Pongg"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "'Pongg'" in err and "Pong" in err


def test_core_package_imports_without_torch_or_ray():
    code = (
        "import sys, atari_data.cli, atari_data.produce.generate, atari_data.produce.dagger, "
        "atari_data.play.experts; "
        "print([m for m in ('torch', 'ray', 'cv2') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_verdict_and_table_has_json(layout, tmp_path, capsys):
    assert main(["validate", str(layout), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["valid"] and sorted(got["games"]) == ["expert/Pong", "expert2f/Breakout"] and got["defects"] == []
    assert main(["pack", str(layout), str(tmp_path / "p"), "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["configs"]) == {"expert", "expert2f"}
    assert main(["doctor", str(tmp_path / "p"), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["healthy"] and got["rows"]["expert/train"] > 0
    (layout / "expert" / "Pong" / "train.jsonl").write_text("{}\n")
    assert main(["validate", str(layout), "--json"]) == 2
    got = json.loads(capsys.readouterr().out)
    assert not got["valid"] and got["defects"][0]["file"].endswith("train.jsonl")


def test_every_console_script_says_its_version():
    from importlib.metadata import version

    scripts = ("atari-data", "laya-eval", "laya-policy")
    running = {  # all at once: each start-up is import time on its own core
        script: subprocess.Popen(
            [sys.executable, "-m", script.replace("-", "_") + ".cli", "--version"], stdout=subprocess.PIPE, text=True
        )
        for script in scripts
    }
    for script, proc in running.items():
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out.strip() == f"{script} {version(script)}"


# A process that has read a layout's stats (polars) and then waits on a child. polars installs a
# SIGINT handler of its own when imported (signal-hook, with SA_RESTART): a process started with
# Ctrl-C ignored then caught it, and the processes it started no longer inherited the ignore; and
# Ctrl-C no longer broke a blocking wait, as the kernel restarts the wait after that handler.
STATS_THEN_WAIT = """
import os, signal, subprocess, sys, time
from atari_data.cli import main
assert main(["stats", sys.argv[1]]) == 0
status = {k: v for k, _, v in (line.partition(":") for line in open("/proc/self/status"))}
print("SIGINT ignored:", bool(int(status["SigIgn"], 16) & 1 << signal.SIGINT - 1), flush=True)
if sys.argv[2] == "no-wait":
    raise SystemExit
subprocess.Popen(["sh", "-c", f"sleep 0.5; kill -INT {os.getpid()}"])
start = time.monotonic()
try:
    subprocess.run(["sleep", "6"])
    print(f"waited {time.monotonic() - start:.1f} s", flush=True)
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - start:.1f} s", flush=True)
"""


@pytest.mark.parametrize("started", ["ctrl-c-ignored", "ctrl-c-default"])
def test_reading_stats_leaves_ctrl_c_as_it_was(layout_master, started):
    ignored = started == "ctrl-c-ignored"
    process = subprocess.Popen(
        [sys.executable, "-c", STATS_THEN_WAIT, str(layout_master), "no-wait" if ignored else "wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=deaf_to_ctrl_c if ignored else as_from_a_terminal,
    )
    out, err = ended(process, timeout=60)
    said = out.splitlines()
    assert process.returncode == 0, err[-2000:]
    assert f"SIGINT ignored: {ignored}" in said, out
    if not ignored:  # interrupted while it waits, not when the wait ends 6 s later
        last = said[-1]
        assert last.startswith("interrupted after") and float(last.split()[2]) < 4, out


def test_polars_is_imported_in_one_place_only():
    """Its import takes over Ctrl-C but where atari_data.layout.stats keeps it (atari_data.signals)."""
    root = Path(__file__).resolve().parents[2]
    importing = sorted(
        str(path.relative_to(root))
        for folder in ("packages", "tools")
        for path in (root / folder).rglob("*.py")
        if re.search(r"^\s*(import polars|from polars\b)", path.read_text(), re.M)
    )
    assert importing == ["packages/atari-data/src/atari_data/layout/stats.py"]


def test_doctor_keeps_out_of_a_datasets_cache_it_cannot_use(packed, tmp_path):
    """From an outside review: with HF_HOME naming what cannot be a folder (a file here; /proc/x there),
    doctor called every config of a healthy repository broken, blaming its card; doctor reads
    the files as they are now and needs no cache but lock files, which it keeps in a folder of its own.
    Nor does it import torch, which `datasets` and webdataset import where it is installed (4-7 s of a
    small CPU's time, for nothing a data tool uses); a caller who imports torch after finds both
    libraries torch's as before."""
    import os

    (tmp_path / "not-a-folder").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "HF_DATASETS_CACHE"}
    env["HF_HOME"] = str(tmp_path / "not-a-folder" / "hf")
    doctor = (
        "import sys; from atari_data.cli import main; code = main(sys.argv[1:]); print('torch' in sys.modules)\n"
        "import datasets, torch, webdataset\n"
        "print(datasets.config.TORCH_AVAILABLE, issubclass(webdataset.WebDataset, torch.utils.data.IterableDataset))\n"
        "sys.exit(code)"
    )
    # two doctors at once in one process's threads: the first to end put torch back under the other
    # (an outside review), which then called the healthy repository broken
    threads = (
        "import sys, threading; from pathlib import Path; from atari_data.publish.doctor import Doctor\n"
        "both, said = threading.Barrier(2), []\n"
        "def run(): both.wait(); said.append(Doctor(Path(sys.argv[1])).run().defects)\n"
        "ts = [threading.Thread(target=run) for _ in range(2)]; [t.start() for t in ts]; [t.join() for t in ts]\n"
        "import datasets; print(said, 'torch' in sys.modules, datasets.config.TORCH_AVAILABLE, len(sys.meta_path))"
    )
    together = subprocess.run([sys.executable, "-c", threads, str(packed)], capture_output=True, text=True, env=env)
    before = subprocess.run(
        [sys.executable, "-c", "import sys; print(len(sys.meta_path))"], capture_output=True, text=True
    )
    assert together.stdout.split() == ["[[],", "[]]", "False", "True", before.stdout.strip()], (
        together.stdout + together.stderr[-2000:]
    )
    done = subprocess.run(
        [sys.executable, "-c", doctor, "doctor", str(packed)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0 and "healthy" in done.stdout, done.stdout + done.stderr
    assert done.stdout.splitlines()[-2:] == ["False", "True True"], "doctor imported torch, or hid it from after"


def test_epsilon_for_one_game_beside_the_others(tmp_path, capsys):
    """--epsilon 0.3,Pong=0.5: each game's experts move at random with its own probability (the
    quickstart's Pong reads and plays better at 0.5, Boxing worse: docs/learning-on-a-cpu.md)."""
    root = tmp_path / "d"
    base = ["generate", "--root", str(root), "--train-frames", "20", "--val-frames", "4", "--min-train-episodes", "1"]
    base += ["--decision-cap", "20", "--baseline-episodes", "0"]
    assert main([*base, "--games", "Pong,Freeway", "--epsilon", "0.3, pong=0.5"]) == 0
    origins = {g: json.loads((root / "expert2f" / g / "meta.json").read_text())["origin"] for g in ("Pong", "Freeway")}
    assert origins["Pong"].endswith(", epsilon 0.5") and origins["Freeway"].endswith(", epsilon 0.3"), origins
    capsys.readouterr()
    for value, said in (
        ("Pong=2", "--epsilon: Pong=2.0: not a probability"),
        ("0.3,Breakout=0.5", "--epsilon: Breakout=0.5: Breakout is not among --games"),
        ("0.3,0.4", "--epsilon: 0.3,0.4: one probability for every game, then GAME=P for one"),
        ("0.3,Pong=x", "--epsilon: Pong=x: expected a probability, or GAME=probability"),
        ("0.3,Pongg=0.5", "--epsilon: unknown ALE v5 game 'Pongg'"),
        # from an outside review: the last of two won in silence, a blank one was the default
        ("0.3,pong=0.5,PONG=0.4", "--epsilon: Pong is given twice"),
        ("0.3,Pong=0.5,Pong=0.4", "--epsilon: Pong is given twice"),
        (" ", "--epsilon: ' ': expected a probability"),
        ("0.3,=0.5", "--epsilon: =0.5: expected a probability, or GAME=probability"),
        ("0.3,Pong=0.5=0.6", "--epsilon: Pong=0.5=0.6: expected a probability, or GAME=probability"),
    ):
        assert main([*base, "--root", str(tmp_path / "e"), "--games", "Pong", "--epsilon", value]) == 2, value
        err = capsys.readouterr().err
        assert err.startswith(f"error: {said}") and err.count("\n") == 1, (value, err)
    doom = ["generate", "--platform", "vizdoom", "--root", str(tmp_path / "v"), "--epsilon", "0.3,Pong=0.5"]
    assert main(doom) == 2
    assert "--epsilon: one probability for ViZDoom" in capsys.readouterr().err
