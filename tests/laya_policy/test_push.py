"""`laya-policy push` as a careless or hostile user, and a player on a second machine, meet it: the
real huggingface_hub against tests/hub_server.py, checkpoints trained here (a tiny VLM and the
reference CNN), results files written by laya-eval."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from atari_data.produce.generate import GenerateConfig, generate_game
from laya_eval.evaluate import RunConfig, evaluate
from laya_policy.cli import main
from laya_policy.push import stage
from laya_policy.settings import TrainConfig
from laya_policy.train import train

from ..promises import check_promises
from ..test_library_bars import bars_drawn


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """(the tiny VLM's final/, the CNN's final/, a results file of the VLM's play)."""
    root = tmp_path_factory.mktemp("push")
    data = root / "data"
    cfg = GenerateConfig(
        root=str(data), train_frames=40, val_frames=8, min_train_episodes=1, decision_cap=60, baseline_episodes=0
    )
    generate_game(cfg, "Pong")
    common = dict(data=str(data), image_size=64, batch=4, steps=2, evals=1, eval_records=8)
    train(TrainConfig(out=str(root / "vlm"), **common), progress=False)
    train(TrainConfig(out=str(root / "cnn"), model="cnn", **{**common, "image_size": 84}), progress=False)
    results = root / "vlm.json"
    evaluate(
        RunConfig(
            policy=f"laya:{root / 'vlm' / 'final'}",
            games=["Pong"],
            out=str(results),
            episodes=1,
            cap=5,
            random_episodes=0,
        ),
        progress=False,
    )
    return root / "vlm" / "final", root / "cnn" / "final", results


class Hub:
    """The test Hub, and `laya-policy push` run against it as a user would, in a process of its own."""

    def __init__(self, server, home):
        self.server, self.home = server, home

    def env(self, home: str = "pusher") -> dict:
        return self.server.client_env(self.home / home)

    def push(self, *args, home: str = "pusher") -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "laya_policy.cli", "push", *map(str, args)],
            env=self.env(home),
            capture_output=True,
            text=True,
            timeout=300,
        )

    def files(self, repo: str, branch: str = "main") -> list[str]:
        key = f"models/{repo}"
        return sorted(self.server.store.files(key, self.server.store.repos[key]["branches"][branch]))


@pytest.fixture
def hub(tmp_path):
    from ..hub_server import HubServer

    with HubServer(tmp_path / "hub") as server:
        yield Hub(server, tmp_path / "hf")


def _listing(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_a_second_push_leaves_the_hub_holding_only_the_new_checkpoint(ckpts, hub, tmp_path):
    """A CNN pushed over a VLM left backbone/ and head.safetensors beside it, and a VLM over a VLM the
    first one's chat template, which changed what a player's tokenizer built: the repo now holds
    exactly what was staged."""
    vlm, cnn, results = ckpts
    first = hub.push(vlm, "--repo", "me/policy", "--results", results)
    assert first.returncode == 0, first.stderr
    assert "backbone/config.json" in hub.files("me/policy")
    second = hub.push(cnn, "--repo", "me/policy")
    assert second.returncode == 0, second.stderr
    stage(cnn, "me/policy", tmp_path / "staged")
    assert hub.files("me/policy") == _listing(tmp_path / "staged"), "the CNN's files and its card, nothing of the VLM"


STRAYS = [
    ("notes.bin", b"\0" * 1024),
    (".git/config", b"[core]\n"),
    ("backbone/extra/config.json", b"{}"),
    (os.fsdecode(b"backbone/r\xffsum.txt"), b"x"),
    ("backbone/a\nb.json", b"{}"),
    ("backbone/id_ed25519", b"KEY\n"),  # named as transformers might name a file: it was staged
    ("backbone/secrets.env", b"HF_TOKEN=x\n"),
    ("backbone/extra.safetensors", b"x"),
]


@pytest.mark.parametrize(
    "name,data", STRAYS, ids=["top-level", "git", "subfolder", "non-utf8", "newline", "key", "env", "weights"]
)
def test_push_stages_the_checkpoint_only_and_names_anything_else(ckpts, tmp_path, name, data):
    """What huggingface_hub would skip (.git/, .cache/) was counted in the dry run and not uploaded; a
    70 MB stray was uploaded and then refused by every player; names that are not UTF-8 failed at
    upload, unnamed, after the repo was made. Each is now one line naming the file, nothing staged."""
    copy = tmp_path / "ckpt"
    shutil.copytree(ckpts[0], copy)
    stray = copy / name
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(data)
    code, err = check_promises(
        main, ["push", copy, "--repo", "me/x", "--dry-run", tmp_path / "staged"], sandbox=tmp_path, target=None
    )
    assert code == 2 and "is not part of a checkpoint" in err, err
    assert not (tmp_path / "staged").exists()


def test_a_hub_snapshots_card_and_gitattributes_are_not_strays(ckpts, tmp_path):
    copy = tmp_path / "ckpt"
    shutil.copytree(ckpts[0], copy)
    (copy / "README.md").write_text("an old card")
    (copy / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    staged = stage(copy, "me/x", tmp_path / "staged")
    assert "an old card" not in (staged / "README.md").read_text() and not (staged / ".gitattributes").exists()


def test_push_refuses_a_checkpoint_its_players_would_refuse(ckpts, tmp_path):
    copy = tmp_path / "ckpt"
    shutil.copytree(ckpts[0], copy)
    head = copy / "head.safetensors"
    head.write_bytes(head.read_bytes()[:1000])
    code, err = check_promises(
        main, ["push", copy, "--repo", "me/x", "--dry-run", tmp_path / "staged"], sandbox=tmp_path, target=None
    )
    assert code == 2 and "head.safetensors" in err, err
    assert not (tmp_path / "staged").exists()


def test_a_dry_run_into_the_checkpoint_or_over_a_file_in_it_is_refused(ckpts, tmp_path):
    copy = tmp_path / "ckpt"
    shutil.copytree(ckpts[0], copy)
    before = _listing(copy)
    for target in (copy / "staged", copy / "backbone" / "staged"):
        code, err = check_promises(
            main, ["push", copy, "--repo", "me/x", "--dry-run", target], sandbox=tmp_path, target=None
        )
        assert code == 2 and "inside the checkpoint" in err, err
    assert _listing(copy) == before


def test_a_dry_run_stopped_by_an_error_leaves_no_half_folder(ckpts, tmp_path):
    """A folder named README.md in the checkpoint failed the dry run after nine files were copied, and
    the rerun was refused because the half folder existed."""
    copy = tmp_path / "ckpt"
    shutil.copytree(ckpts[0], copy)
    (copy / "README.md").mkdir()
    code, err = check_promises(
        main, ["push", copy, "--repo", "me/x", "--dry-run", tmp_path / "staged"], sandbox=tmp_path, target=None
    )
    assert code == 2 and "README.md" in err and str(copy) in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"], "no staging folder, not even a hidden one"


def test_results_of_another_checkpoint_are_refused_whatever_their_spec_says(ckpts, tmp_path):
    """The card's table was taken from any results file whose spec named this path or repo: a CNN
    pushed with its VLM predecessor's results, or a checkpoint retrained in place, showed another
    model's scores. The results now must name this checkpoint's fingerprint."""
    vlm, cnn, results = ckpts
    code, err = check_promises(
        main,
        ["push", cnn, "--repo", "me/x", "--results", results, "--dry-run", tmp_path / "s1"],
        sandbox=tmp_path,
        target=None,
    )
    assert code == 2 and "another checkpoint" in err, err
    retrained = tmp_path / "final"  # the VLM's results, and its path, over other weights
    shutil.copytree(cnn, retrained)
    doc = json.loads(results.read_text())
    doc["policy"]["spec"] = f"laya:{retrained}"
    doc["settings"]["policy"] = f"laya:{retrained}"
    (tmp_path / "r.json").write_text(json.dumps(doc))
    code, err = check_promises(
        main,
        ["push", retrained, "--repo", "me/x", "--results", tmp_path / "r.json", "--dry-run", tmp_path / "s2"],
        sandbox=tmp_path,
        target=None,
    )
    assert code == 2 and "another checkpoint" in err, err
    ok = stage(vlm, "me/x", tmp_path / "s3", str(results))
    assert "| Pong |" in (ok / "README.md").read_text()


def test_no_local_path_is_published(ckpts, tmp_path):
    """training.json held the data's and the backbone's paths on the trainer's machine, and the card
    named a local backbone copy's path: none of it means anything to others, and it leaks."""
    vlm, cnn, _ = ckpts
    for ckpt in (vlm, cnn):
        staged = stage(ckpt, "me/x", tmp_path / ckpt.parent.name)
        local = str(ckpt.parents[1])
        for p in staged.rglob("*"):
            if p.is_file() and p.suffix in (".json", ".md", ".jinja"):
                assert local not in p.read_text(), p


def test_push_to_a_branch_makes_it_and_the_card_names_it(ckpts, hub, tmp_path):
    vlm, cnn, _ = ckpts
    assert hub.push(vlm, "--repo", "me/policy").returncode == 0
    done = hub.push(cnn, "--repo", "me/policy", "--revision", "dev")
    assert done.returncode == 0, done.stderr
    assert not bars_drawn(done.stderr), "the Hub client's upload bars, into a log"
    assert "backbone/config.json" in hub.files("me/policy"), "main keeps the VLM"
    assert "cnn.safetensors" in hub.files("me/policy", "dev")
    key = "models/me/policy"
    card = hub.server.store.files(key, hub.server.store.repos[key]["branches"]["dev"])["README.md"][0]
    assert "--policy laya:me/policy@dev" in hub.server.store.blob(card).read_text()
    for bad in ("", "../x", "a b", "HEAD"):
        done = hub.push(cnn, "--repo", "me/policy", "--revision", bad)
        assert done.returncode == 2 and "--revision" in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_push_keeps_the_owners_visibility_and_never_pushes_private_work_to_a_public_repo(ckpts, hub):
    """Without --private the create request said "public", over an organisation's private default;
    with it, an existing public repo took the upload without a word. The CNN's checkpoint: visibility is
    the repo's, whatever it holds, and its push process starts without transformers."""
    _, cnn, _ = ckpts
    assert hub.push(cnn, "--repo", "me/open").returncode == 0
    asked = [body for path, body in hub.server.created if path.endswith("/repos/create")]
    assert asked and all("private" not in b and "visibility" not in b for b in asked), asked
    done = hub.push(cnn, "--repo", "me/open", "--private")
    assert done.returncode == 2 and "is public" in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_a_checkpoint_on_the_hub_can_be_pushed_again_by_its_id(ckpts, hub, tmp_path):
    """`push ORG/NAME` was offered by the help and always refused: a Hub cache snapshot is links."""
    vlm, _, _ = ckpts
    assert hub.push(vlm, "--repo", "me/policy").returncode == 0
    done = hub.push("me/policy", "--repo", "me/copy", home="other")
    assert done.returncode == 0, done.stderr
    assert hub.files("me/copy") == hub.files("me/policy")
    # judged by its id from a fresh cache, off a terminal: the Hub client's "Fetching 8 files" bar was
    # drawn into the log (an outside review), as laya-eval's command sets no bar of its own
    from ..test_library_bars import bars_drawn

    argv = ["run", "--policy", "laya:me/policy", "--games", "Pong", "--episodes", "1", "--cap", "5"]
    argv += ["--random-episodes", "0", "--out", str(tmp_path / "judged.json")]
    cmd = [sys.executable, "-m", "laya_eval.cli", *argv]
    judged = subprocess.run(cmd, env=hub.env("judge"), capture_output=True, text=True, timeout=300)
    assert judged.returncode == 0 and not bars_drawn(judged.stderr), judged.stderr[-2000:]
    # its cached head cut short: refused on every rerun, online too, and no message said it was the
    # cache's copy, nor how to fetch it again (an outside review)
    repo = tmp_path / "hf" / "judge" / "hub" / "models--me--policy"
    head = next(repo.glob("snapshots/*/head.safetensors")).resolve()
    head.write_bytes(head.read_bytes()[:100])
    (tmp_path / "judged.json").unlink()
    again = subprocess.run(cmd, env=hub.env("judge"), capture_output=True, text=True, timeout=300)
    said = again.stderr.strip().splitlines()
    assert again.returncode == 2 and len(said) == 1, again.stderr[-2000:]
    assert f"me/policy: does not load, and it is the Hub cache's copy: remove {repo} to fetch it again" in said[0], said
    # a revision or a repository the Hub does not hold was told to be downloaded where the Hub is reachable
    for spec, told in (
        ("me/policy@nope", "the Hub has no revision 'nope' of me/policy"),
        ("me/nothing", "no repository"),
    ):
        play = [sys.executable, "-m", "laya_policy.cli", "play", "--model", spec, "--game", "Pong"]
        done = subprocess.run(
            [*play, "--video", str(tmp_path / "v.gif")], env=hub.env("judge"), capture_output=True, text=True
        )
        assert done.returncode == 2 and told in done.stderr and "reachable" not in done.stderr, done.stderr[-2000:]
    # a download cut off mid-file, every time the client resumes, was told to be made "where the Hub
    # is reachable": the Hub was reached, and running again fetches the rest
    hub.server.cut_downloads = 10**6
    play = [sys.executable, "-m", "laya_policy.cli", "play", "--model", "me/policy", "--game", "Pong"]
    done = subprocess.run(
        [*play, "--video", str(tmp_path / "v.gif")], env=hub.env("cut"), capture_output=True, text=True
    )
    said = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and "cut off" in said and "run the same command again" in said, done.stderr[-2000:]
    assert "reachable" not in said, said


def test_train_given_a_checkpoint_as_its_backbone_says_to_continue_from_it(ckpts, tmp_path):
    vlm, _, _ = ckpts
    argv = ["train", "--data", tmp_path, "--model", vlm, "--out", tmp_path / "run", "--steps", "1"]
    code, err = check_promises(main, argv, sandbox=tmp_path, target=tmp_path / "run")
    assert code == 2 and "continue from it with --init-from" in err, err


def test_the_cards_command_plays_the_games_it_was_trained_on(ckpts, tmp_path):
    """It said --games Pong whatever the checkpoint was trained on."""
    from laya_policy.push import model_card

    copy = tmp_path / "ckpt"
    shutil.copytree(ckpts[0], copy)
    training = json.loads((copy / "training.json").read_text())
    (copy / "training.json").write_text(json.dumps({**training, "groups": ["Breakout/expert2f", "Freeway/dagger1"]}))
    assert "--games Breakout,Freeway --episodes" in model_card(copy, "me/x")


def test_a_continued_run_does_not_take_a_missing_path_for_a_hub_id(ckpts, tmp_path):
    """After --init-from on a second machine the backbone's name (a path on the first) did not exist,
    so training.json said model_on_hub and the card declared the path as its base_model."""
    from laya_policy.push import model_card

    vlm, _, _ = ckpts
    parent = tmp_path / "parent"
    shutil.copytree(vlm, parent)
    config = json.loads((parent / "vlm_agent_config.json").read_text())
    config["backbone"] = "alice-private/SmolVLM-256M-Instruct"  # a folder on another machine: not here
    (parent / "vlm_agent_config.json").write_text(json.dumps(config))
    training = json.loads((parent / "training.json").read_text())
    (parent / "training.json").write_text(json.dumps({**training, "model": config["backbone"], "model_on_hub": False}))
    data = vlm.parents[1] / "data"
    train(
        TrainConfig(
            data=str(data),
            out=str(tmp_path / "child"),
            init_from=str(parent),
            steps=1,
            evals=1,
            batch=4,
            eval_records=8,
        ),
        progress=False,
    )
    child = tmp_path / "child" / "final"
    assert json.loads((child / "training.json").read_text())["model_on_hub"] is False
    card = model_card(child, "me/x")
    assert "base_model" not in card and "alice-private" not in card, card[:600]


@pytest.mark.parametrize("repo", ["me/a..b", "me/modèle", "me/x.git", "me/x--y", "me/" + "a" * 97, "name", "me/x@v2"])
def test_a_repo_id_the_hub_would_refuse_is_refused_before_anything_is_made(ckpts, hub, repo):
    """These passed the dry run, then failed at upload unnamed, after an empty repo was made."""
    done = hub.push(ckpts[0], "--repo", repo)
    assert done.returncode == 2 and "expected a Hub model id" in done.stderr, done.stderr
    assert not hub.server.created, "no repo made"


@pytest.mark.parametrize(
    "flags,said",
    [
        (("me/a..b", None, "mit"), "expected a Hub model id"),
        (("me/x", "a b", "mit"), "--revision 'a b': expected a branch name"),
        (("me/x", None, "MIT License"), "--license 'MIT License': expected a Hub license id"),
    ],
)
def test_stage_from_python_refuses_what_the_hub_would(ckpts, tmp_path, flags, said):
    """The command line checks these flags before torch loads; a caller of stage() or push() from
    Python is refused the same way, before anything is written."""
    repo, revision, license = flags
    with pytest.raises(ValueError, match=said):
        stage(ckpts[1], repo, tmp_path / "staged", license=license, revision=revision)
    assert not any(tmp_path.iterdir())


def test_a_results_file_from_before_fingerprints_resumes_and_another_checkpoints_is_refused_before_play(
    ckpts, tmp_path
):
    """Resuming a results file whose identity held no fingerprint yet was refused after a game was
    played, with --restart (which drops its games) as the way out; another checkpoint's file was
    also refused only after playing."""
    from laya_eval.cli import main as judge

    vlm, _, results = ckpts
    doc = json.loads(results.read_text())
    del doc["policy"]["identity"]["fingerprint"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    argv = ["run", "--policy", f"laya:{vlm}", "--games", "Pong,Breakout", "--episodes", "1", "--cap", "5"]
    argv += ["--random-episodes", "0"]
    assert judge([*argv, "--out", str(old)]) == 0
    after = json.loads(old.read_text())
    assert sorted(after["games"]) == ["Breakout", "Pong"] and len(after["policy"]["identity"]["fingerprint"]) == 64
    doc["policy"]["identity"]["fingerprint"] = "0" * 64
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    code, err = check_promises(judge, [*argv, "--out", other], sandbox=tmp_path, target=other)
    assert code == 2 and "policy.identity" in err, err
    assert sorted(json.loads(other.read_text())["games"]) == ["Pong"], "refused before Breakout was played"


def test_a_checkpoint_fetched_with_hf_download_local_dir_plays_and_pushes(ckpts, tmp_path):
    """`hf download ORG/NAME --local-dir DIR`, the offline way the errors name, writes its own
    .cache/huggingface/ into DIR: playing DIR was refused as a stray. A stray file stops a push, not
    a player, whose fingerprint is of the checkpoint's parts."""
    from laya_policy.checkpoint import fingerprint
    from laya_policy.play import LayaPolicy

    vlm = ckpts[0]
    copy = tmp_path / "dir"
    shutil.copytree(vlm, copy)
    (copy / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (copy / ".cache" / "huggingface" / "download" / "head.safetensors.metadata").write_text("abc\n")
    assert LayaPolicy(str(copy)).identity["fingerprint"] == fingerprint(vlm)
    staged = stage(copy, "me/x", tmp_path / "staged")
    assert not (staged / ".cache").exists()
    (copy / "notes.txt").write_text("mine")
    assert LayaPolicy(str(copy)).identity["fingerprint"] == fingerprint(vlm), "a player ignores a stray"
    with pytest.raises(ValueError, match="notes.txt: is not part of a checkpoint"):
        stage(copy, "me/x", tmp_path / "staged2")


def test_results_played_through_the_other_preprocessing_are_not_this_checkpoints(ckpts):
    """Forced onto the processor path, the same weights saw other screens; the card showed those
    scores beside "preprocessing: gpu" (an outside review)."""
    from laya_policy.checkpoint import fingerprint, load_config
    from laya_policy.push import _results_problem

    ckpt = ckpts[0]
    own = load_config(ckpt).preprocess
    other = "processor" if own == "gpu" else "gpu"
    played = {"policy": {"identity": {"fingerprint": fingerprint(ckpt), "preprocess": own}}}
    assert _results_problem(played, ckpt, own) is None
    played["policy"]["identity"]["preprocess"] = other
    assert "policy.identity.preprocess" in (_results_problem(played, ckpt, own) or "")
