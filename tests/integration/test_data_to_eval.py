"""atari-data's generated baselines feed laya-eval's normalisation, through plain JSON only."""

from atari_data.produce.generate import GenerateConfig, generate_game
from atari_data.publish.pack import PackConfig, pack
from laya_eval.evaluate import RunConfig, evaluate


def test_generated_baselines_normalise_an_evaluation(tmp_path):
    """On Pong: a side that never moves loses in 764 decisions (ALE v5, seed 0), where a Freeway
    episode lasts 2,048 whatever is played, and this test took twice as long on it."""
    data = tmp_path / "data"
    meta = generate_game(
        GenerateConfig(
            root=str(data),
            source="expert",
            train_frames=30,
            val_frames=10,
            min_train_episodes=1,
            decision_cap=4500,
            baseline_episodes=1,
        ),
        "Pong",
    )
    b = meta["baselines"]

    def judged(baselines, out: str) -> dict:
        cfg = RunConfig(
            policy="constant:NOOP",
            games=["Pong"],
            out=str(tmp_path / out),
            episodes=1,
            random_episodes=1,
            cap=4500,
            baselines=str(baselines),
        )
        return evaluate(cfg, progress=False)["games"]["Pong"]

    g = judged(data, "r.json")
    assert g["mean"] != b["random_score_cap4500"], "a score at random's normalises to 0 whatever the expert's"
    assert g["baseline"]["expert"] == b["expert_score_cap4500"] and g["baseline"]["cap"] == 4500
    assert str(data) in g["baseline"]["source"]
    expected = (g["mean"] - b["random_score_cap4500"]) / (b["expert_score_cap4500"] - b["random_score_cap4500"])
    assert g["normalised"] == expected

    # The same baselines read from the packed repository (its meta/<source>/<Game>.json): laya-eval
    # knows that layout without importing atari-data, so only this holds the two together.
    packed = tmp_path / "packed"
    pack(PackConfig(root=str(data), out=str(packed), formats=("parquet",)))
    again = judged(packed, "r2.json")
    assert str(packed) in again["baseline"]["source"]
    assert {k: again["baseline"][k] for k in ("expert", "random", "cap")} == {
        k: g["baseline"][k] for k in ("expert", "random", "cap")
    }
    assert again["normalised"] == expected
