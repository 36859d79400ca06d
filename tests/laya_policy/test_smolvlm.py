"""The pretrained path on a SmolVLM-256M-Instruct copy in the Hub's exact layout and dtype (bf16
safetensors, its config, tokenizer, chat template and processor configs; see smolvlm_layout.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from laya_policy.backbone import build_backbone
from laya_policy.checkpoint import load_checkpoint
from laya_policy.cli import main
from laya_policy.inputs import draw
from laya_policy.settings import TrainConfig
from laya_policy.train import build, logits_of, optimise, resolve, train

from .smolvlm_layout import checkpoint_logits, write_smolvlm


@pytest.fixture(scope="module")
def smolvlm(tmp_path_factory):
    return write_smolvlm(tmp_path_factory.mktemp("hub") / "SmolVLM-256M-Instruct")


@pytest.fixture(scope="module")
def data(small_pong):
    """Pong with 4 val records: at SmolVLM's widths and 512 px a record costs about 1.3 s of a CPU
    core, and a run scores every val record for its calibration."""
    return small_pong("smol-data", train=8, val=4, cap=10)


def config(data, out, smolvlm, **kw):
    base = dict(
        data=str(data),
        out=str(out),
        model=str(smolvlm),
        batch=2,
        steps=2,
        evals=1,
        eval_records=4,
        lr_head=1e-3,
        lr_backbone=1e-3,
    )
    base.update(kw)
    return TrainConfig(**base)


def test_a_bf16_hub_copy_loads_as_float32_master_weights(smolvlm):
    model, tok = build_backbone(str(smolvlm))
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert tok.chat_template and "<end_of_utterance>" in tok.chat_template


def test_the_image_size_comes_from_the_backbone_and_a_wrong_one_is_one_line(data, smolvlm, tmp_path, capsys):
    run = build(resolve(config(data, tmp_path / "a", smolvlm)))
    assert run.cfg.image_size == 512 and run.model.image_tokens == 64
    capsys.readouterr()
    code = main(
        [
            "train",
            "--data",
            str(data),
            "--out",
            str(tmp_path / "b"),
            "--model",
            str(smolvlm),
            "--image-size",
            "128",
            "--steps",
            "1",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--image-size 128" in err and "512" in err, err
    assert not (tmp_path / "b").exists(), "refused before any work"


def test_the_prompt_is_the_backbones_chat_template(smolvlm):
    from atari_data.schema.questions import atari_question
    from laya_policy.model import ChoicePolicy

    model, tok = build_backbone(str(smolvlm))
    policy = ChoicePolicy(model, tok)
    q = atari_question("Pong", ["NOOP", "FIRE"])["action"]
    text = tok.decode(policy.encode([q], 2).input_ids[0])
    image = "<fake_token_around_image><global-img>" + "<image>" * 64 + "<fake_token_around_image>"
    assert text.startswith("<|im_start|>User:" + image * 2 + q["instructions"] + "<end_of_utterance>\nAssistant:\n- ")


def test_frozen_vision_trains_the_connector_and_every_parameter_the_optimiser_holds(data, smolvlm, tmp_path):
    run = build(resolve(config(data, tmp_path / "run", smolvlm, freeze="vision")))
    vision = {n: p.detach().clone() for n, p in run.model.backbone.vision_model.named_parameters()}
    connector = {n: p.detach().clone() for n, p in run.model.backbone.connector.named_parameters()}
    held = {id(p) for g in run.opt.param_groups for p in g["params"]}
    assert {id(p) for p in run.model.backbone.connector.parameters()} <= held
    assert not {id(p) for p in run.model.backbone.vision_model.parameters()} & held
    run.model.train()
    examples = draw(run.train, run.cfg.batch, run.cfg.seed, step=0)
    from laya_policy.train import targets_of, training_loss

    logits = logits_of(run, examples, run.screens(examples), order_seed=None)
    training_loss(logits, targets_of(examples, logits.shape[1]), 0.5).backward()
    names = {id(p): n for n, p in run.model.named_parameters()}
    no_grad = [
        names[i]
        for g in run.opt.param_groups
        for i in map(id, g["params"])
        if dict(run.model.named_parameters())[names[i]].grad is None
    ]
    assert not no_grad, f"in the optimiser but never given a gradient: {no_grad[:5]}"
    run.opt.zero_grad()
    for step in range(2):
        batch = draw(run.train, run.cfg.batch, run.cfg.seed, step)
        optimise(run, batch, run.screens(batch), step)
    assert all(torch.equal(p, vision[n]) for n, p in run.model.backbone.vision_model.named_parameters())
    assert any(not torch.equal(p, connector[n]) for n, p in run.model.backbone.connector.named_parameters())


def test_train_save_reload_in_a_fresh_process_play_and_judge(data, smolvlm, tmp_path):
    out = tmp_path / "run"
    summary = train(config(data, out, smolvlm, freeze="vision"), progress=False)
    assert summary["steps"] == 2
    ckpt = out / "final"
    model, cfg = load_checkpoint(ckpt)
    assert cfg.image_size == 512 and {p.dtype for p in model.parameters()} == {torch.float32}
    # The checkpoint's backbone/ is a SmolVLM folder the ecosystem loads as it is.
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(ckpt / "backbone")
    assert processor.image_seq_len == 64 and processor.tokenizer.chat_template

    here = checkpoint_logits(ckpt)
    code = (
        "import json, sys; from tests.laya_policy.smolvlm_layout import checkpoint_logits as f; "
        "print(json.dumps(f(sys.argv[1])))"
    )
    fresh = subprocess.Popen(  # on the other core while the judge plays below
        [sys.executable, "-c", code, str(ckpt)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )

    results = tmp_path / "r.json"
    from laya_eval.cli import main as judge

    assert (
        judge(
            [
                "run",
                "--policy",
                f"laya:{ckpt}",
                "--games",
                "Pong",
                "--episodes",
                "1",
                "--cap",
                "6",
                "--random-episodes",
                "0",
                "--out",
                str(results),
            ]
        )
        == 0
    )
    assert json.loads(results.read_text())["games"]["Pong"]["error"] is None
    assert (
        main(
            ["play", "--model", str(ckpt), "--game", "Pong", "--video", str(tmp_path / "p.gif"), "--max-decisions", "4"]
        )
        == 0
    )
    assert (tmp_path / "p.gif").read_bytes()[:3] == b"GIF"
    out, err = fresh.communicate(timeout=300)
    assert fresh.returncode == 0, err[-800:]
    assert json.loads(out.splitlines()[-1]) == here, "a fresh process gives identical logits"
    # Shared, a checkpoint trained from a local copy names no path of this machine: its config and
    # training.json named the copy's folder, and the card declared nothing or the path.
    from laya_policy.push import stage

    staged = stage(ckpt, "me/smol", tmp_path / "staged", str(results))
    for p in staged.rglob("*"):
        if p.suffix in (".json", ".md", ".jinja", ".txt"):
            text = p.read_text()
            assert str(smolvlm) not in text and str(data) not in text, p
    shared = json.loads((staged / "vlm_agent_config.json").read_text())["backbone"]
    assert shared == f"local:{smolvlm.name}" and "base_model" not in (staged / "README.md").read_text()


REVISION_CLIENT = """
import json, sys
from laya_policy.settings import TrainConfig
from laya_policy.train import agent_config, build, resolve
s = build(resolve(TrainConfig(data=sys.argv[1], out=sys.argv[2], model=sys.argv[3], batch=2, steps=1)))
cfg = agent_config(s)
embed = s.model.backbone.text_model.embed_tokens.weight
print(json.dumps({"backbone": cfg.backbone, "revision": cfg.revision, "embed": embed.double().sum().item()}))
"""


@pytest.mark.slow
def test_a_backbone_named_with_its_revision_is_that_revision(data, smolvlm, tmp_path):
    """`--model ORG/NAME@REV` passed train's check and then asked the Hub for a repo called
    'NAME@REV' (a validation error). The backbone is the branch's (main holds no model here, so
    main's would not load), and the checkpoint says which revision it was built on, its base model
    staying ORG/NAME, the Hub's form of an id."""
    from safetensors.torch import load_file

    from ..hub_server import HubServer

    wanted = load_file(smolvlm / "model.safetensors")["model.text_model.embed_tokens.weight"].double().sum().item()
    with HubServer(tmp_path / "hub") as hub:
        env = hub.client_env(tmp_path / "hf")
        upload = (
            "import sys; from huggingface_hub import HfApi; api = HfApi(); api.create_repo('acme/smol'); "
            "api.create_branch('acme/smol', branch='v1'); "
            "api.upload_folder(folder_path=sys.argv[1], repo_id='acme/smol', revision='v1')"
        )

        def run(*argv: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [sys.executable, *argv],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                cwd=Path(__file__).resolve().parents[2],
            )

        done = run("-c", upload, str(smolvlm))
        assert done.returncode == 0, done.stderr[-2000:]
        done = run("-c", REVISION_CLIENT, str(data), str(tmp_path / "run"), "acme/smol@v1")
        # fetched from a fresh cache over a network that drops every file mid-way: it was "not a
        # loadable backbone" (its weights' download), or told to download where the Hub is reachable
        hub.cut_downloads, env["HF_HOME"] = 10**6, str(tmp_path / "hf-cut")
        cut = run(
            "-m",
            "laya_policy.cli",
            "train",
            "--data",
            str(data),
            "--model",
            "acme/smol@v1",
            "--out",
            str(tmp_path / "cut"),
        )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert (got["backbone"], got["revision"]) == ("acme/smol", "v1"), got
    assert got["embed"] == pytest.approx(wanted, rel=1e-9), "the branch's weights"
    said = cut.stderr.strip().splitlines()[-1]
    assert cut.returncode == 2 and "cut off" in said and "run the same command again" in said, cut.stderr[-2000:]
    assert "reachable" not in said and "loadable" not in said, said
