import pytest

from atari_data.produce.generate import GenerateConfig, generate_game


@pytest.fixture(scope="session")
def pong_data(tmp_path_factory):
    """A small two-frame Pong layout from real ALE play, shared read-only (copy it to corrupt it)."""
    root = tmp_path_factory.mktemp("pong-data")
    generate_game(
        GenerateConfig(
            root=str(root), train_frames=24, val_frames=8, min_train_episodes=1, decision_cap=40, baseline_episodes=0
        ),
        "Pong",
    )
    return root
