"""Sharing a checkpoint on the Hub: its own files (no stray, no local path) and a generated model card.

    laya-policy push runs/tiny/final --repo ORG/NAME --results runs/tiny/eval.json

The card says what the checkpoint is and how to use it: the base model, the datasets and settings
it was trained with (from its ``training.json``), the evaluation table from a laya-eval results
file when one is given, and the license. Others then play it with ``laya-eval run --policy
laya:ORG/NAME``. The token comes from the usual places and is never printed.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

from atari_data.publish.repo import HUB_REF_RE
from atari_data.schema import GAME_RE, SOURCE_RE
from laya_policy.checkpoint import (
    BACKBONE,
    CNN_WEIGHTS,
    CONFIG,
    HEAD,
    TRAINING,
    checkpoint_files,
    checkpoint_folder,
    fingerprint,
    load_checkpoint,
    load_config,
    on_hub,
    read_json_file,
)
from laya_policy.presets import CNN, MOTION_GAIN, PRESETS, takes_motion
from laya_policy.settings import FREEZES, check_push
from laya_policy.train import group_game
from laya_protocol.errors import cause


def _cnn_form(cfg) -> str:
    """How the CNN's input channels are made from the screens, for the card."""
    if takes_motion(cfg.cnn_inputs, cfg.frames):
        return f"the newest screen and its motion, {MOTION_GAIN:g}x the newest minus the previous"
    return "each screen as its own channel"


def _names(v, ok) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) and ok(x) for x in v)


def _group(name: str) -> bool:
    """A balancing group as train names one: a game, or a game and its source (``Pong/expert2f``)."""
    game, slash, source = name.partition("/")
    return bool(GAME_RE.fullmatch(game) and (not slash or SOURCE_RE.fullmatch(source)))


def _count(v) -> bool:
    return type(v) is int


#: What the card reads from training.json, as train writes it: a hand-edited file is refused by field.
#: Each is checked for what it may hold, not only its type: the card writes it into Markdown and into
#: the command it tells readers to run (a group named "Pong $(curl ...|sh)" was shown as typed).
CARD_FIELDS = {
    "data": ("a path or Hub id", lambda v: v is None or isinstance(v, str)),
    "sources": ("a list of source names", lambda v: v is None or _names(v, SOURCE_RE.fullmatch)),
    "groups": ("a list of group names (Game or Game/source)", lambda v: _names(v, _group)),
    "data_on_hub": ("true or false", lambda v: type(v) is bool),
    "model_on_hub": ("true or false", lambda v: type(v) is bool),
    "steps_done": ("a step count", _count),
    "batch": ("a batch size", _count),
    "seed": ("a seed", _count),
    "minutes": ("a number of minutes", lambda v: type(v) in (int, float) and 0 <= v < math.inf),
    # auto: the option as given, which train wrote before it wrote what the option resolved to
    "freeze": ("none, vision or auto", lambda v: v in FREEZES),
}


def read_training(ckpt: Path) -> dict:
    """A checkpoint's training.json ({} when it has none), each field the card uses checked, and the
    whole standard JSON (it is uploaded as it stands, where NaN is no number)."""
    file = ckpt / TRAINING
    if not file.exists():
        return {}
    training = read_json_file(file)
    if not isinstance(training, dict):
        raise ValueError(f"{file}: holds a JSON {type(training).__name__}, expected an object")
    for key, (what, ok) in CARD_FIELDS.items():
        if key in training and not ok(training[key]):
            raise ValueError(f"{file}: {key}: {json.dumps(training[key])[:40]} is not {what}")
    if training.get("data_on_hub") and not HUB_REF_RE.match(str(training.get("data"))):
        raise ValueError(f"{file}: data: {json.dumps(training.get('data'))[:40]} is not a Hub id ORG/NAME[@REVISION]")
    if bad := next((k for k, v in training.items() if not _standard(v)), None):
        raise ValueError(f"{file}: {bad}: holds NaN or Infinity, which is not standard JSON")
    return training


def _standard(value) -> bool:
    try:
        json.dumps(value, allow_nan=False)
        return True
    except ValueError:
        return False


def model_card(
    ckpt: Path, repo: str, results: dict | None = None, license: str = "apache-2.0", revision: str | None = None
) -> str:
    cfg = load_config(ckpt)
    training = read_training(ckpt)
    spec = repo if revision in (None, "main") else f"{repo}@{revision}"  # what a player names to get this one
    games = sorted({group_game(g) for g in training.get("groups") or []}) or ["Pong"]
    header = {
        "library_name": "laya-policy",
        "license": license,
        "pipeline_tag": "reinforcement-learning",
        "tags": ["atari", "vision-language-model" if cfg.backbone != CNN else "cnn", "game-playing", "laya"],
    }
    base = public_model(cfg.backbone, training)
    named = f"`{base or cfg.backbone}`" if base or cfg.backbone in PRESETS else "a local copy"
    if base:
        header["base_model"] = base  # a Hub id; a local copy's path means nothing to others
    data = training.get("data")
    if data and training.get("data_on_hub"):
        header["datasets"] = [data]
    yaml_lines = [f"{k}: {json.dumps(v)}" for k, v in header.items()]  # JSON values are YAML
    lines = [
        "---",
        *yaml_lines,
        "---",
        "",
        f"# {repo}",
        "",
        f"A Laya policy: an Idefics3 backbone ({named}) that reads {cfg.frames} game screen"
        f"{'s' if cfg.frames > 1 else ''} at {cfg.image_size}x{cfg.image_size} and a multiple-choice question "
        "whose options are the game's buttons, and a small head that scores each option."
        if cfg.backbone != CNN
        else f"laya-policy's reference CNN (Nature-DQN-sized; not a vision-language model): it reads {cfg.frames} "
        f"game screen{'s' if cfg.frames > 1 else ''} at {cfg.image_size}x{cfg.image_size} in luminance "
        f"({_cnn_form(cfg)}) and scores the 18 ALE buttons, of which each game's own are its options.",
        "",
        "```bash",
        f"laya-eval run --policy laya:{spec} --games {','.join(games)} --episodes 10 --out results.json",
        "```",
        "",
        "## Training",
        "",
    ]
    if training:
        sources = ", ".join(training.get("sources") or []) or "all"
        lines += [
            f"- data: {f'`{data}`' if training.get('data_on_hub') else 'a local dataset, not on the Hub'} "
            f"(sources {sources}; groups {', '.join(training.get('groups', []))})",
            f"- {training.get('steps_done')} steps of batch {training.get('batch')} "
            f"({training.get('minutes')} minutes), frozen: {training.get('freeze')}, seed {training.get('seed')}",
            f"- preprocessing: {cfg.preprocess}, temperature {cfg.temperatures.get('choice', 1.0):.3g}",
        ]
    else:
        lines.append("Not recorded (the checkpoint has no training.json).")
    lines += ["", "## Evaluation", ""]
    if results:
        s = results.get("settings", {})
        episodes = s.get("episodes")
        lines += [
            f"laya-eval, {episodes} episode{'' if episodes == 1 else 's'} per game, decision cap "
            f"{s.get('cap') or 'none'}, {'greedy' if s.get('greedy') else 'sampled'} actions; "
            f"{s.get('random_episodes') or 0} random episodes per game in the same run. Flags say where a "
            "score should not be compared as it stands.",
            "",
            "| game | mean score | normalised | beats random | flags |",
            "| --- | ---: | ---: | --- | --- |",
        ]
        for game, g in sorted(results.get("games", {}).items()):
            if g.get("error"):
                lines.append(f"| {game} | failed | | | |")
                continue
            norm = "—" if g.get("normalised") is None else f"{g['normalised']:.3f}"
            beat = {True: "yes", False: "no"}.get(g.get("beats_random"), "—")  # —: no random score to beat
            lines.append(f"| {game} | {g['mean']:.1f} | {norm} | {beat} | {'; '.join(g.get('flags') or [])} |")
    else:
        lines.append("Not given (pass `--results` with a laya-eval results file).")
    lines += [
        "",
        "## Files",
        "",
        f"`{CONFIG}` (preprocessing, frames, temperature), "
        + (
            f"`{BACKBONE}/` (loads with AutoModel, AutoTokenizer and AutoProcessor), `{HEAD}`"
            if cfg.backbone != CNN
            else f"`{CNN_WEIGHTS}` (the network's weights)"
        )
        + "; the formats are in laya's docs/formats.md.",
        "",
    ]
    return "\n".join(lines)


def public_model(backbone: str, training: dict) -> str | None:
    """The backbone's Hub id when it came from the Hub (a card's ``base_model``), else None."""
    return backbone if on_hub(backbone, training.get("model_on_hub")) else None


def _public_json(ckpt: Path, rel: str) -> bytes:
    """The config or training.json as shared: no path of the trainer's machine. A local backbone copy
    goes by ``local:`` and its folder's name (no preset's name, no Hub id: it still reads as a
    pretrained backbone), local data by none."""
    raw = read_json_file(ckpt / rel)
    key = "backbone" if rel == CONFIG else "model"
    name = raw.get(key)
    if isinstance(name, str) and name not in PRESETS and name != CNN and not public_model(name, read_training(ckpt)):
        raw[key] = f"local:{Path(name).name}"
    if rel == TRAINING and not raw.get("data_on_hub"):
        raw["data"] = None
    return (json.dumps(raw, indent=2) + "\n").encode()


def _results_problem(results: dict, ckpt: Path, own: str) -> str | None:
    """Why a laya-eval results file is not this checkpoint's play, or None: it must name the
    checkpoint's fingerprint (a path or a repo id is not enough: either may hold other weights now),
    and have seen the screens through the checkpoint's own preprocessing (forced onto the other path,
    it plays other inputs than the card says)."""
    identity = (results.get("policy") or {}).get("identity") or {}
    played = identity.get("fingerprint")
    if played is None:
        return "records no checkpoint fingerprint (laya-eval run of an older laya-policy, or another policy)"
    ours = fingerprint(ckpt)
    if played != ours:
        return f"was played by another checkpoint (fingerprint {str(played)[:12]}, this one's {ours[:12]})"
    if identity.get("preprocess", own) != own:  # own: the checkpoint's preprocessing
        return (
            f"policy.identity.preprocess: was played through {identity['preprocess']!r}, this checkpoint's is {own!r}"
        )
    return None


def stage(
    ckpt: str | Path,
    repo: str,
    out: Path,
    results_path: str | None = None,
    license: str = "apache-2.0",
    revision: str | None = None,
) -> Path:
    """The folder that would be uploaded, written to ``out``: the checkpoint's files (no stray: see
    ``checkpoint_files``; no local path: see ``_public_json``) and its card. Everything is checked before a
    byte is written, and the folder is assembled beside ``out`` and renamed into place."""
    from atari_data.layout import staged
    from laya_eval.evaluate import load_results
    from laya_protocol.files import writing

    check_push(repo, revision, license)
    ckpt = checkpoint_folder(ckpt)
    files = checkpoint_files(ckpt)
    _, cfg = load_checkpoint(ckpt)  # what every player checks: refused here, not after the upload
    results = load_results(results_path) if results_path else None
    if results is not None:
        problem = _results_problem(results, ckpt, cfg.preprocess)
        if problem:
            raise ValueError(f"{results_path}: {problem}; evaluate this one with `laya-eval run --policy laya:{ckpt}`")
    out = Path(out)
    if out.exists() or out.is_symlink():  # never someone's folder: a dry run writes a new one
        raise ValueError(f"{out}: exists; pass a new folder to stage into")
    if out.resolve().is_relative_to(ckpt.resolve()):
        raise ValueError(f"{out}: is inside the checkpoint {ckpt}; stage it somewhere else")
    card = model_card(ckpt, repo, results, license, revision)  # before anything is written
    tmp = out.with_name(f".{out.name}.staging")
    if tmp.exists() or tmp.is_symlink():  # a kill's leftover, or someone's: never removed unasked
        raise ValueError(f"{tmp}: exists (a stopped push's staging, or a folder of yours): move it, then push again")
    with staged(tmp):
        for p in files:
            rel = p.relative_to(ckpt).as_posix()
            target = tmp / rel
            with writing(target):
                target.parent.mkdir(parents=True, exist_ok=True)
                if rel in (CONFIG, TRAINING):
                    target.write_bytes(_public_json(ckpt, rel))
                else:  # streamed: a backbone's weights may be gigabytes
                    shutil.copyfile(p, target)
        with writing(tmp / "README.md"):
            (tmp / "README.md").write_text(card, encoding="utf-8")
        os.replace(tmp, out)
    return out


def push(
    ckpt: str | Path,
    repo: str,
    results_path: str | None = None,
    private: bool = False,
    revision: str | None = None,
    license: str = "apache-2.0",
) -> str:
    """Upload the staged folder to the model repo ``repo``; returns the commit URL. The repo (at
    ``revision``) then holds exactly that folder: what an earlier push left there and this one does
    not hold is deleted in the same commit (the Hub's .gitattributes stays)."""
    import tempfile

    from huggingface_hub import HfApi

    with tempfile.TemporaryDirectory() as tmp:
        folder = stage(ckpt, repo, Path(tmp) / "upload", results_path, license, revision)
        api = HfApi()
        try:
            # None keeps an organisation's default visibility; only --private asks for one
            api.create_repo(repo, private=True if private else None, exist_ok=True)
            if private and not api.model_info(repo).private:
                raise ValueError(f"--private: the Hub repo {repo} exists and is public; nothing was uploaded")
            if revision not in (None, "main"):
                api.create_branch(repo, branch=revision, exist_ok=True)
            info = api.upload_folder(
                repo_id=repo,
                folder_path=str(folder),
                revision=revision,
                commit_message="laya-policy push",
                delete_patterns="*",
            )
        except ValueError:
            raise
        except Exception as e:  # noqa: BLE001 - offline, network, auth: one line, never the token
            raise OSError(f"cannot push to the Hub repo {repo} ({cause(e)})") from None
    return str(getattr(info, "commit_url", info))
