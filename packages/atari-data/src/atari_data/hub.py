"""Publishing a packed repository to the Hugging Face Hub, and checking one (`doctor`).

The token comes from the usual places (HF_TOKEN, `huggingface-cli login`) and is never printed
or logged: error messages from the Hub client are scrubbed of it before they are shown.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from atari_data import limits, repo
from atari_data.errors import AtariDataError
from atari_data.layout import parse_json_line, read_json
from atari_data.schema import GAME_RE, ID_RE, KNOWN_VERSIONS, RECORD, SOURCE_RE
from laya_protocol.names import HUB_SPLITS

SAFE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")  # a folder name that stays inside the repository
#: The members a record's sample may have (side images are not checked by name here).
MEMBER_EXTS = {repo.RECORD_EXT, *repo.FRAME_EXTS, *(f"{repo.PREV}.{e}" for e in repo.FRAME_EXTS)}


def read_card(folder: Path) -> dict:
    path = folder / repo.CARD
    try:
        text = limits.read_bytes(path).decode("utf-8", "replace")
    except OSError:
        raise AtariDataError("is missing (not a packed dataset repository?)", file=str(path), field="README.md") \
            from None
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
        if not isinstance(name, str) or not isinstance(files, list) or not all(
                isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("split"), str)
                for f in files):
            raise AtariDataError("needs a config_name and data_files as a list of {split, path}", file=str(path),
                                 field=f"configs.{name}")
        for f in files:
            if f["path"].startswith("/") or ".." in Path(f["path"]).parts or "\\" in f["path"]:
                raise AtariDataError(f"{f['path']!r} leaves the repository (data_files are relative globs inside it)",
                                     file=str(path), field=f"configs.{name}.{f['split']}")
    for key in ("replay", "lmdb_pack", "dataset_info"):
        if key in card and not isinstance(card[key], dict if key != "dataset_info" else list):
            raise AtariDataError(f"is a {type(card[key]).__name__}", file=str(path), field=key)
    return card


def _scrub(text: str) -> str:
    token = os.environ.get("HF_TOKEN") or _stored_token()
    return text.replace(token, "***") if token else text


def _stored_token() -> str | None:
    try:
        from huggingface_hub import get_token
        return get_token()
    except Exception:  # noqa: BLE001 - no token is fine here
        return None


def publish(folder: str | Path, repo: str, private: bool = False, revision: str | None = None,
            dry_run: bool = False) -> list[tuple[str, int]]:
    """Upload ``folder`` (resumable) to the dataset repo ``repo``; returns the files and sizes."""
    folder = Path(folder)
    read_card(folder)
    files = sorted((str(p.relative_to(folder)), p.stat().st_size) for p in folder.rglob("*") if p.is_file())
    if dry_run:
        return files
    from huggingface_hub import HfApi

    try:
        api = HfApi()
        api.create_repo(repo, repo_type="dataset", private=private, exist_ok=True)
        if revision:
            api.create_branch(repo, branch=revision, repo_type="dataset", exist_ok=True)
        api.upload_large_folder(repo_id=repo, folder_path=str(folder), repo_type="dataset", revision=revision,
                                private=private)
    except Exception as e:  # noqa: BLE001 - offline, network, auth: all reported on one line
        raise AtariDataError(f"cannot publish to the Hub ({type(e).__name__}: {_scrub(str(e)).splitlines()[0]})",
                             field="--repo") from None
    return files


# -- doctor ------------------------------------------------------------------------------------------

@dataclass
class Doctor:
    folder: Path
    defects: list[AtariDataError] = field(default_factory=list)
    counts: dict = field(default_factory=dict)

    def defect(self, file, fld: str, msg: str) -> None:
        self.defects.append(AtariDataError(msg, file=str(file), field=fld))

    def run(self) -> Doctor:
        try:
            card = read_card(self.folder)
        except AtariDataError as e:
            self.defects.append(e)
            return self
        if card.get("lmdb_pack"):  # re-sharded LMDB clips (atari-data pack-lmdb): not records
            self._lmdb(card["lmdb_pack"].get("games") or {})
            self._limits()
            return self
        version = card.get("schema_version")
        if version not in KNOWN_VERSIONS:
            self.defect(self.folder / repo.CARD, "schema_version", f"{version!r} is not a known schema version "
                                                                       f"({', '.join(map(str, KNOWN_VERSIONS))})")
        if card.get("replay"):
            self._replay(card["replay"])
        claimed = set()
        infos = {i.get("config_name"): i for i in card.get("dataset_info") or []}
        for conf in card.get("configs") or []:
            name = conf.get("config_name")
            for df in conf.get("data_files", []):
                matched = sorted(self.folder.glob(df["path"]))
                if not matched:
                    self.defect(self.folder / repo.CARD, f"configs.{name}.{df['split']}",
                                f"{df['path']} matches no file")
                claimed.update(matched)
            self._config(name, conf, infos.get(name, {}))
        for p in sorted((self.folder / repo.DATA).rglob("*")) if (self.folder / repo.DATA).exists() else []:
            if p.is_file() and p not in claimed:
                self.defect(p, "(file)", "belongs to no config in the card")
        self._limits()
        return self

    def _config(self, name: str, conf: dict, info: dict) -> None:
        from datasets import load_dataset

        metas = {}
        for f in sorted((self.folder / repo.meta_dir(name)).glob("*.json")):
            try:
                metas[f.stem] = read_json(f)
            except AtariDataError as e:
                self.defects.append(e)
        expected_by_split = {hub: sum(m.get(split, {}).get("records", 0) for m in metas.values())
                             for split, hub in HUB_SPLITS.items()}
        stated = {s.get("name"): s.get("num_examples") for s in info.get("splits", [])}
        for df in conf.get("data_files", []):
            split = df["split"]
            try:
                ds = load_dataset(str(self.folder), name, split=split)
            except Exception as e:  # noqa: BLE001 - whatever `datasets` raises, it is a defect of the repo
                self.defect(self.folder / repo.CARD, f"configs.{name}.{split}",
                            f"does not load ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
                continue
            if set(ds.column_names) - set(RECORD.names) or {"id", "image", "label"} - set(ds.column_names):
                self.defect(self.folder / df["path"], "columns", f"{ds.column_names} are not the schema's fields")
            n = len(ds)
            self.counts[f"{name}/{split}"] = n
            if n != expected_by_split.get(split):
                self.defect(self.folder / repo.meta_dir(name), f"{split}.records",
                            f"meta.json files say {expected_by_split.get(split)}, the data has {n}")
            if split in stated and stated[split] != n:
                self.defect(self.folder / repo.CARD, f"dataset_info.{name}.{split}",
                            f"says {stated[split]} examples, the data has {n}")
            for i in range(n):
                try:
                    row = ds[i]
                    for key in ("image", "prev_image"):
                        if row.get(key) is not None:
                            row[key].load()
                except Exception as e:  # noqa: BLE001 - an undecodable frame
                    self.defect(self.folder / df["path"], f"row {i}", f"does not decode ({type(e).__name__}: {e})")
            self._tars(name, split, n)

    def _tars(self, name: str, split: str, n_rows: int) -> None:
        tars = sorted(self.folder.glob(repo.tar_pattern(name, split)))
        if not tars:
            return
        samples = 0
        for t in tars:
            try:
                with tarfile.open(t) as tf:
                    keys: dict[str, set] = {}
                    for m in tf:
                        if m.size > limits.limit("member"):
                            self.defect(t, m.name, f"declares {m.size:,} bytes, over the member limit")
                            continue
                        if not m.isfile() or m.name.startswith("/") or ".." in m.name.split("/") or "/" in m.name:
                            self.defect(t, m.name, "is not a plain file at the top of the shard (path traversal?)")
                            continue
                        key, ext = repo.split_member(m.name)
                        if not ID_RE.match(key) or ext not in MEMBER_EXTS:
                            self.defect(t, m.name, "is a stray member (expected <id>.json, <id>.png, <id>.prev.png)")
                            continue
                        keys.setdefault(key, set()).add(ext)
                    for key, exts in keys.items():
                        if repo.RECORD_EXT not in exts or not exts & set(repo.FRAME_EXTS):
                            self.defect(t, key, f"has {sorted(exts)}; a sample needs json and an image")
                    samples += len(keys)
            except (tarfile.TarError, OSError) as e:
                self.defect(t, "(file)", f"is not a readable tar ({e})")
        if samples != n_rows:
            self.defect(self.folder / repo.tar_dir(name), split,
                        f"{samples} samples, the parquet split has {n_rows}")

    def _replay(self, listing: dict) -> None:
        base = self.folder / repo.REPLAY
        for source, games in listing.items():
            if not (isinstance(source, str) and SOURCE_RE.match(source) and isinstance(games, (list, dict))
                    and all(isinstance(g, str) and GAME_RE.match(g) for g in games)):
                self.defect(self.folder / repo.CARD, f"replay.{source}", "is not a source with a list of games")
                continue
            for game in games:
                d = base / source / game
                try:
                    meta = read_json(d / "meta.json")
                    for split, key in (("train", "train"), ("val", "val")):
                        limits.check("file", (d / f"{split}.jsonl").stat().st_size, file=str(d / f"{split}.jsonl"),
                                     field="(file)")
                        n = sum(1 for _ in (d / f"{split}.jsonl").open())
                        self.counts[f"replay/{source}/{game}/{split}"] = n
                        stated = meta[key]["records"]
                        if n != stated:
                            self.defect(d / f"{split}.jsonl", "records", f"{n} lines, meta.json says {stated}")
                    if not (d / "episodes.jsonl").is_file():
                        self.defect(d, "episodes.jsonl", "is missing: the frames cannot be rebuilt")
                except AtariDataError as e:
                    self.defects.append(e)
                except (OSError, ValueError, KeyError, TypeError) as e:
                    self.defect(d, "(game)", f"is not a replay-packed game ({type(e).__name__}: {e})")

    def _lmdb(self, games: dict) -> None:
        """Every shard a tar of plain top-level files, every sample its json and arrays, every array
        loadable without pickle and within the schema, and the card's counts right."""
        from atari_data.meltingpot import ARRAYS, check_row

        if not isinstance(games, dict) or not all(isinstance(g, str) and SAFE_NAME_RE.match(g) and type(n) is int
                                                  for g, n in games.items()):
            self.defect(self.folder / repo.CARD, "lmdb_pack.games", "is not a mapping of game names to row counts")
            return
        for game, stated in games.items():
            n = 0
            for t in sorted(self.folder.glob(repo.tar_pattern(game, "train"))):
                try:
                    with tarfile.open(t) as tf:
                        samples: dict[str, dict] = {}
                        for m in tf:
                            if not m.isfile() or "/" in m.name or m.name.startswith(".."):
                                self.defect(t, m.name, "is not a plain file at the top of the shard")
                                continue
                            key, ext = repo.split_member(m.name)
                            if m.size > limits.limit("member"):
                                self.defect(t, m.name, f"declares {m.size:,} bytes, over the member limit of "
                                                       f"{limits.limit('member') // limits.MB:,} MB")
                                continue
                            data = tf.extractfile(m).read()
                            if ext == "json":
                                value = parse_json_line(data, f"{t}!{m.name}", 1, "(member)")
                                if not isinstance(value, dict):
                                    raise ValueError(f"{m.name} is not a JSON object")
                                samples.setdefault(key, {}).update(value)
                            elif ext.endswith(".npy") and ext[:-4] in ARRAYS:
                                samples.setdefault(key, {})[ext[:-4]] = np.load(io.BytesIO(data), allow_pickle=False)
                            else:
                                self.defect(t, m.name, "is a stray member")
                        for key, sample in samples.items():
                            row = {k: sample.get(k) for k in (*ARRAYS, "num_players", "prompt")}
                            try:
                                check_row(row, str(t), key)
                            except AtariDataError as e:
                                self.defects.append(e)
                        n += len(samples)
                except AtariDataError as e:
                    self.defects.append(e)
                except (tarfile.TarError, OSError, ValueError, EOFError) as e:
                    self.defect(t, "(file)", f"is not a readable shard ({type(e).__name__}: {e})")
            self.counts[game] = n
            if n != stated:
                self.defect(self.folder / repo.CARD, f"lmdb_pack.games.{game}", f"says {stated}, the shards hold {n}")

    def _limits(self) -> None:
        for path, fld, msg in repo.hub_limit_defects(self.folder):
            self.defect(path, fld, msg)


def resolve_repo(target: str) -> Path:
    """A local folder, or a Hub dataset repo id downloaded to the local cache."""
    path = Path(target)
    if path.exists():
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(target, repo_type="dataset"))
    except Exception as e:  # noqa: BLE001 - offline, missing repo, auth
        why = _scrub(str(e)).splitlines()[0] if str(e) else ""
        raise AtariDataError(f"is neither a folder nor a reachable Hub dataset ({type(e).__name__}: {why})",
                             file=target, field="repo") from None
