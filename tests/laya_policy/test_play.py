import json

import numpy as np
import pytest
import torch

from laya_eval.cli import main as eval_main
from laya_eval.evaluate import load_results
from laya_policy.backbone import build_backbone
from laya_policy.checkpoint import AgentConfig, load_checkpoint, save_checkpoint
from laya_policy.imageprep import ImagePrep
from laya_policy.model import ChoicePolicy
from laya_policy.play import LayaPolicy, PathMismatch

from .test_model import questions


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    backbone, tokenizer = build_backbone("tiny", image_size=128, seed=1)
    policy = ChoicePolicy(backbone, tokenizer)
    path = tmp_path_factory.mktemp("ckpt") / "tiny"
    save_checkpoint(policy, AgentConfig(image_size=128, preprocess="gpu", frames=2), path)
    return path, policy


@pytest.fixture(scope="module")
def cnn_ckpt(tmp_path_factory):
    """The reference CNN's checkpoint: for tests of the video writer, which any policy drives; a process
    that plays it starts without transformers."""
    from laya_policy.cnn import NatureCNN
    from laya_policy.presets import CNN, CNN_IMAGE_SIZE

    torch.manual_seed(1)
    path = tmp_path_factory.mktemp("ckpt") / "cnn"
    save_checkpoint(NatureCNN(), AgentConfig(image_size=CNN_IMAGE_SIZE, preprocess="gpu", frames=2, backbone=CNN), path)
    return path


def test_checkpoint_round_trip_restores_the_same_logits(ckpt):
    path, original = ckpt
    loaded, cfg = load_checkpoint(path)
    assert cfg.image_size == 128 and cfg.preprocess == "gpu" and cfg.frames == 2
    frames = np.random.default_rng(0).integers(0, 256, (2, 210, 160, 3), dtype=np.uint8)
    pixels = ImagePrep(128)(frames)
    enc = original.encode(questions("Pong"), n_images=2)
    with torch.no_grad():
        a = original.eval()(original.encode_images(pixels)[None], enc)
        b = loaded(loaded.encode_images(pixels)[None], enc)
    assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.filterwarnings("error:Cannot enable progress bars")
def test_loading_a_checkpoint_draws_no_library_progress_bar(ckpt, capsys, monkeypatch):
    """transformers' "Loading weights" bar went into every log that loaded a policy (laya-eval's
    included); loading keeps it off, and leaves the library's own setting as it found it, without a
    warning where HF_HUB_DISABLE_PROGRESS_BARS=1 is set (as atari-data sets it when not on a terminal)."""
    import importlib

    from transformers.utils import logging

    # The Hub client reads its variable once, at import: in this worker an earlier atari-data command
    # may have set it first. Without it, then with it, whatever ran before.
    hub_bars = importlib.import_module("huggingface_hub.utils.tqdm")
    monkeypatch.setattr(hub_bars, "HF_HUB_DISABLE_PROGRESS_BARS", None)  # unset
    logging.enable_progress_bar()  # as a fresh process has it (a CLI test may have turned it off)
    capsys.readouterr()
    load_checkpoint(ckpt[0])
    assert "Loading weights" not in capsys.readouterr().err
    assert logging.is_progress_bar_enabled()
    monkeypatch.setattr(hub_bars, "HF_HUB_DISABLE_PROGRESS_BARS", True)
    load_checkpoint(ckpt[0])
    assert logging.is_progress_bar_enabled()


def test_old_configs_mean_512_through_the_processor(ckpt, tmp_path):
    import shutil

    path = tmp_path / "old"
    shutil.copytree(ckpt[0], path)
    cfg = json.loads((path / "vlm_agent_config.json").read_text())
    for key in ("preprocess", "image_size"):
        cfg.pop(key)
    (path / "vlm_agent_config.json").write_text(json.dumps(cfg))
    from laya_policy.checkpoint import load_config

    assert (load_config(path).preprocess, load_config(path).image_size) == ("processor", 512)


def test_playing_on_another_path_is_refused_unless_forced(ckpt):
    with pytest.raises(PathMismatch, match="trained with preprocess=gpu"):
        LayaPolicy(str(ckpt[0]), preprocess="processor")
    assert LayaPolicy(str(ckpt[0]), preprocess="processor", force=True).cache is None


def test_laya_eval_plays_a_checkpoint_through_the_entry_point(ckpt, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = eval_main(
        [
            "run",
            "--policy",
            f"laya:{ckpt[0]}",
            "--games",
            "Pong",
            "--episodes",
            "2",
            "--cap",
            "12",
            "--random-episodes",
            "0",
            "--out",
            str(out),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    res = load_results(out)
    g = res["games"]["Pong"]
    assert g["error"] is None and sum(g["steps"]) == 24
    assert res["policy"]["identity"]["backbone"] == "tiny"


def test_two_frame_play_hits_the_feature_cache(ckpt):
    from laya_eval.batch import Batch

    policy = LayaPolicy(str(ckpt[0]))
    policy.reset("Pong", ("NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"))
    rng = np.random.default_rng(0)
    prev = rng.integers(0, 256, (3, 210, 160, 3), dtype=np.uint8)
    for t in range(6):
        cur = rng.integers(0, 256, (3, 210, 160, 3), dtype=np.uint8)
        p = policy(
            Batch(
                "Pong",
                policy._question and tuple(policy._question["criteria"]),
                cur,
                prev if t else cur,
                np.full(3, t == 0),
                np.arange(3),
            )
        )
        assert p.shape == (3, 6) and np.allclose(p.sum(1), 1)
        prev = cur
    assert policy.cache.hit_rate >= 0.45


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_play_records_a_video(ckpt, tmp_path, capsys, suffix):
    from laya_policy.cli import main

    out = tmp_path / f"pong{suffix}"
    victim = tmp_path / "victim"  # a link planted at the temporary name was written through
    victim.write_text("ORIGINAL\n")
    (tmp_path / f".pong.tmp{suffix}").symlink_to(victim)
    assert main(["play", "--model", str(ckpt[0]), "--game", "Pong", "--video", str(out), "--max-decisions", "8"]) == 0
    assert "Pong: 8 decisions" in capsys.readouterr().out
    assert victim.read_text() == "ORIGINAL\n"
    if suffix == ".gif":
        from PIL import Image

        with Image.open(out) as im:
            assert im.n_frames == 8 and im.size == (320, 420)
    else:
        import imageio.v3 as iio

        assert iio.imread(out).shape[0] == 8
    assert main(["play", "--model", str(tmp_path / "nope"), "--game", "Pong", "--video", str(out)]) == 2
    # refused before play: the video's folders were made all the same (an outside review)
    deep = tmp_path / "new" / "deeper" / f"x{suffix}"
    assert main(["play", "--model", str(tmp_path / "nope"), "--game", "Pong", "--video", str(deep)]) == 2
    assert not (tmp_path / "new").exists()
    out_in = tmp_path / "made" / "here" / f"y{suffix}"
    assert (
        main(["play", "--model", str(ckpt[0]), "--game", "Pong", "--video", str(out_in), "--max-decisions", "2"]) == 0
    )
    assert out_in.is_file()


def test_a_checkpoint_asking_to_run_its_own_code_is_refused_without_a_question(ckpt, tmp_path, monkeypatch):
    """A tokenizer config naming a class in the checkpoint's own .py file made transformers ask
    "run the custom code? [y/N]"; a "y" ran it. Nothing in a checkpoint runs, asked or not."""
    import shutil

    copy = tmp_path / "ckpt"
    shutil.copytree(ckpt[0], copy)
    config = copy / "backbone" / "tokenizer_config.json"
    tok = json.loads(config.read_text())
    tok.update(auto_map={"AutoTokenizer": ["evil.EvilTok", None]}, tokenizer_class="EvilTok")
    config.write_text(json.dumps(tok))
    marker = tmp_path / "ran"
    (copy / "backbone" / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.setattr("builtins.input", lambda *a: "y")
    with pytest.raises(ValueError, match="backbone: is not a loadable backbone .*custom code"):
        load_checkpoint(copy)
    assert not marker.exists(), "the checkpoint's code ran"


@pytest.mark.parametrize("target", ["/etc/hostname", "/dev/zero"])
def test_push_stages_no_symlink_from_a_checkpoint(ckpt, tmp_path, target):
    """A symlink in the checkpoint folder was followed when staging: /etc/hostname's contents were
    staged for upload, and /dev/zero was copied without end."""
    import shutil

    from laya_policy.push import stage

    copy = tmp_path / "ckpt"
    shutil.copytree(ckpt[0], copy)
    (copy / "notes.txt").symlink_to(target)
    with pytest.raises(ValueError, match="notes.txt: is a symlink"):
        stage(copy, "me/tiny", tmp_path / "staged")
    assert not (tmp_path / "staged").exists()


@pytest.mark.parametrize("name", ["vlm_agent_config.json", "training.json"])
def test_a_checkpoint_config_is_refused_by_its_size_before_it_is_read(ckpt, tmp_path, name):
    """A config is a few KB; a 3 GB one was read whole (MemoryError traceback). Here 64 MB of sparse zeros."""
    import os
    import shutil

    from laya_policy.checkpoint import CONFIG
    from laya_policy.push import model_card

    assert CONFIG == "vlm_agent_config.json"
    copy = tmp_path / "ckpt"
    shutil.copytree(ckpt[0], copy)
    with open(copy / name, "a") as f:
        os.truncate(f.fileno(), 64 << 20)
    with pytest.raises(ValueError, match=f"{name}: is 67,108,864 bytes; a checkpoint's JSON is at most 1 MB"):
        load_checkpoint(copy) if name == CONFIG else model_card(copy, "me/tiny")


def test_a_training_json_that_is_not_an_object_is_one_line(ckpt, tmp_path):
    """It was an AttributeError traceback, after the staging folder had been written."""
    import shutil

    from laya_policy.push import stage

    copy = tmp_path / "ckpt"
    shutil.copytree(ckpt[0], copy)
    (copy / "training.json").write_text("[1]")
    with pytest.raises(ValueError, match="training.json: holds a JSON list, expected an object"):
        stage(copy, "me/tiny", tmp_path / "staged")
    assert not (tmp_path / "staged").exists()


def test_cuda_graph_needs_cuda(ckpt):
    with pytest.raises(ValueError, match="cuda_graph needs a CUDA device"):
        LayaPolicy(str(ckpt[0]), cuda_graph=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU; none here")
def test_cuda_graph_gives_the_eager_probabilities(ckpt):
    rng = np.random.default_rng(0)
    frames, prev = (rng.integers(0, 256, (4, 210, 160, 3), dtype=np.uint8) for _ in range(2))
    out = []
    for graph in (False, True):
        policy = LayaPolicy(str(ckpt[0]), device="cuda", cuda_graph=graph)
        policy.reset("Breakout", ["NOOP", "FIRE", "RIGHT", "LEFT"])
        policy.probabilities(frames, prev)
        out.append(policy.probabilities(frames, prev))
    assert np.allclose(out[0], out[1], atol=1e-5)


def test_a_new_play_of_the_same_game_keeps_what_was_captured_for_its_question(ckpt):
    """laya-eval's play resets the policy before its first step, every time. The CUDA graphs replay
    one question's language model, so they go when the question changes, and stay when a play of
    the same game follows: clearing them made each play capture them again, inside its timing (no
    CUDA here: the graphs' store is checked, as the replay is by the CUDA test above)."""
    policy = LayaPolicy(str(ckpt[0]))
    actions = ["NOOP", "FIRE", "RIGHT", "LEFT"]
    policy.reset("Breakout", actions)
    policy._graphs[8] = "captured for Breakout"
    policy.reset("Breakout", actions)
    assert policy._graphs == {8: "captured for Breakout"}
    policy.reset("Breakout", actions[:3])
    assert policy._graphs == {}


def test_the_question_follows_the_batchs_platform(ckpt):
    from laya_eval.batch import Batch

    policy = LayaPolicy(str(ckpt[0]))
    frames = np.zeros((1, 240, 320, 3), np.uint8)
    batch = Batch(
        game="DoomBasic",
        actions=("MOVE_LEFT", "MOVE_RIGHT", "ATTACK"),
        frames=frames,
        prev_frames=frames,
        new_episode=np.array([True]),
        episodes=np.array([0]),
        platform="vizdoom",
    )
    probs = policy(batch)
    assert probs.shape == (1, 3) and "the Doom scenario DoomBasic" in policy._question["instructions"]
    assert policy._question["criteria"]["ATTACK"] == "shoot"


@pytest.mark.parametrize(
    "flags,field",
    [
        (["--max-decisions", "0"], "--max-decisions"),
        (["--max-decisions", "30000"], "--max-decisions"),  # past any episode: ALE's frame limit
        (["--seed", "-1"], "--seed"),  # 'expected non-negative integer', naming no flag
        (["--device", "bogus"], "--device"),
    ],
)
def test_play_flags_out_of_range_are_one_line(ckpt, tmp_path, flags, field):
    """An IndexError and a RuntimeError traceback (an outside hostile review)."""
    from laya_policy.cli import main

    from ..promises import check_promises

    out = tmp_path / "pong.gif"
    argv = ["play", "--model", ckpt[0], "--game", "Pong", "--video", out, *flags]
    code, err = check_promises(main, argv, sandbox=tmp_path, target=out)
    assert code == 2 and field in err and not out.exists(), err
    if field == "--device":  # torch's own list of 20 device types was cut mid-word (an outside review)
        assert err.strip().endswith("expected cpu or cuda[:N], the devices laya-policy runs on"), err


def test_play_asks_the_question_of_the_games_ale_name(ckpt, tmp_path, capsys):
    """'--game pong' played, asking the policy about a game called 'pong': not the Pong question it
    learned, which names Pong's goal (from an outside review)."""
    from laya_policy.cli import main

    assert (
        main(
            [
                "play",
                "--model",
                str(ckpt[0]),
                "--game",
                "pong",
                "--video",
                str(tmp_path / "p.gif"),
                "--max-decisions",
                "2",
            ]
        )
        == 0
    )
    assert "Pong: 2 decisions" in capsys.readouterr().out


def test_a_video_place_taken_is_one_line_before_play_and_no_folder_is_deleted(ckpt, tmp_path):
    """A folder at the video's name was found after the whole episode; one at its temporary name
    (someone's, holding a file) was deleted with its contents (from an outside review); a second
    play of the same video raced the first, which lost its episode."""
    from laya_policy.cli import main
    from laya_protocol.locks import FileLock

    from ..promises import check_promises

    def play(video):
        argv = ["play", "--model", ckpt[0], "--game", "Pong", "--video", video, "--max-decisions", "2"]
        return check_promises(main, argv, sandbox=tmp_path, target=video)

    (tmp_path / "taken.gif").mkdir()
    code, err = play(tmp_path / "taken.gif")
    assert code == 2 and "is a folder" in err, err
    keep = tmp_path / ".keep.tmp.gif"
    keep.mkdir()
    (keep / "important").write_text("x")
    code, err = play(tmp_path / "keep.gif")
    assert code == 2 and str(keep) in err and (keep / "important").read_text() == "x", err
    with FileLock.beside(tmp_path / "held.gif", "held.gif", lambda m, f: RuntimeError(m)):
        code, err = play(tmp_path / "held.gif")
    assert code == 2 and "another process" in err and not (tmp_path / "held.gif").exists(), err


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_a_video_stopped_mid_write_leaves_nothing(ckpt, tmp_path, suffix):
    """The video is written while the episode plays; a Ctrl-C then (here, from the policy at its
    fifth decision) left the half-written temporary beside the video's name."""
    from laya_policy.play import LayaPolicy
    from laya_policy.video import record_episode

    class Interrupted(LayaPolicy):
        calls = 0

        def __call__(self, batch):
            self.calls += 1
            if self.calls == 5:
                raise KeyboardInterrupt
            return super().__call__(batch)

    with pytest.raises(KeyboardInterrupt):
        record_episode(Interrupted(str(ckpt[0])), "Pong", tmp_path / f"v{suffix}", max_decisions=20)
    assert list(tmp_path.iterdir()) == []


def test_a_policy_answering_nan_is_one_line_and_leaves_no_video(ckpt, tmp_path, capsys):
    """The judge's checks pick the move (a diverged checkpoint answers NaN): its PolicyError was a
    traceback out of play (an outside review of this change)."""
    from laya_policy.play import LayaPolicy
    from laya_policy.video import record_episode

    class Diverged(LayaPolicy):
        def __call__(self, batch):
            return np.full((len(batch), len(batch.actions)), np.nan)

    with pytest.raises(ValueError, match="the policy returned non-finite probabilities"):
        record_episode(Diverged(str(ckpt[0])), "Pong", tmp_path / "v.gif", max_decisions=4)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_a_video_on_a_full_disk_is_one_line_naming_it_and_leaves_nothing(cnn_ckpt, tmp_path, suffix):
    """Past the file size limit (a full disk, as ulimit -f gives it) a GIF said 'File too large',
    naming no file, and left its temporary; an mp4 was reported written (exit 0) and did not play:
    ffmpeg had died unheard (from an outside review)."""
    import os
    import resource
    import subprocess
    import sys

    video = tmp_path / f"v{suffix}"
    argv = ["play", "--model", str(cnn_ckpt), "--game", "Pong", "--video", str(video), "--max-decisions", "60"]

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 10, 8 << 10))
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails with EFBIG, as on a full disk

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "laya_policy.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=small_files,
        timeout=300,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and str(video) in lines[0], done.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


# A training run writing its checkpoint at each evaluation, here every half second: two policies'
# checkpoints, in turn, into one folder.
REWRITE_FOREVER = """
import sys, time
from laya_policy.backbone import build_backbone
from laya_policy.checkpoint import AgentConfig, save_checkpoint
from laya_policy.model import ChoicePolicy

made = []
for seed, temperature in ((1, 1.0), (2, 0.5)):
    backbone, tokenizer = build_backbone("tiny", image_size=128, seed=seed)
    cfg = AgentConfig(image_size=128, frames=2, temperatures={"choice": temperature})
    made.append((ChoicePolicy(backbone, tokenizer), cfg))
save_checkpoint(*made[1], sys.argv[1])
print("written", flush=True)
while True:
    for policy, cfg in made:
        save_checkpoint(policy, cfg, sys.argv[1])
        time.sleep(0.5)
"""


def test_a_checkpoint_rewritten_while_it_loads_is_read_whole(tmp_path):
    """From an outside review: `play` and laya-eval read a checkpoint that train was replacing as one
    policy's config with the other's weights, and laya-eval recorded it under the new one's
    fingerprint, so push took those scores for the new checkpoint's."""
    import subprocess
    import sys
    import time

    from laya_policy.checkpoint import fingerprint

    seen = {}
    for seed, temperature in ((1, 1.0), (2, 0.5)):
        backbone, tokenizer = build_backbone("tiny", image_size=128, seed=seed)
        path = tmp_path / f"seed{seed}"
        save_checkpoint(
            ChoicePolicy(backbone, tokenizer),
            AgentConfig(image_size=128, frames=2, temperatures={"choice": temperature}),
            path,
        )
        whole = LayaPolicy(str(path))
        seen[fingerprint(path)] = (temperature, {k: v.clone() for k, v in whole.model.state_dict().items()})
    folder = tmp_path / "run" / "final"
    folder.parent.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", REWRITE_FOREVER, str(folder)], stdout=subprocess.PIPE, text=True)
    loaded = set()
    try:
        assert writer.stdout.readline().strip() == "written"
        loads, start = 0, time.monotonic()
        while (loads < 40 or len(loaded) < 2) and time.monotonic() - start < 30:  # a load takes ~30 ms
            loads += 1
            policy = LayaPolicy(str(folder))
            said = policy.identity["fingerprint"]
            assert said in seen, "a fingerprint of neither checkpoint"
            temperature, weights = seen[said]
            assert policy.temperature == temperature, "one checkpoint's config, the other's fingerprint"
            state = policy.model.state_dict()
            assert all(torch.equal(state[k], v) for k, v in weights.items()), "weights of another than the fingerprint"
            loaded.add(said)
    finally:
        writer.kill()
        writer.wait()
    assert loaded == set(seen), "the checkpoint was not replaced while it was loaded"


def test_a_checkpoint_left_between_the_two_renames_of_its_save_is_named(ckpt, tmp_path):
    """A run killed between save_checkpoint's renames leaves only the old folder, set aside."""
    import shutil

    shutil.copytree(ckpt[0], tmp_path / ".final.old")
    with pytest.raises(FileNotFoundError, match=r"final: is missing, and .*\.final\.old holds the checkpoint"):
        LayaPolicy(str(tmp_path / "final"))
