import json
from pathlib import Path

import pytest

from atari_data.cli import main
from atari_data.errors import AtariDataError
from atari_data.layout.validate import validate
from atari_data.produce.generate import generate_game
from atari_data.publish.pack import PackConfig, pack

from .conftest import small_config


def tree(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    root = tmp_path_factory.mktemp("played")
    generate_game(small_config(root, decision_cap=300), "Breakout")  # auto-FIREs after every lost life
    generate_game(small_config(root, source="expert"), "Pong")
    return root


def test_pack_replay_then_rebuild_gives_the_same_bytes(played, tmp_path, capsys):
    repo = tmp_path / "repo"
    assert main(["pack", str(played), str(repo), "--replay"]) == 0
    assert not list(repo.rglob("*.png")), "no frames are shipped"
    eps = [json.loads(line) for line in (repo / "replay/expert2f/Breakout/episodes.jsonl").read_text().splitlines()]
    assert all(len(e["moves"]) > len(e["decisions"]) for e in eps), "auto-FIREs are among the moves"
    assert main(["doctor", str(repo)]) == 0
    rebuilt = tmp_path / "rebuilt"
    capsys.readouterr()
    assert main(["rebuild", str(repo), "--root", str(rebuilt)]) == 0
    out = capsys.readouterr().out
    assert "expert2f/Breakout:" in out and "; written" in out and "NOT" not in out
    assert tree(rebuilt) == tree(played)
    assert validate(rebuilt, images=True).ok


def test_a_tampered_move_list_is_detected(played, tmp_path, capsys):
    repo = tmp_path / "repo"
    pack(PackConfig(root=str(played), out=str(repo), replay=True))
    path = repo / "replay/expert/Pong/episodes.jsonl"
    eps = [json.loads(line) for line in path.read_text().splitlines()]
    eps[0]["moves"][5:40] = [3] * 35  # hold LEFT instead of what was played
    path.write_text("".join(json.dumps(e) + "\n" for e in eps))
    rebuilt = tmp_path / "rebuilt"
    assert main(["rebuild", str(repo), "--root", str(rebuilt)]) == 2
    out = capsys.readouterr()
    assert "expert/Pong:" in out.out and "NOT written" in out.out and "mismatch:" in out.out
    assert not (rebuilt / "expert" / "Pong").exists(), "a game with a wrong frame is not written"
    assert (rebuilt / "expert2f" / "Breakout" / "_READY").exists()


def test_only_played_sources_can_be_replay_packed(played, tmp_path):
    (played_copy := tmp_path / "copy").mkdir()
    import shutil

    shutil.copytree(played / "expert", played_copy / "expert")
    (played_copy / "expert" / "Pong" / "episodes.jsonl").unlink()
    with pytest.raises(AtariDataError, match="has no episodes.jsonl: only played sources"):
        pack(PackConfig(root=str(played_copy), out=str(tmp_path / "r"), replay=True))


@pytest.fixture(scope="module")
def replay_repo(played, tmp_path_factory):
    repo = tmp_path_factory.mktemp("replay") / "repo"
    pack(PackConfig(root=str(played), out=str(repo), replay=True))
    return repo


def _edit_jsonl(path, fn, line=0):
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    fn(rows[line])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _image(value):
    def fn(row):
        row["record"]["image"] = value  # the MD5s are of pixels, so they stay valid

    return fn


HOSTILE_REPLAYS = {
    "record image leaves the root": ("train.jsonl", _image("../../../escaped.png"), "image"),
    "record image is absolute": ("train.jsonl", _image("/tmp/laya-escaped.png"), "image"),
    "label out of range, MD5s intact": ("train.jsonl", lambda r: r["record"].update(label=99), "label"),
    "record line is not JSON": ("train.jsonl", "not json\n", "(record)"),
    "record line is not UTF-8": ("train.jsonl", b"\xff\xfe{}\n", "(record)"),
    "row without md5": ("train.jsonl", lambda r: r.pop("md5"), "(record)"),
    "episode line is not JSON": ("episodes.jsonl", '{"episode": 1,\n', "(episode)"),
    "episode without seed": ("episodes.jsonl", lambda e: e.pop("seed"), "seed"),
    "seed is a float": ("episodes.jsonl", lambda e: e.update(seed=1.5), "seed"),
    "short decisions": ("episodes.jsonl", lambda e: e.update(decisions=e["decisions"][:3]), "step"),
    "decisions past the moves": ("episodes.jsonl", lambda e: e.update(decisions=[10**9]), "decisions"),
    "a move outside the action set": ("episodes.jsonl", lambda e: e["moves"].__setitem__(0, 99), "moves"),
    "moves past the frame cap": ("episodes.jsonl", lambda e: e.update(moves=[0] * 30_000), "moves"),
    # copied into the rebuilt layout unread (an outside review): an episode's split is its records'
    "episode split unknown": ("episodes.jsonl", lambda e: e.update(split="test"), "split"),
    "episode split not its records'": ("episodes.jsonl", lambda e: e.update(split="train"), "split"),
    # copied as it was into the rebuilt layout and every pack of it: a line holds the writer's keys
    "unknown episode key": ("episodes.jsonl", lambda e: e.update(evil=[0] * 1000), "evil"),
    "unknown protocol key": ("meta.json", lambda m: m["protocol"].update(evil=1), "protocol.evil"),
    "meta is a list": ("meta.json", "[1, 2]\n", "(file)"),
    "meta nested past recursion": ("meta.json", "[" * 100_000 + "]" * 100_000, "(file)"),
    "meta with a 5,000-digit number": ("meta.json", '{"seed": ' + "9" * 5000 + "}", "(file)"),
    # past what ALE's setInt takes: a pybind11 TypeError traceback (an outside review)
    "frame cap past a C int": (
        "meta.json",
        lambda m: m["protocol"].update(max_frames_per_episode=2**31),
        "protocol.max_frames_per_episode",
    ),
}


@pytest.mark.parametrize("case", HOSTILE_REPLAYS)
def test_rebuild_refuses_hostile_input_on_one_line_and_writes_nothing(replay_repo, tmp_path, capsys, case):
    import shutil

    name, edit, field = HOSTILE_REPLAYS[case]
    repo = tmp_path / "a" / "b" / "repo"
    shutil.copytree(replay_repo, repo)
    path = repo / "replay/expert/Pong" / name
    if isinstance(edit, (str, bytes)):
        path.write_bytes(edit.encode() if isinstance(edit, str) else edit)
    elif name == "meta.json":
        meta = json.loads(path.read_text())
        edit(meta)
        path.write_text(json.dumps(meta))
    else:
        _edit_jsonl(path, edit)
    Path("/tmp/laya-escaped.png").unlink(missing_ok=True)  # the absolute target: must not appear
    before = {p for p in tmp_path.rglob("*")}
    rebuilt = tmp_path / "a" / "b" / "rebuilt"
    assert main(["rebuild", str(repo), "--root", str(rebuilt)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert f": {field}: " in err and str(path.parent) in err, err
    created = {p for p in tmp_path.rglob("*")} - before
    assert all(rebuilt in p.parents or p == rebuilt for p in created), f"written outside --root: {created}"
    assert not list(rebuilt.rglob("_READY*")) or not (rebuilt / "expert" / "Pong").exists()
    assert not (rebuilt / "expert" / "Pong").exists() and not list(rebuilt.rglob("*.lock"))
    assert not Path("/tmp/laya-escaped.png").exists()
    # doctor checks what rebuild checks before it plays: it called a pack of non-JSON lines healthy
    assert main(["doctor", str(repo)]) == 2
    out = capsys.readouterr().out
    assert f": {field}: " in out and str(path.parent) in out and "Traceback" not in out, out


@pytest.mark.parametrize("inside", ["", "replay", "replay/expert/Pong"])
def test_rebuild_into_the_repository_or_a_folder_in_it_is_refused(replay_repo, tmp_path, capsys, inside):
    """From an outside review: --root inside the repository (or the repository itself) replaced its
    replay game with a layout game, exit 0, and the repository no longer rebuilt."""
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(replay_repo, repo)
    before = tree(repo)
    root = repo / inside
    assert main(["rebuild", str(repo), "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {root}: --root: ") and len(err.strip().splitlines()) == 1, err
    assert tree(repo) == before


def test_rebuild_over_a_game_already_in_root_is_refused_unless_forced(replay_repo, played, tmp_path, capsys):
    """From an outside review: a game of ROOT that another command wrote was replaced without a word."""
    import shutil

    root = tmp_path / "root"
    shutil.copytree(played / "expert", root / "expert")
    (root / "expert" / "Pong" / "notes.txt").write_text("mine")
    before = tree(root)
    assert main(["rebuild", str(replay_repo), "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "expert/Pong" in err and "--force" in err, err
    assert tree(root) == before, "nothing rebuilt before the refusal"
    assert main(["rebuild", str(replay_repo), "--root", str(root), "--force"]) == 0
    assert tree(root) == tree(played)


@pytest.mark.parametrize("command", [["rebuild", "REPO"], ["generate", "--games", "Pong"]])
def test_an_empty_root_is_refused_not_taken_for_this_folder(replay_repo, tmp_path, capsys, monkeypatch, command):
    """From an outside review: --root "" wrote into the working folder."""
    monkeypatch.chdir(tmp_path)
    argv = [str(replay_repo) if a == "REPO" else a for a in command]
    assert main([*argv, "--root", ""]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --root: ") and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.iterdir())
