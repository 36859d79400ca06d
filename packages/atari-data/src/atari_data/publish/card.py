"""The dataset card of a packed repository: YAML that `datasets` reads, tables people read; written
here from ``card_template.md`` and read back (``read_card``) by doctor and publish."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from string import Template

import yaml

from atari_data import limits, parquet
from atari_data.errors import AtariDataError
from atari_data.layout import leaves_folder, read_json
from atari_data.publish import repo
from atari_data.schema import GAME_RE, RECORD, SCHEMA_VERSION, hf_features, markdown_table
from atari_data.schema import frame_want as schema_frame_want
from laya_protocol.files import write_file
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


#: Recursive data_files patterns a card may have: each is a walk of the folder (pack writes none).
MAX_WALKS = 64
#: The keys of a card's config: anything else (data_dir, ...) changes what datasets reads.
CONFIG_KEYS = frozenset({"config_name", "data_files", "default"})


#: The most a card's YAML header may hold: a pack writes about 0.9 KB a config (a source's and each
#: game's), so 50 KB a source of 57 games.
CARD_HEADER_MAX = 1 << 20


def read_card(folder: Path) -> dict:
    path = folder / repo.CARD
    try:
        text = limits.read_bytes(path).decode("utf-8", "replace")
    except OSError:
        raise AtariDataError(
            "is missing (not a packed dataset repository?)", file=str(path), field="README.md"
        ) from None
    for name in repo.BESIDE_CARD:
        if (folder / name).exists() or (folder / name).is_symlink():
            raise AtariDataError(
                "is read by datasets beside the card, and would replace the configs or features checked "
                "here (a packed repository has none): remove it",
                file=str(folder / name),
                field="(file)",
            )
    m = re.match(r"---\n(.*?)\n---\n", text, re.S)
    if not m:
        raise AtariDataError("has no YAML header", file=str(path), field="README.md")
    if len(m[1]) > CARD_HEADER_MAX:
        raise AtariDataError(
            f"YAML header is {len(m[1]):,} bytes; a card's is at most {CARD_HEADER_MAX >> 20} MB (YAML is "
            "parsed at a few hundred KB a second)",
            file=str(path),
            field="README.md",
        )
    try:
        if any(isinstance(t, yaml.AliasToken) for t in yaml.scan(m[1])):  # a pack writes none
            raise AtariDataError(
                "YAML header has aliases (*name): each is read again for every use (100 configs of 100 "
                "aliased data_files kept doctor busy for minutes)",
                file=str(path),
                field="README.md",
            )
        card = yaml.safe_load(m[1])
    except (yaml.YAMLError, ValueError, RecursionError) as e:  # ValueError: an integer past 4,300 digits
        if isinstance(e, AtariDataError):
            raise
        raise AtariDataError(f"YAML header does not parse ({e})", file=str(path), field="README.md") from None
    if not isinstance(card, dict) or not (card.get("configs") or card.get("replay") or card.get("lmdb_pack")):
        raise AtariDataError("YAML header has no configs", file=str(path), field="configs")
    configs = card.get("configs") or []
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise AtariDataError("is not a list of {config_name, data_files} mappings", file=str(path), field="configs")
    walks = 0  # recursive patterns, over every config
    for c in configs:
        name = c.get("config_name")
        files = c.get("data_files", [])
        other = sorted(map(str, c.keys() - CONFIG_KEYS))
        if other:  # e.g. data_dir: datasets would read other files than the patterns name
            raise AtariDataError(
                f"has {', '.join(other)}: a config here is {', '.join(sorted(CONFIG_KEYS))} only",
                file=str(path),
                field=f"configs.{name!r}",
            )
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
        walks += sum("**" in f["path"].split("/") for f in files)
        if walks > MAX_WALKS:  # each is a walk of the whole folder
            raise AtariDataError(
                f"{walks} recursive patterns ('**'), each a walk of the folder; a card may have {MAX_WALKS}",
                file=str(path),
                field=f"configs.{name}",
            )
        for f in files:
            if f["path"].split("/").count("**") > 1:  # each more multiplies a glob's walk of the folder
                raise AtariDataError(
                    f"{f['path']!r} recurses more than once ('**' is one walk of the folder; two are its square)",
                    file=str(path),
                    field=f"configs.{name}.{f['split']}",
                )
            if not f["path"].strip() or any(part in ("", ".") for part in f["path"].split("/")):
                raise AtariDataError(  # "." was an IndexError traceback inside pathlib's glob
                    f"{f['path']!r} is not a glob of files (an empty or '.' part)",
                    file=str(path),
                    field=f"configs.{name}.{f['split']}",
                )
            if (
                leaves_folder(f["path"]) or any(x in f["path"] for x in ("\\", "://", "::")) or f["path"].endswith("/")
            ):  # a URL, a chained path or a folder: datasets would read what a glob here does not name
                raise AtariDataError(
                    f"{f['path']!r} leaves the repository (data_files are relative globs of files inside it)",
                    file=str(path),
                    field=f"configs.{name}.{f['split']}",
                )
    for key in ("replay", "lmdb_pack", "dataset_info"):
        if key in card and not isinstance(card[key], dict if key != "dataset_info" else list):
            raise AtariDataError(f"is a {type(card[key]).__name__}", file=str(path), field=key)
    for n, info in enumerate(card.get("dataset_info") or []):
        splits = info.get("splits") if isinstance(info, dict) else None
        if (
            not isinstance(splits, list)
            or not isinstance(info.get("config_name"), str)
            or not all(isinstance(x, dict) and isinstance(x.get("name"), str) for x in splits)
        ):
            raise AtariDataError(
                "is not a {config_name, features, splits} mapping with splits as a list of {name, ...} mappings",
                file=str(path),
                field=f"dataset_info[{n}]",
            )
        if "features" in info and not _record_features(info["features"], yaml=True):  # datasets reads rows by them
            raise AtariDataError(
                "are not a record row's (datasets decodes and casts each column as they say: grey frames, "
                "a label as text, a path opened as an image); write them as pack does",
                file=str(path),
                field=f"dataset_info[{n}].features",
            )
    return card


def _record_features(said, yaml: bool = False, columns=None) -> bool:
    """Whether features as a card's YAML (``yaml``) or datasets' JSON writes them are a record row's,
    of one or two frames (of ``columns`` only, where given), whichever datasets version wrote them
    (``sequence:`` or ``list:``); anything datasets cannot read as features is not."""
    from datasets import Features

    try:
        got = Features._from_yaml_list(said) if yaml else Features.from_dict(said)
    except Exception:  # noqa: BLE001 - datasets raises many kinds for what it cannot read, RecursionError too
        return False
    for frames in (1, 2):
        wanted = hf_features(frames)
        if got == Features({k: v for k, v in wanted.items() if columns is None or k in columns}):
            return True
    return False


def data_files(folder: Path, card: dict, split: str | None = None) -> dict[str, list[Path]]:
    """Per config of a card (as :func:`read_card` returned it), the files its data_files globs match
    (of ``split`` only, when given). A file named with a glob's characters is refused: ``datasets``,
    handed its name, would glob it again and read files that were never checked."""
    return {
        c["config_name"]: sorted(
            {
                _plain(folder, p)
                for df in c.get("data_files", [])
                if split in (None, df["split"])
                for p in folder.glob(df["path"])
            }
        )
        for c in card.get("configs") or []
    }


_GLOB_CHARS = re.compile(r"[*?\[\]{}\\]")


def _plain(folder: Path, path: Path) -> Path:
    rel = str(path.relative_to(folder))
    if _GLOB_CHARS.search(rel):
        raise AtariDataError(
            f"names {rel!r}, a file whose name holds a glob's characters (*?[]{{}}\\), which a reader "
            "would match again as a pattern",
            file=str(folder),
            field="data_files",
        )
    return path


_checked: dict[tuple, int] = {}  # (path, size, mtime) -> rows, of the Parquet files that passed, in this process


def config_files(folder: Path, card: dict, configs: list[str] | None = None) -> dict[str, dict[str, list[Path]]]:
    """Per config of ``configs`` (all by default), the files its patterns match per split it names;
    a config the card does not have is an error naming those it has."""
    known = {c["config_name"]: c for c in card.get("configs") or []}
    for name in configs or ():
        if name not in known:
            raise AtariDataError(
                f"{name!r} is not a config of this repository (it has {', '.join(sorted(known)) or 'none'})",
                file=str(folder),
                field="config",
            )
    return {
        name: {
            split: data_files(folder, {"configs": [conf]}, split)[name]
            for split in sorted({df["split"] for df in conf.get("data_files", [])})
        }
        for name, conf in known.items()
        if configs is None or name in configs
    }


def split_files(files: dict[str, list[Path]], config: str, split: str, folder: Path) -> list[Path]:
    """One split's files of a config's (as :func:`config_files` gives them); a split it does not name
    is an error naming those it does."""
    if split not in files:
        raise AtariDataError(f"config {config!r} has no split {split!r} ({', '.join(files)})", file=str(folder))
    return files[split]


def check_files(
    folder: Path, configs: list[str] | None = None, card: dict | None = None
) -> dict[str, dict[str, list[Path]]]:
    """What reading a packed repository folder through ``datasets`` needs first, and the files to
    hand it: per config of ``configs`` (all by default), its files per split, each named by its
    card's patterns (:func:`config_files`), decoded within the limits (:mod:`atari_data.parquet`;
    datasets would expand a dictionary bomb whole), and holding the rows the card's dataset_info
    says (a shard missing, deleted or not in a partial copy of a Hub dataset, would read as a
    smaller split). Read them with ``load_dataset("parquet", data_files=...)``, not by the folder:
    then no other file is read than these. A file is decoded once a process while it is unchanged:
    train reads a folder for each split and for calibration. ``card``: the folder's, when the
    caller has read it already (:func:`read_card`)."""
    card = read_card(folder) if card is None else card
    declared = {info["config_name"]: info["splits"] for info in card.get("dataset_info") or []}
    out = config_files(folder, card, configs)
    for name, splits in out.items():
        for split, files in splits.items():
            if not files:
                raise AtariDataError(
                    f"its {split!r} patterns match no file", file=str(folder), field=f"config {name!r}"
                )
            got = sum(_rows(path) for path in files)
            want = next((x.get("num_examples") for x in declared.get(name, []) if x.get("name") == split), None)
            if type(want) is int and got != want:  # a count the card does not give cannot be compared
                raise AtariDataError(
                    f"its {split!r} files hold {got:,} rows where the card says {want:,} "
                    "(a shard missing, or not fetched: offline?)",
                    file=str(folder),
                    field=f"config {name!r}",
                )
    return out


def frame_want(folder: Path, source: str, game, seen: dict) -> tuple[str, tuple[int, int]]:
    """(mode, (width, height)) that a packed folder's ``meta/<source>/<Game>.json`` says ``game``'s
    frames are, for :func:`atari_data.layout.png.decode_frame`; ``seen`` caches it per game. A game
    without a usable one is an AtariDataError: its rows' frames could be any size."""
    key = (source, game)
    if key not in seen:
        if not (isinstance(game, str) and GAME_RE.match(game) and (folder / repo.meta_file(source, game)).is_file()):
            raise AtariDataError(
                f"{game!r} has no {repo.meta_file(source, '<Game>')}, whose frame_format its frames must match",
                file=str(folder),
                field="game",
            )
        path = folder / repo.meta_file(source, game)
        seen[key] = schema_frame_want(read_json(path), str(path))
    return seen[key]


def _rows(path: Path) -> int:
    st = path.stat()
    stamp = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if stamp not in _checked:
        _checked[stamp] = checked_rows(path)
    return _checked[stamp]


def checked_rows(path: Path) -> int:
    """The rows of a packed Parquet file, once it decodes within the limits (:func:`atari_data.parquet.check`)
    and its columns hold a record row's values (one or two frames; any order, the width or encoding
    another tool writes them in), and any features its ``huggingface`` schema metadata declares are
    a record row's. A reader that takes columns as they are (``load_dataset("parquet")``
    without features, :mod:`~atari_data.publish.parquet_rows`) would otherwise give a label stored as
    text as text."""
    import pyarrow.parquet as pq

    rows = parquet.check(path)
    found = pq.ParquetFile(path).schema_arrow
    required = {f.name for f in RECORD.fields if f.required}
    wanted = hf_features(2 if "prev_image" in found.names else 1).arrow_schema
    for name in wanted.names:
        if name not in found.names and name in required:
            raise AtariDataError(f"has no column {name!r}", file=str(path), field=name)
    for f in found:
        if f.name not in wanted.names:
            raise AtariDataError("is not a column of a record row", file=str(path), field=f.name)
        want = wanted.field(f.name).type
        if not _fits(f.type, want, f.name in required):
            raise AtariDataError(
                f"column {f.name!r} is {f.type}, where a record row's is {want}", file=str(path), field=f.name
            )
    _check_datasets_metadata(path, found)
    return rows


def _check_datasets_metadata(path: Path, schema) -> None:
    """The features a file's ``huggingface`` schema metadata declares, which datasets reads it by when no
    card says otherwise, are a record row's (of the columns it holds), where it has any."""
    said = (schema.metadata or {}).get(b"huggingface")
    if said is None:
        return
    field = "schema metadata 'huggingface'"
    try:
        features = json.loads(said)["info"]["features"]
    except (ValueError, RecursionError, TypeError, KeyError):
        raise AtariDataError("is not the JSON of datasets' features", file=str(path), field=field) from None
    if not _record_features(features, columns=schema.names):
        raise AtariDataError(
            "its features are not a record row's (datasets decodes and casts each column as they say: a "
            "path opened as an image); write the file as pack does, or without this metadata",
            file=str(path),
            field=field,
        )


def _fits(found, wanted, required: bool = False) -> bool:
    """Whether a column of arrow type ``found`` holds values of type ``wanted``: the same kind of value
    (any integer width, string or large string, a dictionary of them, lists and structs of such), or
    nulls only, where the field may be left out (pyarrow writes a column of None as ``null``)."""
    import pyarrow as pa

    t = pa.types
    if t.is_null(found):
        return not required
    if t.is_dictionary(found):
        found = found.value_type
    kinds = (t.is_integer, t.is_floating, t.is_boolean, t.is_string, t.is_large_string, t.is_binary, t.is_large_binary)
    same = {t.is_string: t.is_large_string, t.is_binary: t.is_large_binary}
    for kind in kinds:
        if kind(wanted):
            return kind(found) or (kind in same and same[kind](found))
    if t.is_struct(wanted):
        names = {f.name: f for f in found} if t.is_struct(found) else None
        return (
            names is not None
            and set(names) == {f.name for f in wanted}
            and all(_fits(names[f.name].type, f.type) for f in wanted)
        )
    if t.is_list(wanted):
        lists = t.is_list(found) or t.is_large_list(found) or t.is_fixed_size_list(found)
        return lists and _fits(found.value_type, wanted.value_type)
    return found.equals(wanted)


def default_config(card: dict) -> str:
    """The config ``load_dataset(folder)`` reads when none is named: the one marked default, or the only one."""
    configs = card.get("configs") or []
    marked = [c["config_name"] for c in configs if c.get("default") is True]
    if len(marked) == 1 or len(configs) == 1:
        return marked[0] if marked else configs[0]["config_name"]
    raise AtariDataError("name a config: the card marks no single default", field="config")


#: Hub license ids, by the spelling a source's meta.json may use; anything else is ``other``.
HUB_LICENSES = {x.lower(): x for x in ("mit", "apache-2.0", "cc-by-4.0", "cc-by-sa-4.0", "cc-by-nc-4.0", "cc0-1.0")}
#: What the card's examples say before the repository has an id (``pack --repo`` gives it one).
NO_REPO = "ORG/NAME"


def card_for(folder: Path, repo_id: str) -> bytes:
    """The card of ``folder`` with its examples loading ``repo_id``: what is published there."""
    try:
        text = limits.read_bytes(folder / repo.CARD).decode("utf-8")
    except UnicodeDecodeError as e:
        raise AtariDataError(
            f"is not UTF-8 text ({e.reason})", file=str(folder / repo.CARD), field="README.md"
        ) from None
    m = re.search(r'load_dataset\("([^"]+)"', text)
    return (text.replace(f'"{m[1]}"', f'"{repo_id}"') if m else text).encode("utf-8")


def hub_licenses(metas: dict[str, dict[str, dict]]) -> dict:
    """The card's license fields: Hub ids, a list when sources differ; a license no id names makes
    it ``other``, with a name and a link to the card's license section, as the Hub asks."""
    texts = sorted({m["license"] for ms in metas.values() for m in ms.values()})
    ids = sorted({HUB_LICENSES.get(t.lower(), "other") for t in texts})
    out: dict = {"license": ids[0] if len(ids) == 1 else ids}
    if "other" in ids:
        out["license_name"] = "atari-sources"
        out["license_link"] = "README.md#licenses"  # a file of the repository, as the Hub allows
    return out


def _license_lines(metas: dict[str, dict[str, dict]]) -> list[str]:
    """The card's license section: each source's licenses as its meta.json states them."""
    return [
        f"- `{source}`: {lic}" for source, ms in metas.items() for lic in sorted({m["license"] for m in ms.values()})
    ]


def size_category(n: int) -> str:
    """The Hub's size category of ``n`` rows."""
    names = ["n<1K", "1K<n<10K", "10K<n<100K", "100K<n<1M", "1M<n<10M", "10M<n<100M", "100M<n<1B"]
    names += ["1B<n<10B", "10B<n<100B", "100B<n<1T"]
    for i, name in enumerate(names):
        if n < 10 ** (3 + i):
            return name
    return "n>1T"


def _config(name: str, source: str, game: str, splits: dict, frames: int, default: bool) -> tuple[dict, dict]:
    """A config's ``configs`` entry and ``dataset_info`` entry (``game`` ``*``: every game of the source)."""
    import datasets

    entry: dict = {
        "config_name": name,
        "data_files": [
            {"split": split, "path": repo.parquet_pattern(source, split, game)}
            for split, s in splits.items()
            if s["records"]
        ],
    }
    if default:
        entry["default"] = True
    info = {
        "config_name": name,
        **datasets.DatasetInfo(features=hf_features(frames))._to_yaml_dict(),
        "splits": [
            {"name": split, "num_bytes": s["bytes"], "num_examples": s["records"]} for split, s in splits.items()
        ],
    }
    return entry, info


def card_yaml(summary: dict, metas: dict[str, dict[str, dict]]) -> str:
    """The card's YAML header, through huggingface_hub's ``DatasetCardData``: a config per source
    (every game) and one per game of it, over the same files, each with its features and splits."""
    from huggingface_hub import DatasetCardData

    configs, infos = [], []
    for i, (source, conf) in enumerate(summary["configs"].items()):
        games = [(source, "*", conf["splits"])] + [
            (repo.game_config(source, g), g, s) for g, s in sorted(conf["games"].items())
        ]
        for name, game, splits in games:
            entry, info = _config(name, source, game, splits, conf["frames"], default=i == 0 and game == "*")
            configs.append(entry)
            infos.append(info)
    rows = sum(s["records"] for conf in summary["configs"].values() for s in conf["splits"].values())
    card = DatasetCardData(
        **hub_licenses(metas),
        language=["en"],
        pretty_name="Atari game decisions",
        size_categories=[size_category(rows)],
        task_categories=["reinforcement-learning", "visual-question-answering"],
        tags=["atari", "ale", "imitation-learning", "vision-language"],
        configs=configs,
        dataset_info=infos,
        schema_version=SCHEMA_VERSION,
    )
    return card.to_yaml().rstrip()


def write_card(path: Path, name: str, summary: dict, metas: dict[str, dict[str, dict]], repo_id: str | None) -> None:
    """Fill ``card_template.md`` (beside this module) with the repository's configs, games and baselines;
    its examples load ``repo_id``."""
    first = next(iter(summary["configs"]))
    first_games = sorted(summary["configs"][first]["games"])
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
            emulator = m.get("emulator") or {}
            games.append(
                f"| `{repo.game_config(source, game)}` | {m['train']['records']} | {m['train']['episodes']} | "
                f"{m['val']['records']} | {dist} | {emulator.get('ale_py', '—')} | "
                f"{'`' + emulator['rom_md5'] + '`' if emulator.get('rom_md5') else '—'} |"
            )
    template = Template((Path(__file__).parent / "card_template.md").read_text())
    write_file(
        path,
        template.substitute(
            header=card_yaml(summary, metas),
            name=name,
            repo=repo_id or NO_REPO,
            first=first,
            first_game=repo.game_config(first, first_games[0]),
            games_sizes=json.dumps({g: summary["configs"][first]["games"][g]["train"]["records"] for g in first_games}),
            game_config=repo.game_config(first, "{g}"),  # filled in by the example's own f-string
            game_tars=repo.tar_pattern(first, "train", "{g}"),
            tar_folder=repo.tar_pattern(first, "*"),
            configs="\n".join(configs),
            schema_version=SCHEMA_VERSION,
            schema_table=markdown_table(RECORD),
            schema_files=" and ".join(f"`{repo.schema_file(k)}`" for k in repo.SCHEMA_KINDS),
            meta_file=repo.meta_file("<source>", "<Game>"),
            protocols=_protocol_table(metas),
            games="\n".join(games),
            baselines=_baselines_section(metas),
            licenses="\n".join(_license_lines(metas)),
            citations=CITATIONS,
        ),
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
    header = {
        **hub_licenses(metas),
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
    lines += ["", "## Licenses", "", *_license_lines(metas), "", "## Citation", "", CITATIONS, ""]
    write_file(path, "\n".join(lines))
