"""Sharing a checkpoint on the Hub: the folder as it is plus a generated model card.

    laya-policy push runs/tiny/final --repo ORG/NAME --results runs/tiny/eval.json

The card says what the checkpoint is and how to use it: the base model, the datasets and settings
it was trained with (from its ``training.json``), the evaluation table from a laya-eval results
file when one is given, and the license. Others then play it with ``laya-eval run --policy
laya:ORG/NAME``. The token comes from the usual places and is never printed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from laya_policy.backbone import PRESETS
from laya_policy.checkpoint import CONFIG, TRAINING, load_config, resolve_checkpoint


def model_card(ckpt: Path, repo: str, results: dict | None = None, license: str = "apache-2.0") -> str:
    cfg = load_config(ckpt)
    training = json.loads((ckpt / TRAINING).read_text()) if (ckpt / TRAINING).is_file() else {}
    header = {"library_name": "laya-policy", "license": license, "pipeline_tag": "reinforcement-learning",
              "tags": ["atari", "vision-language-model", "game-playing", "laya"]}
    if cfg.backbone not in PRESETS:
        header["base_model"] = cfg.backbone
    data = training.get("data")
    if data and not Path(data).exists():  # a Hub dataset id, not a local folder
        header["datasets"] = [data]
    yaml_lines = [f"{k}: {json.dumps(v)}" for k, v in header.items()]  # JSON values are YAML
    lines = ["---", *yaml_lines, "---", "", f"# {repo}", "",
             f"A Laya policy: an Idefics3 backbone (`{cfg.backbone}`) that reads {cfg.frames} game screen"
             f"{'s' if cfg.frames > 1 else ''} at {cfg.image_size}x{cfg.image_size} and a multiple-choice question "
             "whose options are the game's buttons, and a small head that scores each option.", "",
             "```bash", f"laya-eval run --policy laya:{repo} --games Pong --episodes 10 --out results.json", "```", "",
             "## Training", ""]
    if training:
        sources = ", ".join(training.get("sources") or []) or "all"
        lines += [f"- data: `{data}` (sources {sources}; groups {', '.join(training.get('groups', []))})",
                  f"- {training.get('steps_done')} steps of batch {training.get('batch')} "
                  f"({training.get('minutes')} minutes), frozen: {training.get('freeze')}, seed {training.get('seed')}",
                  f"- preprocessing: {cfg.preprocess}, temperature {cfg.temperatures.get('choice', 1.0):.3g}"]
    else:
        lines.append("Not recorded (the checkpoint has no training.json).")
    lines += ["", "## Evaluation", ""]
    if results:
        s = results.get("settings", {})
        lines += [f"laya-eval, {s.get('episodes')} episodes per game, decision cap {s.get('cap') or 'none'}, "
                  f"{'greedy' if s.get('greedy') else 'sampled'} actions.", "",
                  "| game | mean score | normalised | beats random |", "| --- | ---: | ---: | --- |"]
        for game, g in sorted(results.get("games", {}).items()):
            if g.get("error"):
                lines.append(f"| {game} | failed | | |")
                continue
            norm = "—" if g.get("normalised") is None else f"{g['normalised']:.3f}"
            lines.append(f"| {game} | {g['mean']:.1f} | {norm} | {'yes' if g.get('beats_random') else 'no'} |")
    else:
        lines.append("Not given (pass `--results` with a laya-eval results file).")
    lines += ["", "## Files", "", f"`{CONFIG}` (preprocessing, frames, temperature), `backbone/` (loads with "
              "AutoModel, AutoTokenizer and AutoProcessor), `head.safetensors`; the formats are in laya's "
              "docs/formats.md.", ""]
    return "\n".join(lines)


def stage(ckpt: str | Path, repo: str, out: Path, results_path: str | None = None,
          license: str = "apache-2.0") -> Path:
    """The folder that would be uploaded: the checkpoint's files and README.md, written to ``out``."""
    from laya_eval.evaluate import load_results

    ckpt = resolve_checkpoint(ckpt)
    results = load_results(results_path) if results_path else None
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(ckpt, out, symlinks=False)
    (out / "README.md").write_text(model_card(ckpt, repo, results, license), encoding="utf-8")
    return out


def push(ckpt: str | Path, repo: str, results_path: str | None = None, private: bool = False,
         revision: str | None = None, license: str = "apache-2.0", staging: Path | None = None) -> str:
    """Upload the staged folder to the model repo ``repo``; returns the commit URL."""
    import tempfile

    from huggingface_hub import HfApi

    with tempfile.TemporaryDirectory() as tmp:
        folder = stage(ckpt, repo, staging or Path(tmp) / "upload", results_path, license)
        try:
            api = HfApi()
            api.create_repo(repo, private=private, exist_ok=True)
            info = api.upload_folder(repo_id=repo, folder_path=str(folder), revision=revision,
                                     commit_message="laya-policy push")
        except Exception as e:  # noqa: BLE001 - offline, network, auth: one line, never the token
            why = str(e).splitlines()[0][:200] if str(e) else ""
            raise OSError(f"cannot push to the Hub repo {repo} ({type(e).__name__}: {why})") from None
    return str(getattr(info, "commit_url", info))
