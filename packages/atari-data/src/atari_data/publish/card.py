"""The dataset card of a packed repository: YAML that `datasets` reads, tables people read; written
here from ``card_template.md`` and read back (``read_card``) by doctor and publish."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from string import Template

import yaml

from atari_data import limits
from atari_data.errors import AtariDataError
from atari_data.publish import repo
from atari_data.schema import RECORD, SCHEMA_VERSION, hf_features, markdown_table
from laya_protocol.names import score_key, scores_key
from laya_protocol.protocol import BASELINE_CAP

CITATIONS = """```bibtex
@article{bellemare13arcade,
  title   = {The Arcade Learning Environment: An Evaluation Platform for General Agents},
  author  = {Bellemare, Marc G. and Naddaf, Yavar and Veness, Joel and Bowling, Michael},
  journal = {Journal of Artificial Intelligence Research},
  volume  = {47}, pages = {253--279}, year = {2013}
}
@article{machado18revisiting,
  title   = {Revisiting the Arcade Learning Environment: Evaluation Protocols and Open Problems for General Agents},
  author  = {Machado, Marlos C. and Bellemare, Marc G. and Talvitie, Erik and Veness, Joel and
             Hausknecht, Matthew and Bowling, Michael},
  journal = {Journal of Artificial Intelligence Research},
  volume  = {61}, pages = {523--562}, year = {2018}
}
```"""


def read_card(folder: Path) -> dict:
    path = folder / repo.CARD
    try:
        text = limits.read_bytes(path).decode("utf-8", "replace")
    except OSError:
        raise AtariDataError(
            "is missing (not a packed dataset repository?)", file=str(path), field="README.md"
        ) from None
    m = re.match(r"---\n(.*?)\n---\n", text, re.S)
    if not m:
        raise AtariDataError("has no YAML header", file=str(path), field="README.md")
    try:
        card = yaml.safe_load(m[1])
    except (yaml.YAMLError, ValueError, RecursionError) as e:  # ValueError: an integer past 4,300 digits
        raise AtariDataError(f"YAML header does not parse ({e})", file=str(path), field="README.md") from None
    if not isinstance(card, dict) or not (card.get("configs") or card.get("replay") or card.get("lmdb_pack")):
        raise AtariDataError("YAML header has no configs", file=str(path), field="configs")
    configs = card.get("configs") or []
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise AtariDataError("is not a list of {config_name, data_files} mappings", file=str(path), field="configs")
    for c in configs:
        name = c.get("config_name")
        files = c.get("data_files", [])
        if (
            not isinstance(name, str)
            or not isinstance(files, list)
            or not all(
                isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("split"), str)
                for f in files
            )
        ):
            raise AtariDataError(
                "needs a config_name and data_files as a list of {split, path}", file=str(path), field=f"configs.{name}"
            )
        for f in files:
            if f["path"].startswith("/") or ".." in Path(f["path"]).parts or "\\" in f["path"]:
                raise AtariDataError(
                    f"{f['path']!r} leaves the repository (data_files are relative globs inside it)",
                    file=str(path),
                    field=f"configs.{name}.{f['split']}",
                )
    for key in ("replay", "lmdb_pack", "dataset_info"):
        if key in card and not isinstance(card[key], dict if key != "dataset_info" else list):
            raise AtariDataError(f"is a {type(card[key]).__name__}", file=str(path), field=key)
    return card


def card_yaml(summary: dict, metas: dict[str, dict[str, dict]]) -> dict:
    """The card's YAML header: configs with their data files, and each config's features and splits."""
    import datasets

    licenses = sorted({m["license"] for ms in metas.values() for m in ms.values()})
    configs, infos = [], []
    for i, (source, conf) in enumerate(summary["configs"].items()):
        entry = {
            "config_name": source,
            "data_files": [
                {"split": split, "path": repo.parquet_pattern(source, split)}
                for split, s in conf["splits"].items()
                if s["records"]
            ],
        }
        if i == 0:
            entry["default"] = True
        configs.append(entry)
        info = datasets.DatasetInfo(features=hf_features(conf["frames"]))._to_yaml_dict()
        info = {
            "config_name": source,
            **info,
            "splits": [
                {"name": split, "num_bytes": s["bytes"], "num_examples": s["records"]}
                for split, s in conf["splits"].items()
            ],
        }
        infos.append(info)
    return {
        "license": licenses[0].lower() if len(licenses) == 1 else "other",
        "pretty_name": "Atari game decisions",
        "task_categories": ["reinforcement-learning", "image-classification"],
        "tags": ["atari", "ale", "imitation-learning", "vision-language"],
        "configs": configs,
        "dataset_info": infos,
        "schema_version": SCHEMA_VERSION,
    }


def write_card(path: Path, name: str, summary: dict, metas: dict[str, dict[str, dict]]) -> None:
    """Fill ``card_template.md`` (beside this module) with the repository's configs, games and baselines."""
    first = next(iter(summary["configs"]))
    configs = []
    for source, conf in summary["configs"].items():
        ms = metas[source]
        formats = ", ".join(sorted({m["frame_format"] for m in ms.values()}))
        lic = ", ".join(sorted({m["license"] for m in ms.values()}))
        origin = "; ".join(sorted({m["origin"] for m in ms.values()}))
        configs.append(
            f"| `{source}` | {', '.join(sorted(ms))} | {conf['splits']['train']['records']} | "
            f"{conf['splits']['validation']['records']} | {conf['frames']} | {formats} | {lic} | {origin} |"
        )
    games = []
    for source, ms in metas.items():
        for game, m in sorted(ms.items()):
            labels = Counter(m["train"]["labels"])
            total = sum(labels.values()) or 1
            dist = ", ".join(f"{a} {c / total:.0%}" for a, c in labels.most_common())
            games.append(
                f"| `{source}` | {game} | {m['train']['records']} | {m['train']['episodes']} | "
                f"{m['val']['records']} | {dist} |"
            )
    template = Template((Path(__file__).parent / "card_template.md").read_text())
    path.write_text(
        template.substitute(
            header=yaml.safe_dump(card_yaml(summary, metas), sort_keys=False, allow_unicode=True).rstrip(),
            name=name,
            first=first,
            shards=repo.tar_urls(first, "train", 1),
            configs="\n".join(configs),
            schema_version=SCHEMA_VERSION,
            schema_table=markdown_table(RECORD),
            schema_files=" and ".join(f"`{repo.schema_file(k)}`" for k in repo.SCHEMA_KINDS),
            meta_file=repo.meta_file("<config>", "<Game>"),
            protocols=_protocol_table(metas),
            games="\n".join(games),
            baselines=_baselines_section(metas),
            citations=CITATIONS,
        )
    )


def _protocol_table(metas: dict[str, dict[str, dict]]) -> str:
    protocols = {
        (s, m["protocol"]["env_id"].split("/")[0]): m["protocol"]
        for s, ms in metas.items()
        for m in ms.values()
        if m.get("protocol")
    }
    if not protocols:
        return "No source records an emulator protocol."
    keys = list(next(iter(protocols.values())))
    lines = ["| config | " + " | ".join(k for k in keys if k != "env_id") + " |", "|" + " --- |" * len(keys)]
    seen = set()
    for (source, _), p in sorted(protocols.items()):
        row = tuple(str(p[k]) for k in keys if k != "env_id")
        if (source, row) not in seen:
            seen.add((source, row))
            lines.append(f"| `{source}` | " + " | ".join(row) + " |")
    return "\n".join(lines)


def _baselines_section(metas: dict[str, dict[str, dict]]) -> str:
    rows = []
    for source, ms in metas.items():
        for game, m in sorted(ms.items()):
            b = m.get("baselines")
            if b:
                capped = (
                    f"{b[score_key('expert', BASELINE_CAP)]:g} / {b[score_key('random', BASELINE_CAP)]:g}"
                    if score_key("expert", BASELINE_CAP) in b
                    else "—"
                )
                rows.append(
                    f"| `{source}` | {game} | {b.get('expert', '')} | {b[score_key('expert')]:g} / "
                    f"{b[score_key('random')]:g} | {capped} | {len(b[scores_key('expert')])} |"
                )
    if not rows:
        return ""
    return "\n".join(
        [
            "",
            "## Baselines",
            "",
            f"Greedy expert / uniform random, mean episode score; also after the "
            f"first {BASELINE_CAP} decisions, which evaluation uses.",
            "",
            f"| config | game | expert | uncapped | first {BASELINE_CAP} decisions | episodes each |",
            "| --- | --- | --- | ---: | ---: | ---: |",
            *rows,
            "",
        ]
    )


def write_replay_card(path: Path, name: str, summary: dict, metas: dict[str, dict[str, dict]]) -> None:
    """The card of a replay-packed repository: no frames, so no `datasets` configs."""
    licenses = sorted({m["license"] for ms in metas.values() for m in ms.values()})
    header = {
        "license": licenses[0].lower() if len(licenses) == 1 else "other",
        "pretty_name": f"{name} (replay)",
        "tags": ["atari", "ale", "replay"],
        "schema_version": SCHEMA_VERSION,
        "replay": {source: sorted(conf["replay"]) for source, conf in summary["configs"].items()},
    }
    lines = [
        "---",
        yaml.safe_dump(header, sort_keys=False).rstrip(),
        "---",
        "",
        f"# {name} (replay-packed)",
        "",
        "The decisions of played Atari sources without their screens: every episode's ALE seed and moves "
        "(auto-FIREs included) and an MD5 of every frame's pixels. Rebuild the frames locally, checked one "
        "by one:",
        "",
        "```bash",
        "atari-data rebuild . --root data/atari",
        "atari-data validate data/atari --images",
        "```",
        "",
        "| source | game | records | protocol |",
        "| --- | --- | ---: | --- |",
    ]
    for source, conf in summary["configs"].items():
        for game, n in sorted(conf["replay"].items()):
            p = metas[source][game].get("protocol") or {}
            lines.append(
                f"| `{source}` | {game} | {n} | {p.get('env_id', '')}, sticky "
                f"{p.get('repeat_action_probability', '')}, frameskip {p.get('frameskip', '')} |"
            )
    lines += ["", "## Citation", "", CITATIONS, ""]
    path.write_text("\n".join(lines))
