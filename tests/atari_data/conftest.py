import shutil

import pytest

from atari_data.produce.generate import GenerateConfig, generate_game


def small_config(root, **kw) -> GenerateConfig:
    base = dict(
        root=str(root),
        source="expert2f",
        train_frames=120,
        val_frames=20,
        min_train_episodes=2,
        decision_cap=150,
        baseline_episodes=1,
        seed=0,
    )
    base.update(kw)
    return GenerateConfig(**base)


def tree_bytes(root):
    """Every file under ``root`` by relative path: two layouts are the same bytes when these are equal."""
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="session")
def layout_master(tmp_path_factory):
    """A small valid layout from real ALE play: a two-frame Breakout and a one-frame Pong."""
    root = tmp_path_factory.mktemp("layout")
    generate_game(small_config(root), "Breakout")
    generate_game(small_config(root, source="expert"), "Pong")
    return root


@pytest.fixture
def layout(layout_master, tmp_path):
    """A private copy of the valid layout that a test may corrupt."""
    root = tmp_path / "root"
    shutil.copytree(layout_master, root)
    return root


@pytest.fixture(scope="session")
def packed(layout_master, tmp_path_factory):
    """The layout packed (small shards, so each split has several); tests must not change it."""
    from atari_data.publish.pack import PackConfig, pack

    out = tmp_path_factory.mktemp("packed") / "repo"
    pack(PackConfig(root=str(layout_master), out=str(out), shard_size=150_000))
    return out
