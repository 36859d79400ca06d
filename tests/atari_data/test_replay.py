import json

import pytest

from atari_data.cli import main
from atari_data.errors import AtariDataError
from atari_data.generate import generate_game
from atari_data.pack import PackConfig, pack
from atari_data.validate import validate

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
