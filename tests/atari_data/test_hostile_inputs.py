"""The standing test: every atari-data command family fed generated hostile inputs (truncated,
oversized, non-UTF-8, path-escaping, duplicated, nested past any parser's depth) keeps the three
promises of ``tests/promises.py``. Concurrent writers are in ``test_concurrency.py``."""

import io
import json
import pickle
import re
import shutil
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atari_data.cli import main
from atari_data.publish.pack import PackConfig, pack
from laya_protocol.games import FULL_ACTIONS, minimal_actions

from ..promises import check_promises, returns_within, run_cli
from .test_import_atari_head import trial_files

SETTINGS = settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# -- hostile edits of a file's bytes ------------------------------------------------------------------

JUNK = [b"\xff\xfe", b"\x00", b"\n", b'"', b"{", b"]", b"\xe2\x80\xa8", b"\\u0000", b"1e999999"]
edits = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.sampled_from(JUNK)),
    st.tuples(st.just("escape"), st.sampled_from([b"../../../escaped", b"/tmp/laya-escaped-abs"])),
    st.tuples(st.just("digits"), st.integers(0, 30)),
    st.tuples(st.just("nest"), st.just(0)),
    st.tuples(st.just("duplicate"), st.floats(0, 1)),
    st.tuples(st.just("latin1"), st.just(0)),
)


def apply(data: bytes, edit) -> bytes:
    kind, *arg = edit
    if kind == "truncate":
        return data[: int(len(data) * arg[0])]
    if kind == "insert":
        at = int(len(data) * arg[0])
        return data[:at] + arg[1] + data[at:]
    if kind == "escape":  # keep the file valid JSON, send a path outside the folder
        return data.replace(b'"images/', b'"' + arg[0] + b"/", 1) if b'"images/' in data else data + arg[0]
    if kind == "digits":  # a number too long for any sane reader (Python refuses past 4,300 digits)
        runs = list(re.finditer(rb"(?<![\w.])\d+(?![\w.])", data))
        if not runs:
            return data + b"9" * 5000
        m = runs[arg[0] % len(runs)]
        return data[: m.start()] + b"9" * 5000 + data[m.end() :]
    if kind == "nest":
        return b"[" * 100_000 + b"]" * 100_000
    if kind == "duplicate":
        lines = data.splitlines(keepends=True)
        if not lines:
            return data
        i = int((len(lines) - 1) * arg[0])
        return b"".join(lines[: i + 1] + [lines[i]] + lines[i + 1 :])
    if kind == "latin1":
        return data.replace(b"e", b"\xe9", 3) if b"e" in data else data + b"\xe9"
    raise AssertionError(kind)


def edit_file(path: Path, edit) -> None:
    path.write_bytes(apply(path.read_bytes(), edit))


# -- layouts: validate, stats, pack --------------------------------------------------------------------

LAYOUT_FILES = [
    "expert2f/Breakout/meta.json",
    "expert2f/Breakout/train.jsonl",
    "expert2f/Breakout/val.jsonl",
    "expert/Pong/meta.json",
    "expert/Pong/train.jsonl",
    "expert2f/Breakout/episodes.jsonl",
]


@SETTINGS
@given(which=st.sampled_from(LAYOUT_FILES + ["png"]), edit=edits)
def test_layout_readers_keep_the_promises(layout_master, tmp_path_factory, which, edit):
    box = tmp_path_factory.mktemp("box")
    root = box / "root"
    shutil.copytree(layout_master, root)
    path = sorted((root / "expert2f/Breakout/images").iterdir())[3] if which == "png" else root / which
    edit_file(path, edit)
    check_promises(main, ["validate", root, "--images"], sandbox=box, target=None, report=True)
    check_promises(main, ["stats", root], sandbox=box, target=None)
    out = box / "packed"
    code, _ = check_promises(main, ["pack", root, out], sandbox=box, target=out)
    if code == 0:
        assert run_cli(main, ["doctor", out])[0] == 0, "a pack that was written is healthy"
    else:
        assert not out.exists(), "a refused pack leaves nothing"


def test_a_jsonl_line_over_the_record_limit_is_refused_before_it_is_parsed(layout_master, tmp_path):
    """Parsed JSON takes up to some 30 times its text: one 2 MB line of empty lists, 60 MB."""
    root = tmp_path / "root"
    shutil.copytree(layout_master, root)
    path = root / "expert2f/Breakout/train.jsonl"
    lines = path.read_text().splitlines()
    rec = json.loads(lines[2])
    rec["provenance"] = {"x": [[]] * 700_000}
    lines[2] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")
    for argv in (["validate", root], ["pack", root, tmp_path / "packed"]):
        code, out, err = run_cli(main, argv)
        assert code == 2 and "train.jsonl:3" in out + err and "over the record limit" in out + err, out + err


def test_a_meta_json_is_charged_what_it_takes_parsed(layout_master, tmp_path, monkeypatch):
    """From a hostile review: meta.json was read whole within the file limit (1 GB) and parsed with
    no charge for what parsing takes (some 30 times the text: a 60 MB one took doctor to 2.1 GB);
    a text held parsed whole is charged against the member limit, as an importer's are."""
    root = tmp_path / "root"
    shutil.copytree(layout_master, root)
    path = root / "expert2f/Breakout/meta.json"
    meta = json.loads(path.read_text())
    meta["zz"] = [{}] * 40_000  # 160 KB of text, about 5 MB parsed
    path.write_text(json.dumps(meta))
    monkeypatch.setenv("ATARI_DATA_LIMITS", "member=2")
    for argv in (["validate", root], ["stats", root]):
        code, out, err = run_cli(main, argv)
        assert code == 2 and "Breakout/meta.json" in out + err and "over the member limit" in out + err, out + err


@pytest.mark.parametrize(
    "key, setup",
    [
        ("mask", None),  # named, never written
        ("m\x00", None),  # a NUL in the name: os.open raises ValueError
        ("mask", lambda image: image.mkdir()),  # a folder where the image should be
        ("q/", lambda image: image.parent.mkdir()),  # images/<id>_q/.png, its folder there
        ("mask", lambda image: image.write_bytes(b"not a png")),
    ],
    ids=["missing", "nul", "folder", "slash", "broken"],
)
def test_a_side_image_the_provenance_names_is_checked_by_validate_and_pack(layout_master, tmp_path, key, setup):
    """A record's provenance naming a side image (``images/<id>_<name>.png``, as importers write
    masks) that is missing, not a file or broken: validate says so on its line, and pack refuses on
    one line (before, a FileNotFoundError traceback from pack, and validate passed)."""
    root = tmp_path / "root"
    shutil.copytree(layout_master, root)
    game = root / "expert2f/Breakout"
    lines = (game / "train.jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    rec.setdefault("provenance", {})[key] = f"images/{rec['id']}_{key}.png"
    lines[1] = json.dumps(rec)
    (game / "train.jsonl").write_text("\n".join(lines) + "\n")
    if setup:
        setup(game / rec["provenance"][key])
    code, err = check_promises(main, ["validate", root, "--images"], sandbox=tmp_path, target=None, report=True)
    assert code == 2, err
    out = tmp_path / "packed"
    code, err = check_promises(main, ["pack", root, out], sandbox=tmp_path, target=out)
    assert code == 2 and ("train.jsonl" in err or f"{rec['id']}_" in err), err
    assert not out.exists()


@pytest.mark.parametrize("which", ["expert2f/Breakout/meta.json", "expert2f/Breakout/train.jsonl", "png"])
def test_a_fifo_in_a_layout_is_one_line_not_a_wait(layout_master, tmp_path, which):
    """read_bytes opened the file before asking what it was: open() on a FIFO waits for a writer."""
    import os

    root = tmp_path / "root"
    shutil.copytree(layout_master, root)
    path = sorted((root / "expert2f/Breakout/images").iterdir())[3] if which == "png" else root / which
    path.unlink()
    os.mkfifo(path)
    for argv, report in ((["validate", root, "--images"], True), (["pack", root, tmp_path / "packed"], False)):
        done, got = returns_within(
            60,
            lambda a=argv, r=report: check_promises(main, a, sandbox=tmp_path, target=tmp_path / "packed", report=r),
            [path],
        )
        assert done, f"{argv[0]} waited on the FIFO {which}"
        assert got[0] == 2, got
        assert report or "not a regular file" in got[1], got[1]  # validate prints its defects on stdout
    done, _ = returns_within(60, lambda: check_promises(main, ["stats", root], sandbox=tmp_path, target=None), [path])
    assert done, f"stats waited on the FIFO {which}"


LINKABLE = ["frame", "images", "game", "source", "train.jsonl", "val.jsonl", "meta.json", "episodes.jsonl", "_READY"]


@pytest.mark.parametrize("which", LINKABLE)
def test_anything_in_a_layout_reached_through_a_symlink_is_refused_by_validate_and_pack(layout_master, tmp_path, which):
    """A frame, a game's file or any folder of the layout that is a symlink to an intact copy
    elsewhere on the machine: pack would publish whatever it points at, so both refuse it, naming
    it (and, for a frame, the record and field)."""
    root = tmp_path / "root"
    shutil.copytree(layout_master, root)
    game = root / "expert2f/Breakout"
    rec = json.loads((game / "train.jsonl").read_text().splitlines()[2])
    linked = {"frame": game / rec["image"], "images": game / "images", "game": game, "source": game.parent}
    linked = linked.get(which, game / which)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(linked, elsewhere / linked.name)
    linked.symlink_to(elsewhere / linked.name)
    code, out, err = run_cli(main, ["validate", root, "--images"])
    assert code == 2 and "symbolic link" in out and "Traceback" not in out + err, out + err
    assert ("train.jsonl:3: image:" if which == "frame" else f"{linked}: (") in out, out
    out = tmp_path / "packed"
    for argv in (["pack", root, out], ["pack", root, out, "--replay"]):
        code, err = check_promises(main, argv, sandbox=tmp_path, target=out)
        assert code == 2 and "symbolic link" in err and err.count("\n") == 1, err
        assert not out.exists()


@pytest.mark.parametrize("which", ["meta.json", "train.jsonl"])
def test_validate_names_a_linked_file_once_and_reads_nothing_through_it(layout_master, tmp_path, which):
    """The link is the defect. What it points at is not read (here a copy with a defect of its own
    that validate would name), and no record is judged against a meta.json it did not read."""
    root = tmp_path / "root"
    shutil.copytree(layout_master, root)
    game = root / "expert2f/Breakout"
    target = tmp_path / "elsewhere" / which
    target.parent.mkdir()
    text = (game / which).read_text()
    target.write_text(
        text.replace('"game":"Breakout"', '"game":"Pong"').replace('"game": "Breakout"', '"game": "Pong"')
    )
    assert target.read_text() != text, "the copy carries a defect of its own"
    (game / which).unlink()
    (game / which).symlink_to(target)
    code, out, err = run_cli(main, ["validate", root])
    named = [line for line in out.splitlines() if str(game) in line]
    assert code == 2 and "Traceback" not in out + err, out + err
    assert named == [
        f"{game / which}: (file): is a symbolic link (a layout is plain files and folders: "
        "pack would publish what a link points at)"
    ], out


@pytest.mark.parametrize("which", ["meta.json", "train.jsonl"])
def test_a_missing_game_file_is_one_defect_not_one_a_record(layout_master, tmp_path, which):
    """Without meta.json the records' frame count is unknown, and without train.jsonl there is
    nothing to count against meta.json: the missing file is named, and nothing is blamed for it."""
    root = tmp_path / "root"
    shutil.copytree(layout_master, root)
    game = root / "expert2f/Breakout"
    (game / which).unlink()
    code, out, err = run_cli(main, ["validate", root])
    named = [line for line in out.splitlines() if str(game) in line]
    assert code == 2 and named == [f"{game / which}: (file): is missing"], out + err


@pytest.mark.parametrize(
    "which, replay",
    [
        ("frame", False),
        ("meta.json", False),
        ("train.jsonl", False),
        ("frame", True),
        ("episodes.jsonl", True),
        ("images", False),
    ],
)
def test_a_file_swapped_for_a_symlink_after_validate_is_refused_by_pack(
    layout_master, tmp_path, monkeypatch, which, replay
):
    """pack validates, then reads: a game's file swapped for a link to an intact copy elsewhere in
    between (by anything else that can write the layout) is refused by the read itself, not published."""
    import atari_data.layout.validate as validate_module

    box = tmp_path / "box"
    root = box / "root"
    shutil.copytree(layout_master, root)
    game = root / "expert2f/Breakout"
    rec = json.loads((game / "train.jsonl").read_text().splitlines()[2])
    swapped = game / rec["image"] if which == "frame" else game / which
    elsewhere = tmp_path / "elsewhere" / swapped.name
    elsewhere.parent.mkdir()
    (shutil.copytree if swapped.is_dir() else shutil.copyfile)(swapped, elsewhere)
    real = validate_module.validate

    def validate_then_swap(*args, **kwargs):
        report = real(*args, **kwargs)
        shutil.rmtree(swapped) if swapped.is_dir() else swapped.unlink()
        swapped.symlink_to(elsewhere)
        return report

    monkeypatch.setattr(validate_module, "validate", validate_then_swap)
    out = box / "packed"
    code, err = check_promises(main, ["pack", root, out, *(["--replay"] if replay else [])], sandbox=box, target=out)
    assert code == 2 and "symbolic link" in err and swapped.name in err, err
    assert not out.exists()


def test_a_layout_of_symlinks_trains_but_is_not_published(layout_master, tmp_path):
    """A copy whose every file is a link (``cp -rs``, as git-annex or DVC caches hold data) is read
    for training as it was before links were refused, while validate and pack still refuse it."""
    import numpy as np

    from atari_data.torch import AtariDataset

    farm = tmp_path / "farm"
    for path in sorted(layout_master.rglob("*")):
        target = farm / path.relative_to(layout_master)
        if path.is_dir():
            target.mkdir(parents=True)
        else:
            target.symlink_to(path)
    linked, plain = AtariDataset(farm, "expert2f"), AtariDataset(layout_master, "expert2f")
    assert len(linked) == len(plain) > 0
    for i in (0, len(plain) - 1):
        a, b = linked[i], plain[i]
        assert a.keys() == b.keys() and all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)
    code, out, err = run_cli(main, ["validate", farm])
    assert code == 2 and "symbolic link" in out, out + err


# -- replay-packed repositories: rebuild ----------------------------------------------------------------


@pytest.fixture(scope="module")
def replay_master(layout_master, tmp_path_factory):
    repo = tmp_path_factory.mktemp("replay") / "repo"
    pack(PackConfig(root=str(layout_master), out=str(repo), replay=True, games=["Breakout"]))
    return repo


@SETTINGS
@given(which=st.sampled_from(["meta.json", "episodes.jsonl", "train.jsonl", "val.jsonl"]), edit=edits)
def test_rebuild_keeps_the_promises(replay_master, tmp_path_factory, which, edit):
    box = tmp_path_factory.mktemp("box")
    repo, root = box / "in" / "repo", box / "in" / "root"
    shutil.copytree(replay_master, repo)
    edit_file(repo / "replay/expert2f/Breakout" / which, edit)
    Path("/tmp/laya-escaped-abs.png").unlink(missing_ok=True)
    check_promises(main, ["rebuild", repo, "--root", root], sandbox=box, target=root)
    assert not Path("/tmp/laya-escaped-abs.png").exists()


# -- Atari-HEAD archives: import ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def head_master(tmp_path_factory):
    rng = np.random.default_rng(1)
    root = tmp_path_factory.mktemp("atari-head") / "record"
    root.mkdir()
    ok = [i for i, a in enumerate(FULL_ACTIONS) if a in set(minimal_actions("Breakout"))]
    rows = ["GameName,trial_id,subject_id,load_trial,highest_score,total_frame"]
    with zipfile.ZipFile(root / "breakout.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for t in (101, 102):
            stem, tar, txt = trial_files(rng, t, 2394000 + t, [0] * 6, [ok[i % len(ok)] for i in range(6)])
            z.writestr(f"breakout/{stem}.tar.bz2", tar)
            z.writestr(f"breakout/{stem}.txt", txt)
            rows.append(f"breakout,{t},RZ,0,100,6")
    (root / "meta_data.csv").write_text("\n".join(rows) + "\n")
    return root


def _rewrite_member(zip_path: Path, suffix: str, fn) -> None:
    with zipfile.ZipFile(zip_path) as z:
        members = [(i, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as z:
        for info, data in members:
            z.writestr(info.filename, fn(data) if info.filename.endswith(suffix) else data)


@SETTINGS
@given(which=st.sampled_from(["meta_data.csv", "breakout.zip", ".txt", ".tar.bz2"]), edit=edits)
def test_atari_head_import_keeps_the_promises(head_master, tmp_path_factory, which, edit):
    box = tmp_path_factory.mktemp("box")
    record, root = box / "record", box / "layout"
    shutil.copytree(head_master, record)
    if which.startswith("."):
        _rewrite_member(record / "breakout.zip", which, lambda data: apply(data, edit))
    else:
        edit_file(record / which, edit)
    check_promises(main, ["import", "atari_head", "--from", record, "--root", root], sandbox=box, target=root)


def _bz2_tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:bz2") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _set_field(text: bytes, line: int, column: int, value: bytes) -> bytes:
    lines = text.split(b"\n")
    parts = lines[line - 1].split(b",")
    parts[column] = value
    lines[line - 1] = b",".join(parts)
    return b"\n".join(lines)


HEAD_CASES = {
    "labels not UTF-8": (".txt", lambda d: d.replace(b"RZ", b"R\xff", 1) + b"\xff\xfe\n", "(file)"),
    "an inf action": (".txt", lambda d: _set_field(d, 2, 5, b"inf"), "(row)"),
    "a short labels row": (".txt", lambda d: d + b"1_99,0\n", "(row)"),
    "a bz2 bomb of frames": (".tar.bz2", lambda d: _bz2_tar({"s/x_1.png": bytes(30_000_000)}), "(member)"),
}


@pytest.mark.parametrize("case", HEAD_CASES)
def test_atari_head_named_defects_are_one_line(head_master, tmp_path, case):
    suffix, fn, field = HEAD_CASES[case]
    record = tmp_path / "record"
    shutil.copytree(head_master, record)
    _rewrite_member(record / "breakout.zip", suffix, fn)
    code, err = check_promises(
        main,
        ["import", "atari_head", "--from", record, "--root", tmp_path / "l"],
        sandbox=tmp_path,
        target=tmp_path / "l",
    )
    assert code == 2 and f": {field}: " in err, err


@pytest.mark.parametrize(
    "csv",
    [
        "GameName,trial_id,subject_id,load_trial\nbreakout,101\n",
        "GameName,trial_id,subject_id,load_trial\n\xff\xfe,1,2,3\n",
    ],
)
def test_atari_head_bad_meta_data_csv_is_one_line(head_master, tmp_path, csv):
    record = tmp_path / "record"
    shutil.copytree(head_master, record)
    (record / "meta_data.csv").write_bytes(csv.encode("latin-1"))
    code, err = check_promises(
        main,
        ["import", "atari_head", "--from", record, "--root", tmp_path / "l"],
        sandbox=tmp_path,
        target=tmp_path / "l",
    )
    assert code == 2 and "meta_data.csv" in err, err


def test_a_zip_bomb_is_refused_by_its_declared_size(head_master, tmp_path, monkeypatch):
    monkeypatch.setenv("ATARI_DATA_LIMITS", "")  # --limit below sets it for this process; undone after
    record = tmp_path / "record"
    shutil.copytree(head_master, record)
    _rewrite_member(record / "breakout.zip", ".txt", lambda d: d + bytes(20_000_000))  # deflates ~1,000-fold
    code, err = check_promises(
        main,
        ["import", "atari_head", "--from", record, "--root", tmp_path / "l"],
        sandbox=tmp_path,
        target=tmp_path / "l",
    )
    assert code == 2 and "inflates" in err and "--limit ratio" in err, err
    # The limits are flags: raised, the same archive gets past the size check (and fails on its content).
    code, err = check_promises(
        main,
        ["--limit", "ratio=100000", "import", "atari_head", "--from", record, "--root", tmp_path / "l"],
        sandbox=tmp_path,
        target=tmp_path / "l",
    )
    assert "inflates" not in err


# -- checkpoint experts: generate --expert sb3: --------------------------------------------------------


def _sb3(path: Path, policy_bytes: bytes | None = None) -> Path:
    """An SB3 PPO zip for Pong in the upstream layout, optionally with other bytes as policy.pth."""
    from .test_checkpoint_experts import write_sb3

    write_sb3(path, len(minimal_actions("Pong")))
    if policy_bytes is not None:
        _rewrite_member(path, "policy.pth", lambda _: policy_bytes)
    return path


class _Payload:
    def __reduce__(self):
        return (open, ("/tmp/laya-sb3-pwned", "w"))


def _state_with(tmp: Path, **changes) -> bytes:
    """policy.pth bytes of a genuine SB3 state dict with some entries replaced."""
    import torch

    from .test_checkpoint_experts import write_sb3

    state = write_sb3(tmp / "genuine.zip", len(minimal_actions("Pong")))
    state.update(changes)
    return _saved(torch, state)


SB3_CASES = {
    "a pickle in policy.pth": lambda tmp, torch: _saved(torch, {"x": _Payload()}),
    "a bare pickle as policy.pth": lambda tmp, torch: pickle.dumps({"x": _Payload()}),
    "a layer of the wrong shape": lambda tmp, torch: _state_with(
        tmp, **{"features_extractor.cnn.2.weight": torch.zeros(64, 32, 3, 3)}
    ),
    "a non-tensor weight": lambda tmp, torch: _state_with(tmp, **{"features_extractor.linear.0.bias": 3}),
    "NaN weights": lambda tmp, torch: _state_with(tmp, **{"action_net.bias": torch.full((6,), float("nan"))}),
    "truncated policy.pth": lambda tmp, torch: _state_with(tmp)[:5000],
    # torch.save stores its members; torch.load inflates deflated ones all the same
    "a deflated policy.pth": lambda tmp, torch: _deflated(_state_with(tmp, pad=torch.zeros(16 << 20))),
}


def _saved(torch, obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _deflated(torch_zip: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(torch_zip)) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    return buf.getvalue()


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # torch says so of the planted pickle
@pytest.mark.parametrize("case", SB3_CASES)
def test_generate_refuses_a_hostile_sb3_checkpoint_at_load(tmp_path, case):
    import torch

    Path("/tmp/laya-sb3-pwned").unlink(missing_ok=True)
    model = _sb3(tmp_path / "model.zip", policy_bytes=SB3_CASES[case](tmp_path, torch))
    root = tmp_path / "root"
    code, err = check_promises(
        main,
        [
            "generate",
            "--root",
            root,
            "--games",
            "Pong",
            "--expert",
            f"sb3:{model}",
            "--train-frames",
            "20",
            "--val-frames",
            "4",
            "--baseline-episodes",
            "0",
        ],
        sandbox=tmp_path,
        target=root,
    )
    assert code == 2 and "model.zip" in err, err
    assert not Path("/tmp/laya-sb3-pwned").exists()
    assert "weights_only" not in err, "torch's advice to load it anyway is not ours to relay"
    if case == "a pickle in policy.pth":
        assert "could run code" in err, err
    if case == "a deflated policy.pth":
        assert "compressed" in err, err


@SETTINGS
@given(edit=edits)
def test_generate_with_a_damaged_sb3_zip_keeps_the_promises(tmp_path_factory, edit):
    box = tmp_path_factory.mktemp("box")
    model = _sb3(box / "model.zip")
    edit_file(model, edit)
    check_promises(
        main,
        [
            "generate",
            "--root",
            box / "root",
            "--games",
            "Pong",
            "--expert",
            f"sb3:{model}",
            "--train-frames",
            "8",
            "--val-frames",
            "2",
            "--min-train-episodes",
            "1",
            "--decision-cap",
            "20",
            "--baseline-episodes",
            "0",
        ],
        sandbox=box,
        target=box / "root",
    )


def test_an_unreachable_hub_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: connection refused
    monkeypatch.setattr(time, "sleep", lambda s: None)  # huggingface_hub's retry back-off
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(c, "ENDPOINT", "http://127.0.0.1:9")
    code, err = check_promises(
        main,
        ["generate", "--root", tmp_path / "r", "--games", "Pong", "--expert", "hub:sb3/ppo-PongNoFrameskip-v4"],
        sandbox=tmp_path,
        target=tmp_path / "r",
    )
    assert code == 2 and "sb3/ppo-PongNoFrameskip-v4" in err and "ConnectError" in err, err


# -- packed repositories: doctor ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def packed_master(layout_master, tmp_path_factory):
    out = tmp_path_factory.mktemp("packed") / "repo"
    pack(PackConfig(root=str(layout_master), out=str(out)))
    return out


def _card(repo: Path, fn) -> None:
    text = (repo / "README.md").read_text()
    (repo / "README.md").write_text(fn(text))


DOCTOR_CASES = {
    "a dataset_info entry that is a string": lambda t: t.replace(
        "dataset_info:\n", "dataset_info:\n- just a string\n", 1
    ),
    "a splits entry that is a string": lambda t: re.sub(r"(\n  splits:\n)", r"\1  - oops\n", t, count=1),
    "an empty data_files glob": lambda t: re.sub(r"path: data/\S*", "path: ''", t, count=1),
    "an absolute data_files glob": lambda t: re.sub(r"path: data/", "path: /etc/", t, count=1),
    "a data_files glob that climbs out": lambda t: re.sub(r"path: data/", "path: ../../", t, count=1),
    "configs as a string": lambda t: re.sub(r"configs:\n(- .*\n(  .*\n)*)", "configs: expert2f\n", t, count=1),
    "data_files as a string": lambda t: re.sub(r"data_files:\n(  - .*\n(    .*\n)*)+", "data_files: x\n", t, count=1),
}
#: Cards whose configs make datasets read other files than their patterns name (a reviewer hid a
#: dictionary bomb where only datasets looked), or whose dataset_info is malformed in a new way.
CARD_TRICKS = {
    "a config with a data_dir": lambda t: t.replace("- config_name: ", "- data_dir: hidden\n  config_name: "),
    "a data_files URL": lambda t: re.sub(r"path: data/", "path: file:///tmp/data/", t),
    "a data_files folder": lambda t: re.sub(r"(path: data/\S*)", r"\1/", t),
    "a chained data_files path": lambda t: re.sub(r"path: data/", "path: zip://x::data/", t),
    "a dataset_info entry without splits": lambda t: re.sub(r"\n  splits:\n(  - .*\n(    .*\n)*)+", "\n", t),
    "a dataset_info config_name that is a list": lambda t: re.sub(
        r"(dataset_info:\n- config_name: )(\S+)", r"\1[\2]", t
    ),
    "a config name with a newline": lambda t: re.sub(r"- config_name: (\S+)", r'- config_name: "\1\\nb"', t, count=1),
    # From a hostile review: features that datasets obeys and doctor passed ("healthy"): grey frames,
    # a label read as text, and provenance as an image, whose path in a row datasets then opened
    # (a FIFO or /dev/stdin held doctor for ever).
    "grey frames in the features": lambda t: t.replace(
        "  - name: image\n    dtype: image\n", "  - name: image\n    dtype:\n      image:\n        mode: L\n", 1
    ),
    "a label of text in the features": lambda t: t.replace(
        "  - name: label\n    dtype: int64\n", "  - name: label\n    dtype: string\n", 1
    ),
    # a pattern whose recursive parts make a glob's cost grow with their number (7x each on a
    # 30-deep folder: doctor and train hung)
    "a data_files glob recursing twice": lambda t: re.sub(r"path: data/", "path: data/**/**/", t, count=1),
    # a 3 MB header took doctor 125 s and 1.8 GB to parse, then said healthy
    "a YAML header past its cap": lambda t: t.replace("---\n", "---\nzz: [" + "0," * 600_000 + "0]\n", 1),
    "provenance as an image in the features": lambda t: t.replace(
        "  - name: provenance\n    dtype: string\n", "  - name: provenance\n    dtype: image\n", 1
    ),
}
DOCTOR_CASES.update(CARD_TRICKS)


@pytest.mark.parametrize("case", DOCTOR_CASES)
def test_doctor_refuses_a_hostile_card_on_one_line(packed_master, tmp_path, case):
    repo = tmp_path / "repo"
    shutil.copytree(packed_master, repo)
    before = (repo / "README.md").read_text()
    _card(repo, DOCTOR_CASES[case])
    assert (repo / "README.md").read_text() != before, "the edit applied"
    code, err = check_promises(main, ["doctor", repo], sandbox=tmp_path, target=None, report=True)
    assert code == 2


def dictionary_bomb(repo: Path, rows: int = 400, size: int = 256 << 10, source: str = "*") -> Path:
    """Pong's train Parquet of a pack (of ``source``) rewritten as ``rows`` rows whose frames are one
    random value, stored once in the dictionary page: the file holds ``size`` bytes of it, a reader
    that expands the dictionary ``rows`` times that."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shard = next((repo / "data").glob(f"{source}/Pong/train-*.parquet"))
    table = pq.read_table(shard)
    table = table.take([i % table.num_rows for i in range(rows)])
    value = np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8).tobytes()
    column = table.schema.get_field_index("image")
    frames = pa.array([{"bytes": value, "path": None}] * rows, table.schema.field("image").type)
    table = table.set_column(column, table.schema.field("image"), frames)
    pq.write_table(table, shard, row_group_size=rows, dictionary_pagesize_limit=2 * size)
    assert shard.stat().st_size < 2 * size + (1 << 20)
    return shard


def test_doctor_refuses_a_parquet_dictionary_bomb_before_it_expands(packed_master, tmp_path):
    """One 256 KB frame stored once and referred to from 400 rows: datasets expands it 400 times (a
    reviewer's 1 MB file took doctor to 2.5 GB)."""
    repo = tmp_path / "repo"
    shutil.copytree(packed_master, repo)
    shard = dictionary_bomb(repo)
    code, out, err = run_cli(main, ["doctor", repo])
    assert code == 2 and shard.name in out + err and "inflates" in out + err, out + err


def test_the_torch_dataset_refuses_a_parquet_dictionary_bomb_and_a_card_that_leaves_the_folder(packed_master, tmp_path):
    from atari_data.errors import AtariDataError
    from atari_data.torch import AtariDataset

    repo = tmp_path / "repo"
    shutil.copytree(packed_master, repo)
    dictionary_bomb(repo)
    with pytest.raises(AtariDataError, match="inflates"):
        AtariDataset(repo, f"{next((repo / 'data').glob('*/Pong')).parent.name}-Pong")
    outside = tmp_path / "outside.parquet"
    shard = next((packed_master / "data").glob("*/Pong/train-*.parquet"))
    shutil.copy(shard, outside)
    source = shard.parent.parent.name
    _card(repo, lambda t: t.replace(f"path: data/{source}/Pong/train-*.parquet", "path: ../outside.parquet"))
    with pytest.raises(AtariDataError, match="leaves the repository"):
        AtariDataset(repo, f"{source}-Pong")


def test_doctor_refuses_an_lmdb_member_declaring_20_gb(tmp_path):
    repo = tmp_path / "repo"
    (repo / "webdataset" / "meltingpot" / "clean_up").mkdir(parents=True)
    (repo / "README.md").write_text("---\nlmdb_pack:\n  games:\n    clean_up: 1\n---\n# x\n")
    with open(repo / "webdataset/meltingpot/clean_up/train-000000.tar", "wb") as f:
        info = tarfile.TarInfo("000000.frames.npy")
        info.size = 20 << 30
        f.write(info.tobuf(format=tarfile.GNU_FORMAT) + bytes(10_000))  # 10 KB on disk
    code, out, err = run_cli(main, ["doctor", repo])
    assert code == 2 and "over the member limit" in out, out + err


@SETTINGS
@given(which=st.sampled_from(["README.md", "tar", "meta"]), edit=edits)
def test_doctor_keeps_the_promises(packed_master, tmp_path_factory, which, edit):
    box = tmp_path_factory.mktemp("box")
    repo = box / "repo"
    shutil.copytree(packed_master, repo)
    path = {
        "README.md": repo / "README.md",
        "tar": next((repo / "webdataset").rglob("*.tar")),
        "meta": next((repo / "meta").rglob("*.json")),
    }[which]
    edit_file(path, edit)
    check_promises(main, ["doctor", repo], sandbox=box, target=None, report=True)


def test_stats_on_a_hostile_meta_json_is_one_line(layout, tmp_path):
    meta = layout / "expert2f/Breakout/meta.json"
    for text in (
        b"[" * 50_000 + b"]" * 50_000,
        b'{"seed": ' + b"9" * 5000 + b"}",
        b'{"x": "\xff"}',
        json.dumps({"train": []}).encode(),
    ):
        meta.write_bytes(text)
        code, err = check_promises(main, ["stats", layout], sandbox=tmp_path, target=None)
        assert code == 2 and "meta.json" in err, err


# -- the limits themselves --------------------------------------------------------------------------------


def test_a_png_declaring_a_huge_image_is_refused_before_inflating():
    import struct
    import zlib

    from atari_data.layout.png import decode_png, encode_png

    real = encode_png(np.zeros((4, 4, 3), np.uint8))
    header = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", 13) + b"IHDR" + header + struct.pack(">I", zlib.crc32(b"IHDR" + header))
    bomb = real[:8] + chunk + real[33:]  # 100,000 x 100,000 RGB declared; a few bytes of data
    with pytest.raises(ValueError, match="over the frame limit"):
        decode_png(bomb)
    # Without its signature the declared size went unchecked, and the one-IDAT shortcut asked the
    # inflater for 30 GB up front (an outside review's finding).
    with pytest.raises(ValueError, match="is not a PNG"):
        decode_png(b"NOTAPNG!" + bomb[8:])


def test_a_bad_limit_flag_is_one_line(tmp_path):
    code, err = check_promises(main, ["--limit", "memory=9", "stats", tmp_path], sandbox=tmp_path, target=None)
    assert code == 2 and "--limit: 'memory=9' is not KIND=N" in err, err


def test_a_lowered_limit_reaches_worker_processes(layout_master, tmp_path, monkeypatch):
    monkeypatch.setenv("ATARI_DATA_LIMITS", "")  # restored after the test, whatever main sets
    code, err = check_promises(main, ["--limit", "file=1", "stats", layout_master], sandbox=tmp_path, target=None)
    assert code == 0, err  # small files pass a 1 MB limit
    import os

    assert os.environ["ATARI_DATA_LIMITS"] == "file=1", "set in the environment, where spawned workers read it"


# -- what an outside review found (each failed before its fix) --------------------------------------------


def test_a_planted_lock_symlink_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "root" / "expert2f").mkdir(parents=True)
    (tmp_path / "root" / "expert2f" / ".Pong.lock").symlink_to(victim)
    code, err = check_promises(
        main,
        [
            "generate",
            "--root",
            tmp_path / "root",
            "--games",
            "Pong",
            "--train-frames",
            "8",
            "--val-frames",
            "2",
            "--baseline-episodes",
            "0",
        ],
        sandbox=tmp_path / "root",
        target=None,
    )
    assert code == 2 and ".Pong.lock: (lock):" in err and victim.read_text() == "precious", err


@pytest.mark.parametrize("which", ["expert2f/Breakout/val.jsonl", "expert2f/Breakout/meta.json"])
def test_a_device_in_a_layout_is_refused_not_read_forever(layout, tmp_path, which):
    """A link to a device: validate names the link and reads nothing through it; stats reads a
    game's files as GameDir does (following links, as training does), refusing the device."""
    (layout / which).unlink()
    (layout / which).symlink_to("/dev/zero")
    code, out, err = run_cli(main, ["validate", layout])
    assert code == 2 and "is a symbolic link" in out and out.count(str(layout / which)) == 1, out + err
    code, err = check_promises(main, ["stats", layout], sandbox=tmp_path, target=None)
    assert code in (0, 2) and (code == 0 or "regular file" in err or "symbolic link" in err), err


def test_playjev_frames_outside_their_shard_are_refused(tmp_path):
    import hashlib

    from .test_import_playjev import write_shard

    root = tmp_path / "PlayJev-data"
    write_shard(root, "floppy_bird", "clone_a", np.random.default_rng(0))
    secret = tmp_path / "secret.jpg"
    shutil.copy(next((root / "floppy_bird/clone_a/frames").iterdir()), secret)
    path = root / "floppy_bird/clone_a/records.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[0].update(frame="../../../secret.jpg", frame_md5=hashlib.md5(secret.read_bytes()).hexdigest())
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "layout"
    code, err = check_promises(main, ["import", "playjev", "--from", root, "--root", out], sandbox=tmp_path, target=out)
    assert code == 2 and "frame: path '../../../secret.jpg' leaves its folder" in err, err


@pytest.mark.parametrize(
    "edit,field", [(lambda r: r.update(step="zero"), "step"), (lambda r: r.update(episode=[1]), "episode")]
)
def test_playjev_records_with_wrong_types_are_one_line(tmp_path, edit, field):
    from .test_import_playjev import write_shard

    root = tmp_path / "PlayJev-data"
    write_shard(root, "floppy_bird", "clone_a", np.random.default_rng(0))
    path = root / "floppy_bird/clone_a/records.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    edit(rows[4])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, err = check_promises(
        main, ["import", "playjev", "--from", root, "--root", tmp_path / "l"], sandbox=tmp_path, target=tmp_path / "l"
    )
    assert code == 2 and f"records.jsonl:5: {field}:" in err, err


def test_a_copied_game_that_does_not_validate_is_never_marked_ready(tmp_path):
    """The writer's last check, for a source that copies what it is given: an episode's first step
    handed with a previous frame of its own (PlayJev once did, after a drop on step 0)."""
    from atari_data.errors import AtariDataError
    from atari_data.layout.writer import GameWriter, Step

    frames = [np.full((8, 8), v, np.uint8) for v in (10, 200)]
    w = GameWriter(tmp_path, "synth", "Breakout", frame_format="gray_8x8", origin="t", license="CC0-1.0", frames=2)
    w.add_episode(0, "train", [Step(frames[1], 0, prev_frame=frames[0]), Step(frames[0], 1)])
    with pytest.raises(AtariDataError, match="does not validate"):
        w.finish()
    assert not list(tmp_path.rglob("_READY")) and not list(tmp_path.rglob("*.partial"))


def test_an_sb3_head_declaring_10_to_the_11_actions_is_refused_before_building(tmp_path):
    import torch

    head = torch.zeros(1).expand(10**11, 512)  # a few bytes on disk, 200 TB as a layer
    model = _sb3(tmp_path / "model.zip", policy_bytes=_state_with(tmp_path, **{"action_net.weight": head}))
    code, err = check_promises(
        main,
        [
            "generate",
            "--root",
            tmp_path / "r",
            "--games",
            "Pong",
            "--expert",
            f"sb3:{model}",
            "--baseline-episodes",
            "0",
        ],
        sandbox=tmp_path,
        target=tmp_path / "r",
    )
    assert code == 2 and "declares 100000000000 actions" in err, err


@pytest.mark.parametrize(
    "actions,rewards",
    [(["a"] * 30, [0.0] * 30), ([float("nan")] * 30, [0.0] * 30), ([1] * 30, ["x"] * 30), (3, [0.0] * 30)],
)
def test_jat_columns_of_the_wrong_type_are_counted_or_one_line(tmp_path, actions, rewards):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .test_import_jat import frames_of_a_game, stacks

    folder = tmp_path / "jat" / "atari-breakout"
    folder.mkdir(parents=True)
    images = [{"bytes": b, "path": None} for b in stacks(frames_of_a_game(np.random.default_rng(0), 30))]
    pq.write_table(
        pa.table({"image_observations": [images], "discrete_actions": [actions], "rewards": [rewards]}),
        folder / "train-00000-of-00001.parquet",
    )
    code, err = check_promises(
        main,
        ["import", "jat", "--from", tmp_path / "jat", "--root", tmp_path / "l"],
        sandbox=tmp_path,
        target=tmp_path / "l",
    )
    assert code in (0, 2) and "Traceback" not in err


@pytest.mark.parametrize("value", ["²", "9" * 5000, "-1", "0"])
def test_limit_values_that_are_not_plain_digits_are_one_line(tmp_path, value, monkeypatch):
    monkeypatch.setenv("ATARI_DATA_LIMITS", "")
    code, err = check_promises(main, ["--limit", f"frame={value}", "stats", tmp_path], sandbox=tmp_path, target=None)
    assert code == 2 and "--limit:" in err, err
    monkeypatch.setenv("ATARI_DATA_LIMITS", f"frame={value}")
    code, err = check_promises(main, ["stats", tmp_path], sandbox=tmp_path, target=None)
    assert code == 2 and "ATARI_DATA_LIMITS:" in err and "--limit" not in err.split(":", 2)[1], err


def test_the_torch_dataset_refuses_a_packed_folder_missing_a_shard(packed_master, tmp_path):
    """A shard deleted from a packed folder: datasets would read the split as a smaller one."""
    from atari_data.errors import AtariDataError
    from atari_data.torch import AtariDataset

    repo = tmp_path / "repo"
    shutil.copytree(packed_master, repo)
    shard = next((repo / "data").glob("*/Pong/train-*.parquet"))
    source = shard.parent.parent.name
    assert len(AtariDataset(repo, f"{source}-Pong")) > 0
    shard.unlink()
    with pytest.raises(AtariDataError, match=rf"config '{source}-Pong': its 'train' patterns match no file"):
        AtariDataset(repo, f"{source}-Pong")


@pytest.mark.parametrize("kind", ["a file", "a missing path", "a missing Path", "an empty folder"])
def test_the_torch_dataset_names_what_its_data_is_not_as_training_does(tmp_path, kind):
    """One rule says what a --data names (``publish.repo.data_kind``): a file was read as a packed
    folder ("README.md is missing"), and a missing ``./path`` was asked of the Hub as a repo id."""
    from atari_data.errors import AtariDataError
    from atari_data.torch import AtariDataset

    data = {
        "a file": tmp_path / "f.txt",
        "a missing path": "./no/such",
        "a missing Path": Path("./no/such"),  # pathlib drops the "./": never a Hub id all the same
        "an empty folder": tmp_path / "empty",
    }[kind]
    if kind == "a file":
        data.write_text("x")
    if kind == "an empty folder":
        data.mkdir()
    expected = "has no ready games of expert2f" if kind == "an empty folder" else "not a layout root or packed"
    with pytest.raises(AtariDataError, match=expected) as e:
        AtariDataset(data, "expert2f")
    assert str(e.value).startswith(f"{data}: "), e.value


def test_a_packed_folder_that_lost_its_card_is_told_so_not_read_as_a_layout(packed_master, tmp_path):
    from atari_data.errors import AtariDataError
    from atari_data.publish.repo import data_kind
    from atari_data.torch import AtariDataset

    repo = tmp_path / "repo"
    shutil.copytree(packed_master, repo)
    (repo / "README.md").unlink()
    assert data_kind(repo) == "packed"
    with pytest.raises(AtariDataError, match="README.md: is missing"):
        AtariDataset(repo, "expert2f")


@pytest.mark.parametrize("label", [-1, 4, True, None])
def test_collate_refuses_a_label_that_is_not_one_of_the_rows_options(label):
    """A Dataset the caller built is not checked row by row: a label past the options was a bare
    IndexError, and -1 put the whole target on the last option."""
    from atari_data.errors import AtariDataError
    from atari_data.torch import collate

    row = {
        "id": "r1",
        "actions": ["NOOP", "FIRE", "RIGHT", "LEFT"],
        "label": label,
        "image": np.zeros((2, 2, 3), np.uint8),
    }
    with pytest.raises(AtariDataError, match=r"r1: label: is not an index into its 4 options"):
        collate([row])


@pytest.mark.parametrize("case", CARD_TRICKS)
def test_the_torch_dataset_reads_only_the_files_it_checked(packed_master, tmp_path, case):
    """A dictionary bomb under hidden/, where a data_dir would send datasets: each trick is one
    AtariDataError, or the rows read are the checked files' own (before, the bomb was read whole)."""
    from atari_data.errors import AtariDataError
    from atari_data.torch import AtariDataset

    repo, bombed = tmp_path / "repo", tmp_path / "bombed"
    shutil.copytree(packed_master, repo)
    shutil.copytree(packed_master, bombed)
    bomb = dictionary_bomb(bombed)
    hidden = repo / "hidden" / bomb.relative_to(bombed)
    hidden.parent.mkdir(parents=True)
    shutil.move(bomb, hidden)
    _card(repo, CARD_TRICKS[case])
    source = bomb.parent.parent.name
    try:
        rows = AtariDataset(repo, f"{source}-Pong")
    except AtariDataError as e:
        assert "\n" not in str(e)
        return
    assert len(rows) > 0 and all(rows[i]["image"].shape == (210, 160, 3) for i in range(len(rows)))


def test_a_checked_file_named_like_a_glob_is_refused(packed_master, tmp_path):
    """A card pattern ``t[*].parquet`` matches a file literally named ``t*.parquet``, which is
    checked; datasets, handed that name, globs it again and would read ``tbomb.parquet`` too (a
    reviewer's 440 rows, a dictionary bomb expanded). Files named with glob characters are refused."""
    from atari_data.errors import AtariDataError
    from atari_data.torch import AtariDataset

    repo = tmp_path / "repo"
    shutil.copytree(packed_master, repo)
    shard = next((repo / "data").glob("*/Pong/train-*.parquet"))
    shutil.copy(shard, shard.with_name("t*.parquet"))  # the intact rows, under a glob's name
    bomb = dictionary_bomb(repo)
    bomb.rename(bomb.with_name("tbomb.parquet"))
    source = bomb.parent.parent.name
    _card(repo, lambda t: re.sub(r"path: (data/\S+/)train-\*\.parquet", r"path: \1t[*].parquet", t))
    with pytest.raises(AtariDataError, match=r"t\*\.parquet.*glob") as e:
        AtariDataset(repo, f"{source}-Pong")
    assert "\n" not in str(e.value)


def _label_as_text(repo: Path, source: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for shard in sorted((repo / "data" / source / "Pong").glob("validation-*.parquet")):
        table = pq.read_table(shard)
        i = table.schema.get_field_index("label")
        pq.write_table(table.set_column(i, "label", pa.array([str(x) for x in table["label"].to_pylist()])), shard)


READER_TRICKS = {
    "a label column of text": lambda repo, s: _label_as_text(repo, s),
    "a pattern from the home folder": lambda repo, s: _card(
        repo, lambda t: t.replace(f"path: data/{s}/Pong/validation-*.parquet", "path: ~/validation-*.parquet", 1)
    ),
    "a pattern with braces": lambda repo, s: _card(
        repo,
        lambda t: t.replace(
            f"path: data/{s}/Pong/validation-*.parquet", f"path: 'data/{s}/{{Pong,Breakout}}/validation-*.parquet'", 1
        ),
    ),
    "a pattern of any depth": lambda repo, s: _card(
        repo, lambda t: t.replace(f"path: data/{s}/Pong/validation-*.parquet", "path: '**/validation-*.parquet'", 1)
    ),
}


@pytest.mark.parametrize("reader", ["rows", "AtariDataset", "doctor"])
@pytest.mark.parametrize("case", READER_TRICKS)
def test_every_reader_of_a_packed_folder_refuses_what_doctor_refuses(packed_master, tmp_path, case, reader):
    """A label column of strings passed doctor (datasets casts it on load) and parquet_rows gave '3',
    AtariDataset a bare ValueError at collate; edited card patterns were an IndexError in rows(),
    or Breakout's rows read as Pong's."""
    from atari_data.errors import AtariDataError
    from atari_data.publish.parquet_rows import rows
    from atari_data.torch import AtariDataset

    repo = tmp_path / "repo"
    shutil.copytree(packed_master, repo)
    source = next((repo / "data").glob("*/Pong")).parent.name
    READER_TRICKS[case](repo, source)
    if reader == "doctor":
        code, err = check_promises(main, ["doctor", repo], sandbox=tmp_path, target=None, report=True)
        assert code == 2
        return
    with pytest.raises(AtariDataError) as e:
        if reader == "rows":
            list(rows(repo, f"{source}-Pong", "validation"))
        else:
            ds = AtariDataset(repo, f"{source}-Pong", split="validation")
            [ds[i] for i in range(len(ds))]
    assert "\n" not in str(e.value) and str(repo) in str(e.value), e.value


def _column(repo: Path, source: str, key: str, value) -> None:
    """Every validation row of Pong given ``value`` in column ``key``, its type kept (doctor refuses it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for shard in sorted((repo / "data" / source / "Pong").glob("validation-*.parquet")):
        table = pq.read_table(shard)
        i = table.schema.get_field_index(key)
        pq.write_table(
            table.set_column(i, table.schema.field(i), pa.array([value] * table.num_rows, table.schema.field(i).type)),
            shard,
        )


@pytest.mark.parametrize(
    "key,value,field", [("label", 99, "label"), ("label", -1, "label"), ("game", "Breakout", "(game|question)")]
)
def test_the_torch_dataset_refuses_a_row_doctor_refuses(packed_master, tmp_path, key, value, field):
    """A label of 99 or -1, or a Breakout row in the Pong config, read as rows: an IndexError at
    collate, or a wrong batch (from an outside review)."""
    from atari_data.errors import AtariDataError
    from atari_data.torch import AtariDataset

    repo = tmp_path / "repo"
    shutil.copytree(packed_master, repo)
    source = next((repo / "data").glob("*/Pong")).parent.name
    _column(repo, source, key, value)
    code, _ = check_promises(main, ["doctor", repo], sandbox=tmp_path, target=None, report=True)
    assert code == 2
    ds = AtariDataset(repo, f"{source}-Pong", split="validation")
    with pytest.raises(AtariDataError, match=rf"row 0 .*: {field}: "):
        ds[0]


def _rewritten(repo: Path, source: str, change) -> None:
    import pyarrow.parquet as pq

    for shard in sorted((repo / "data" / source / "Pong").glob("validation-*.parquet")):
        pq.write_table(change(pq.read_table(shard)), shard)


def _large(table):
    import pyarrow as pa

    kinds = {pa.string(): pa.large_string(), pa.binary(): pa.large_binary()}

    def bigger(t):
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, bigger(f.type)) for f in t])
        if pa.types.is_list(t):
            return pa.large_list(bigger(t.value_type))
        return kinds.get(t, t)

    return table.cast(pa.schema([pa.field(f.name, bigger(f.type)) for f in table.schema]))


OTHER_WRITERS = {
    "columns in another order": lambda t: t.select(list(reversed(t.column_names))),
    "large types (polars)": _large,
    "a label of int32": lambda t: t.set_column(t.schema.get_field_index("label"), "label", t["label"].cast("int32")),
    "a dictionary-encoded game": lambda t: t.set_column(
        t.schema.get_field_index("game"), "game", t["game"].dictionary_encode()
    ),
}


@pytest.mark.parametrize("case", OTHER_WRITERS)
def test_a_parquet_file_another_tool_wrote_with_the_same_values_reads(packed_master, tmp_path, case):
    """The column check took exact arrow types and order: polars' large types, another column order,
    an int32 label or a dictionary-encoded string, all of which load_dataset reads, were refused."""
    from atari_data.torch import AtariDataset

    repo = tmp_path / "repo"
    shutil.copytree(packed_master, repo)
    source = next((repo / "data").glob("*/Pong")).parent.name
    _rewritten(repo, source, OTHER_WRITERS[case])
    code, out, err = run_cli(main, ["doctor", repo])
    assert code == 0, out + err
    ds = AtariDataset(repo, f"{source}-Pong", split="validation")
    assert all(ds[i]["image"].shape == (210, 160, 3) for i in range(len(ds)))


def test_a_required_column_of_nulls_is_refused_by_every_reader(packed_master, tmp_path):
    """A column of nulls fitted any type: parquet_rows gave label None where doctor refused."""
    import pyarrow as pa

    from atari_data.errors import AtariDataError
    from atari_data.publish.parquet_rows import rows

    repo = tmp_path / "repo"
    shutil.copytree(packed_master, repo)
    source = next((repo / "data").glob("*/Pong")).parent.name
    nulls = lambda t: t.set_column(t.schema.get_field_index("label"), "label", pa.nulls(t.num_rows))  # noqa: E731
    _rewritten(repo, source, nulls)
    with pytest.raises(AtariDataError, match="label"):
        list(rows(repo, f"{source}-Pong", "validation"))


def _odd_frames(repo: Path) -> tuple[str, Path]:
    """Pong's train Parquet of a pack rewritten so that row 0's frame is a PNG declaring 4000x4000
    pixels (its image data a few bytes: a reader that inflates first finds that out only after) and
    row 1's a whole grey one of the game's size; the game's meta.json says RGB 210x160."""
    import zlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from atari_data.layout.png import _png, encode_png

    shard = next((repo / "data").glob("*/Pong/train-*.parquet"))
    table = pq.read_table(shard)
    images = table.column("image").to_pylist()
    images[0] = {"bytes": _png(4000, 4000, 2, zlib.compress(b"\0" * 64)), "path": None}
    images[1] = {"bytes": encode_png(np.zeros((210, 160), np.uint8)), "path": None}
    table = table.set_column(
        table.schema.get_field_index("image"), "image", pa.array(images, type=table.schema.field("image").type)
    )
    pq.write_table(table, shard)
    return shard.parent.parent.name, shard


def test_a_frame_of_another_size_than_its_games_is_refused_by_every_reader(packed_master, layout_master, tmp_path):
    """From a hostile review: the readers never compared a frame with its game's frame_format, so a
    7.5 MB pack of PNGs declaring 4000x4000 took `train` to 10 GB and AtariDataset gave 4000x4000
    'Pong' frames, and frames of mixed sizes failed with numpy's words, naming nothing. doctor alone
    refused them."""
    from atari_data.errors import AtariDataError
    from atari_data.layout import list_games
    from atari_data.layout.png import encode_png
    from atari_data.publish.parquet_rows import rows
    from atari_data.torch import AtariDataset

    repo = tmp_path / "repo"
    shutil.copytree(packed_master, repo)
    source, shard = _odd_frames(repo)
    ds = AtariDataset(repo, f"{source}-Pong")
    with pytest.raises(AtariDataError, match=r"row 0 .*: image: declares 4000x4000 pixels, expected RGB 210x160"):
        ds[0]
    with pytest.raises(AtariDataError, match=r"row 1 .*: image: is L 210x160, expected RGB 210x160"):
        ds[1]
    with pytest.raises(AtariDataError, match=rf"{shard.name}: row 0: image: declares 4000x4000 pixels, expected"):
        next(iter(rows(repo, f"{source}-Pong")))

    layout = tmp_path / "layout"
    shutil.copytree(layout_master, layout)
    g = next(g for g in list_games(layout) if g.game == "Pong")
    rec = next(g.records("train"))
    (g.path / rec["image"]).write_bytes(encode_png(np.zeros((100, 100, 3), np.uint8)))
    with pytest.raises(
        AtariDataError, match=r"image: cannot read frame \(declares 100x100 pixels, expected RGB 210x160"
    ):
        g.frame(rec)
    # and a meta.json without a frame_format checked nothing (an outside review): its frames could be any size
    meta = json.loads((g.path / "meta.json").read_text())
    del meta["frame_format"]
    (g.path / "meta.json").write_text(json.dumps(meta))
    g = next(g for g in list_games(layout) if g.game == "Pong")
    with pytest.raises(AtariDataError, match=r"meta.json: frame_format: is missing or not"):
        g.frame(rec)


@pytest.mark.parametrize(
    "metadata,said",
    [
        (b"[" * 100_000 + b"]" * 100_000, "is not the JSON of datasets' features"),
        (None, "are not a record row's"),  # provenance marked as an image: datasets would open its paths
    ],
)
def test_a_parquet_files_datasets_metadata_must_be_a_record_rows(packed_master, tmp_path, metadata, said):
    """From a hostile review: datasets reads the features a Parquet file's 'huggingface' schema
    metadata declares. Nested 100,000 deep it was a RecursionError traceback from train and
    AtariDataset while doctor said healthy; declaring provenance an image made datasets open the
    path a row holds."""
    import pyarrow.parquet as pq

    from atari_data.errors import AtariDataError
    from atari_data.torch import AtariDataset

    repo = tmp_path / "repo"
    shutil.copytree(packed_master, repo)
    shard = next((repo / "data").glob("*/Pong/train-*.parquet"))
    table = pq.read_table(shard)
    if metadata is None:
        doc = json.loads(table.schema.metadata[b"huggingface"])
        doc["info"]["features"]["provenance"] = {"_type": "Image"}
        metadata = json.dumps(doc).encode()
    pq.write_table(table.replace_schema_metadata({b"huggingface": metadata}), shard)
    code, out, err = run_cli(main, ["doctor", repo])
    assert code == 2 and shard.name in out + err and said in out + err, (out + err)[-2000:]
    with pytest.raises(AtariDataError, match=said):
        AtariDataset(repo, f"{shard.parent.parent.name}-Pong")


def test_doctor_loads_no_folder_holding_files_datasets_would_read_beside_the_card(packed_master, tmp_path):
    """From an outside review: doctor streams each config with load_dataset(folder), which also
    reads a legacy dataset_infos.json (and a .huggingface.yaml, whose configs replace the card's);
    declaring provenance an image there (the card giving no dataset_info) had datasets open the path
    a row's provenance holds (/dev/stdin held doctor for ever). Either is refused with the card, by
    every reader."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    repo = tmp_path / "repo"
    shutil.copytree(packed_master, repo)
    _card(repo, lambda t: re.sub(r"dataset_info:\n(- .*\n|  .*\n)*", "", t, count=1))
    shard = next((repo / "data").glob("*/Pong/train-*.parquet"))
    table = pq.read_table(shard)
    opened = str(tmp_path / "opened-by-datasets.png")
    table = table.set_column(
        table.schema.get_field_index("provenance"), "provenance", pa.array([opened] * table.num_rows)
    )
    pq.write_table(table.replace_schema_metadata(None), shard)
    from atari_data.publish.card import read_card
    from atari_data.schema import hf_features

    infos = {}
    for c in read_card(repo)["configs"]:
        features = hf_features(1 if c["config_name"].split("-")[0] == "expert" else 2).to_dict()
        infos[c["config_name"]] = {"features": {**features, "provenance": {"_type": "Image"}}}
    (repo / "dataset_infos.json").write_text(json.dumps(infos))
    code, out, err = run_cli(main, ["doctor", repo])
    said = out + err
    assert code == 2 and "dataset_infos.json" in said and "opened-by-datasets" not in said, said[-3000:]
    (repo / "dataset_infos.json").unlink()
    (repo / ".huggingface.yaml").write_text("configs:\n- config_name: expert\n  data_dir: elsewhere\n")
    code, out, err = run_cli(main, ["doctor", repo])
    assert code == 2 and ".huggingface.yaml: (file): is read by datasets" in out + err, out + err


def _understating_footer(path: Path, mb: int) -> None:
    """A Parquet file of one zstd page of ``mb`` MB of zeros whose footer says its column inflates
    to 1,000 bytes (the sizes rewritten as varints of the same length)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": pa.array([bytes(mb << 20)])}), path, compression="zstd", use_dictionary=False)
    md = pq.ParquetFile(path).metadata.row_group(0)
    data = bytearray(path.read_bytes())
    start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")

    def varint(n: int, width: int | None = None) -> bytes:
        out = bytearray()
        while True:
            b, n = n & 0x7F, n >> 7
            more = n if width is None else len(out) < width - 1
            out.append(b | (0x80 if more else 0))
            if not more:
                return bytes(out)

    footer = bytes(data[start:-8])
    for real in {md.column(0).total_uncompressed_size, md.total_byte_size}:
        said = varint(real << 1)  # zigzag of a non-negative i64
        footer = footer.replace(said, varint(1000 << 1, len(said)))
    data[start:-8] = footer
    path.write_bytes(bytes(data))
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).total_uncompressed_size == 1000


def test_a_parquet_page_is_charged_what_its_own_header_says(tmp_path, monkeypatch):
    """From a hostile review: a row group's cost was read from the footer, a sum someone wrote; pyarrow
    inflates each page to what the page's own header says, so a 34 KB file whose footer said 1,000
    bytes held a 1 GB page and took the JAT import to 3.27 GB before its size was seen."""
    from atari_data import parquet
    from atari_data.errors import AtariDataError

    path = tmp_path / "lying.parquet"
    _understating_footer(path, 64)
    monkeypatch.setenv("ATARI_DATA_LIMITS", "member=16")
    # refused by what the page declares (64 MB and its charge), before the row group is read: read
    # first, the same file was refused only by what it had become (134,217,736 bytes), once inflated
    with pytest.raises(AtariDataError, match=r"row group 0: declares 67,10.,... bytes, over the member limit"):
        parquet.check(path)


def test_a_frames_declared_size_is_read_whatever_its_form(packed_master, tmp_path):
    """From an outside review: the check before inflating read a PNG's IHDR at byte 12 only, so a PNG
    with a chunk before its header, or a JPEG, was decoded whole (48 MB for 4000x4000) before its
    size was refused."""
    import zlib

    from PIL import Image

    from atari_data.layout.png import _chunk, _png, declared_size_problem

    want = ("RGB", (160, 210))
    big = _png(4000, 4000, 2, zlib.compress(b"\0" * 64))
    ahead = big[:8] + _chunk(b"tEXt", b"a\0b") + big[8:]  # a chunk before IHDR: no PNG, by its spec
    jpeg = io.BytesIO()
    Image.new("RGB", (400, 300)).save(jpeg, format="JPEG")
    assert "declares 4000x4000 pixels" in (declared_size_problem(big, want) or "")
    assert "first chunk is not its header" in (declared_size_problem(ahead, want) or "")
    assert "declares 300x400 pixels" in (declared_size_problem(jpeg.getvalue(), want) or "")


def test_features_written_by_an_older_datasets_are_a_record_rows(packed_master, tmp_path):
    """From an outside review: features were compared as text, so a card whose lists an older datasets
    wrote as `sequence: string` (it reads them as today's `list: string`) was refused."""
    repo = tmp_path / "repo"
    shutil.copytree(packed_master, repo)
    _card(repo, lambda t: t.replace("    list: ", "    sequence: "))
    assert "sequence: string" in (repo / "README.md").read_text()
    code, out, err = run_cli(main, ["doctor", repo])
    assert code == 0 and "healthy" in out, out + err


def test_a_card_of_many_recursive_globs_is_refused_before_they_walk_the_folder(packed_master, tmp_path):
    """From an outside review: one '**' a pattern, but a thousand such patterns, each a walk of the
    folder (9.5 s on a tree of 600 folders from a 54 KB header), were globbed one by one before any
    was found to match nothing."""
    repo = tmp_path / "repo"
    shutil.copytree(packed_master, repo)
    many = "".join(f"  - split: train\n    path: data/**/x{i}.parquet\n" for i in range(100))
    _card(repo, lambda t: t.replace("  data_files:\n", "  data_files:\n" + many, 1))
    code, out, err = run_cli(main, ["doctor", repo])
    assert code == 2 and "recursive patterns" in out + err and "matches no file" not in out + err, out + err
