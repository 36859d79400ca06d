"""Publishing a packed repository to the Hugging Face Hub, and reading its card.

The token comes from the usual places (HF_TOKEN, `huggingface-cli login`) and is never printed
or logged: error messages from the Hub client are scrubbed of it before they are shown.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from atari_data.errors import AtariDataError, cut_off
from atari_data.publish import repo as repo_mod
from atari_data.publish.card import card_for, read_card


def _scrub(text: str) -> str:
    token = os.environ.get("HF_TOKEN") or _stored_token()
    return text.replace(token, "***") if token else text


def _stored_token() -> str | None:
    try:
        from huggingface_hub import get_token

        return get_token()
    except Exception:  # noqa: BLE001 - no token is fine here
        return None


#: Files per commit: an interrupted publish loses at most one commit's files, and a rerun skips
#: every file already on the Hub with the same contents.
COMMIT_FILES = 64


def publish(
    folder: str | Path,
    repo: str,
    private: bool = False,
    revision: str | None = None,
    dry_run: bool = False,
    commit_files: int = COMMIT_FILES,
) -> tuple[list[tuple[str, int]], list[str]]:
    """Check ``folder`` (its card, `doctor`, nothing the contract does not know, no symlinks), then
    upload to the dataset repo ``repo`` what it does not hold yet, in commits of
    ``commit_files`` files with the card last (its examples loading ``repo``), and on main tag the
    revision ``v<schema version>``. The card's commit also deletes what the Hub holds under the
    contract's folders and ``folder`` does not. Rerun after an interruption: it resumes. Returns the files
    and sizes that were (or, with ``dry_run``, would be) uploaded, and the files deleted (none in a
    dry run, which does not ask the Hub)."""
    from atari_data.publish.doctor import Doctor
    from atari_data.schema import SCHEMA_VERSION

    folder = Path(folder)
    read_card(folder)
    if problem := repo_mod.hub_id_problem(repo):
        raise AtariDataError(problem, field="--repo")
    if revision is not None and (not repo_mod.BRANCH_RE.match(revision) or revision == f"v{SCHEMA_VERSION}"):
        raise AtariDataError(
            f"{revision!r} is not a branch name publish takes ({repo_mod.BRANCH_RULE}; not the tag v{SCHEMA_VERSION})",
            field="--revision",
        )
    for path, fld, msg in repo_mod.unexpected(folder)[:1]:
        raise AtariDataError(f"{msg}; refusing to publish", file=str(path), field=fld)
    defects = Doctor(folder).run().defects
    if defects:
        raise AtariDataError(
            f"{len(defects)} defects (`atari-data doctor {folder}`), e.g. {defects[0].render()}",
            file=str(folder),
            field="doctor",
        )
    card = card_for(folder, repo)  # the card's examples load the repo it is published to
    files = sorted(
        (str(p.relative_to(folder)), len(card) if p.name == repo_mod.CARD and p.parent == folder else p.stat().st_size)
        for p in folder.rglob("*")
        if p.is_file()
    )
    if dry_run:
        return files, []
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

    try:
        api = HfApi()
        api.create_repo(repo, repo_type="dataset", private=private, exist_ok=True)
        if revision:
            api.create_branch(repo, branch=revision, repo_type="dataset", exist_ok=True)
        there = {
            f.path: f
            for f in api.list_repo_tree(repo, repo_type="dataset", revision=revision, recursive=True)
            if hasattr(f, "blob_id")
        }
        todo = [(p, n) for p, n in files if not _same(card if p == repo_mod.CARD else folder / p, there.get(p))]
        # The card last, in a commit of its own: configs appear once their files are there. With it go the
        # deletions of what the folder no longer holds (an earlier pack's shards, which the card's patterns
        # would match too); a file of the owner's outside the contract's folders (NOTES.md) stays.
        mine = {p for p, _ in files}
        gone = sorted(p for p in there if p.split("/")[0] in repo_mod.FOLDERS and p not in mine)
        shards = [CommitOperationAdd(p, str(folder / p)) for p, _ in todo if p != repo_mod.CARD]
        last: list[CommitOperationAdd | CommitOperationDelete] = (
            [CommitOperationAdd(repo_mod.CARD, card)] if any(p == repo_mod.CARD for p, _ in todo) else []
        )
        last += [CommitOperationDelete(p) for p in gone]
        chunks = [shards[i : i + commit_files] for i in range(0, len(shards), commit_files)] + ([last] if last else [])
        for k, chunk in enumerate(chunks, 1):
            api.create_commit(
                repo,
                operations=chunk,
                commit_message=f"atari-data publish ({k}/{len(chunks)})",
                repo_type="dataset",
                revision=revision,
            )
        if (revision or "main") == "main":  # v1 names main's newest: a branch published to moves no tag
            tag = f"v{SCHEMA_VERSION}"  # the newest revision readable as this schema version, as LeRobot tags
            refs = api.list_repo_refs(repo, repo_type="dataset")
            head = next(b.target_commit for b in refs.branches if b.name == "main")
            old = next((t for t in refs.tags if t.name == tag), None)
            if old is not None and old.target_commit != head:
                api.delete_tag(repo, tag=tag, repo_type="dataset")
            if old is None or old.target_commit != head:
                api.create_tag(repo, tag=tag, repo_type="dataset")
    except Exception as e:  # noqa: BLE001 - offline, network, auth: all reported on one line
        why = _scrub(str(e)).splitlines()[0] if str(e) else ""
        raise AtariDataError(
            f"cannot publish to the Hub ({type(e).__name__}: {why}); run the same command again to resume",
            field="--repo",
        ) from None
    return todo, gone


def _same(local: Path | bytes, remote) -> bool:
    """Whether the Hub's file ``remote`` has the bytes of ``local`` (by its LFS sha256 or git blob id)."""
    data = local if isinstance(local, bytes) else local.read_bytes()
    if remote is None or remote.size != len(data):
        return False
    if remote.lfs is not None:
        return hashlib.sha256(data).hexdigest() == remote.lfs.sha256
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == remote.blob_id


def resolve_repo(target: str, tars: bool = True, configs: list[str] | None = None) -> Path:
    """A local folder, or a Hub dataset repo id downloaded to the local cache: without its
    WebDataset shards unless ``tars`` (they repeat the Parquet rows and are most of its bytes), and
    with ``configs`` named, only the card, the files those configs' patterns name (read first from
    the card; huggingface_hub's ``*`` also crosses folders, so a pattern may fetch more than it
    names, never less) and their games' meta files (which say each game's frame size). Offline,
    the cached copy. Read it through :func:`atari_data.publish.card.check_files`, which checks the
    files and their rows."""
    path = Path(target)
    if path.exists():
        return path
    from huggingface_hub import snapshot_download

    patterns = None
    if configs is not None:
        first = _snapshot(snapshot_download, target, [repo_mod.CARD])
        if not configs:  # the card alone
            return first
        card = read_card(first)
        known = {c["config_name"]: c for c in card.get("configs") or []}  # an unknown one: check_files says so
        patterns = [
            repo_mod.CARD,
            *(df["path"] for name in configs if name in known for df in known[name]["data_files"]),
            *map(_meta_pattern, configs),  # each game's frame size
        ]
    ignore = None if tars else [f"{repo_mod.WEBDATASET}/*"]
    return _snapshot(snapshot_download, target, patterns, ignore)


def _meta_pattern(config: str) -> str:
    """The meta files of a config's games: one game's, or all of its source's."""
    source, game = repo_mod.split_config(config)
    return repo_mod.meta_file(source, game) if game else repo_mod.meta_file(source, "*")


def _snapshot(download, target: str, patterns: list[str] | None, ignore: list[str] | None = None) -> Path:
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        return Path(download(target, repo_type="dataset", allow_patterns=patterns, ignore_patterns=ignore))
    except RepositoryNotFoundError:  # the Hub answered: a private one is not found either, without a token
        raise AtariDataError(
            f"is no folder here, and no dataset repository {target} on the Hub (a private one needs `hf auth login`)",
            file=target,
            field="repo",
        ) from None
    except Exception as e:  # noqa: BLE001 - offline, network, auth
        why = _scrub(str(e)).splitlines()[0] if str(e) else ""
        if broken := cut_off(e):
            raise AtariDataError(broken, file=target, field="repo") from None
        raise AtariDataError(
            f"is neither a folder nor a reachable Hub dataset ({type(e).__name__}: {why})", file=target, field="repo"
        ) from None
