"""Publishing for real: `atari-data publish` to a server speaking the Hub's HTTP API, then every way
of reading it back (`load_dataset` map-style and streaming, `atari-data doctor` of the Hub id), and a
publish cut off half-way and resumed.

The client runs in subprocesses, as a user runs it: huggingface_hub reads its endpoint and offline
switch once, on import, and the rest of the suite runs offline."""

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from atari_data.layout import list_games
from laya_protocol.names import HUB_SPLITS

from ..hub_server import HubServer
from ..test_library_bars import bars_drawn

READ_BACK = r"""
import hashlib, json, sys
import numpy as np
from datasets import load_dataset

repo, configs = sys.argv[1], sys.argv[2].split(",")
out = {}
for config in configs:
    for streaming in (False, True):
        got = out.setdefault(f"{config} streaming={streaming}", {})
        for split in ("train", "validation"):
            for row in load_dataset(repo, config, split=split, streaming=streaming):
                got[row["id"]] = {"split": split, "label": row["label"], "target": row["target"],
                                  "actions": row["actions"], "question": json.loads(row["question"]),
                                  "pixels": hashlib.md5(np.asarray(row["image"]).tobytes()).hexdigest()}
# Then every Python example of the card as published, in one namespace, as a reader would paste them.
import re
from huggingface_hub import hf_hub_download
card = open(hf_hub_download(repo, "README.md", repo_type="dataset")).read()
ns = {}
for block in re.findall(r"```python\n(.*?)```", card, re.S):
    exec(block, ns)
batch = next(iter(ns["loader"]))
out["card"] = {"rows": len(ns["ds"]), "game": len(ns["game"]), "mixed": sum(1 for _ in ns["mixed"]),
               "batch": list(batch["options"].shape), "last": ns["rec"]["id"]}
print(json.dumps(out))
"""


@pytest.fixture
def hub(tmp_path):
    with HubServer(tmp_path / "hub") as server:
        server.env = {
            **server.client_env(tmp_path / "hf"),
            "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets"),
        }
        yield server


def _env(hub, cache: str) -> dict:
    return {
        **hub.env,
        "HF_HOME": f"{hub.env['HF_HOME']}-{cache}",
        "HF_DATASETS_CACHE": f"{hub.env['HF_DATASETS_CACHE']}-{cache}",
    }


def _run(hub, *args, cache: str = "a") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=_env(hub, cache), capture_output=True, text=True, timeout=300)


def _run_together(hub, *runs: tuple[tuple[str, ...], str]) -> list[subprocess.CompletedProcess]:
    """Independent clients at once, each with its own cache (as several users would): (args, cache) each."""
    procs = [
        (
            args,
            subprocess.Popen(
                [sys.executable, *args], env=_env(hub, cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            ),
        )
        for args, cache in runs
    ]
    done = []
    for args, proc in procs:
        out, err = proc.communicate(timeout=300)
        done.append(subprocess.CompletedProcess([sys.executable, *args], proc.returncode, out, err))
    return done


def _layout_rows(root, source: str) -> dict:
    out = {}
    for g in list_games(root, [source]):
        for split, hub_split in HUB_SPLITS.items():
            for rec in g.records(split):
                out[rec["id"]] = {
                    "split": hub_split,
                    "label": rec["label"],
                    "target": rec.get("target"),
                    "actions": rec["actions"],
                    "question": rec["question"],
                    "pixels": hashlib.md5(np.ascontiguousarray(g.frame(rec)).tobytes()).hexdigest(),
                }
    return out


@pytest.mark.slow
def test_publish_then_load_every_way_then_doctor(hub, packed, layout_master):
    done = _run(hub, "-m", "atari_data.cli", "publish", str(packed), "--repo", "laya/atari")
    assert done.returncode == 0, done.stderr[-3000:]
    assert not bars_drawn(done.stderr), "the Hub client's upload bars, into a log"
    repo = hub.store.repos["datasets/laya/atari"]
    head = repo["branches"]["main"]
    local = sorted(str(p.relative_to(packed)) for p in packed.rglob("*") if p.is_file())
    assert sorted(hub.store.files("datasets/laya/atari", head)) == local, "every file of the folder, nothing else"
    assert repo["tags"] == {"v1": head}, "the revision is tagged with the schema version"
    cards = [i for i, (_, _, _, paths) in enumerate(hub.commits) if "README.md" in paths]
    assert cards == [len(hub.commits) - 1], "the card lands in the last commit, once its files are there"

    card = hub.store.blob(hub.store.files("datasets/laya/atari", head)["README.md"][0]).read_text()
    assert 'load_dataset("laya/atari", "expert"' in card and "ORG/NAME" not in card, "examples load this repo"

    # Readers, the doctor, a tar-less download and a second publish talk to the Hub at once.
    fetch = "from atari_data.publish.hub import resolve_repo; print(resolve_repo('laya/atari', tars=False))"
    got, doctor, plain, again = _run_together(
        hub,
        (("-c", READ_BACK, "laya/atari", "expert2f,expert,expert-Pong"), "read"),
        (("-m", "atari_data.cli", "doctor", "laya/atari", "--tars"), "doctor"),
        (("-c", fetch), "doctor-plain"),
        (("-m", "atari_data.cli", "publish", str(packed), "--repo", "laya/atari"), "a"),
    )
    assert got.returncode == 0, got.stderr[-3000:]
    read = json.loads(got.stdout.strip().splitlines()[-1])
    examples = read.pop("card")
    assert examples["rows"] == sum(r["split"] == "train" for r in _layout_rows(layout_master, "expert").values())
    assert examples["game"] == examples["rows"] and examples["mixed"] >= examples["rows"]
    assert examples["batch"] == [32, 18] and examples["last"].startswith("expert-Pong-")
    for config in ("expert2f", "expert", "expert-Pong"):
        expected = _layout_rows(layout_master, config.split("-")[0])
        for streaming in (False, True):
            assert read[f"{config} streaming={streaming}"] == expected, (config, streaming)

    assert doctor.returncode == 0, doctor.stdout[-2000:] + doctor.stderr[-2000:]
    assert "healthy: laya/atari" in doctor.stdout
    assert list(Path(f"{hub.env['HF_HOME']}-doctor").rglob("*.tar")), "--tars fetches and checks the shards"
    # Without --tars, what doctor downloads leaves the shards out (the check itself is the same).
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert not list(Path(plain.stdout.strip()).rglob("*.tar")) and list(Path(plain.stdout.strip()).rglob("*.parquet"))
    assert not [u for u in hub.unknown if "/datasets/" in u], hub.unknown

    assert again.returncode == 0, again.stderr[-2000:]
    assert hub.store.repos["datasets/laya/atari"]["branches"]["main"] == head, "nothing new to upload: no new commit"

    # one the Hub answers it does not hold was "neither a folder nor a reachable Hub dataset" (an outside review)
    missing = _run(hub, "-m", "atari_data.cli", "doctor", "laya/nothing")
    assert (
        missing.returncode == 2 and "no dataset repository laya/nothing on the Hub" in missing.stdout + missing.stderr
    ), missing.stdout + missing.stderr

    # a download cut off mid-file said "neither a folder nor a reachable Hub dataset"
    hub.cut_downloads = 10**6  # every download stops half-way, however often the client resumes
    cut = _run(hub, "-m", "atari_data.cli", "doctor", "laya/atari", cache="cut")
    said = cut.stdout + cut.stderr
    assert cut.returncode == 2 and "cut off" in said and "run the same command again" in said, said
    # the Hub client's retry warnings were printed twice each, bare and again through the CLI's logging
    assert "Trying to resume download" in said and "WARNING huggingface_hub" not in said, said
    assert "neither a folder" not in said and "Traceback" not in said, said
    hub.cut_downloads = 1  # one drop on the way: the client resumes it by itself
    again = _run(hub, "-m", "atari_data.cli", "doctor", "laya/atari", cache="cut")
    assert again.returncode == 0 and "healthy: laya/atari" in again.stdout, again.stdout + again.stderr


@pytest.mark.slow
def test_an_interrupted_publish_resumes_where_it_stopped(hub, packed):
    local = sorted(str(p.relative_to(packed)) for p in packed.rglob("*") if p.is_file())
    from ..hub_server import LFS_SUFFIXES

    lfs = sum(name.endswith(LFS_SUFFIXES) for name in local)
    assert lfs >= 6, local
    hub.hold_after = lfs // 2  # half the LFS uploads get through; the next one never gets an answer
    env = {**hub.env, "HF_HOME": f"{hub.env['HF_HOME']}-cut"}
    cut = subprocess.Popen(
        [sys.executable, "-m", "atari_data.cli", "publish", str(packed), "--repo", "laya/cut"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while not hub.holding.wait(1):
            assert cut.poll() is None, f"the publish ended ({cut.returncode}) before it was cut off"
    finally:
        os.killpg(cut.pid, signal.SIGKILL)  # the connection dies mid-upload, as when a laptop loses its network
        cut.wait()
    hub.release()
    landed = set(hub.store.files("datasets/laya/cut", hub.store.repos["datasets/laya/cut"]["branches"]["main"]))
    assert len(landed) < len(local)

    puts_before, commits_before = hub.lfs_puts, len(hub.commits)
    resumed = _run(hub, "-m", "atari_data.cli", "publish", str(packed), "--repo", "laya/cut", "--commit-files", "4")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    head = hub.store.repos["datasets/laya/cut"]["branches"]["main"]
    assert sorted(hub.store.files("datasets/laya/cut", head)) == local
    sent = {p for _, _, _, paths in hub.commits[commits_before:] for p in paths}
    assert not sent & landed, "what had landed was not sent again"
    assert hub.lfs_puts - puts_before <= len(local) - len(landed)
    assert hub.store.repos["datasets/laya/cut"]["tags"] == {"v1": head}
    card = hub.store.blob(hub.store.files("datasets/laya/cut", head)["README.md"][0]).read_text()
    assert 'load_dataset("laya/cut"' in card, "the card published to laya/cut loads laya/cut"


def test_a_publish_the_hub_refuses_is_one_line(hub, packed):
    hub.store.create("datasets/laya/taken")
    hub.store.repos["datasets/laya/taken"]["branches"] = {}  # a repo whose main branch cannot be resolved
    failed = _run(hub, "-m", "atari_data.cli", "publish", str(packed), "--repo", "laya/taken", cache="refused")
    assert failed.returncode == 2
    assert failed.stderr.startswith("error: --repo: cannot publish to the Hub") and failed.stderr.count("\n") == 1
    assert "run the same command again to resume" in failed.stderr and "hf_test" not in failed.stderr


def test_publish_refuses_what_the_card_does_not_describe(packed, tmp_path, capsys):
    import shutil

    from atari_data.cli import main

    repo = tmp_path / "repo"
    shutil.copytree(packed, repo)
    (repo / "notes.txt").write_text("private")
    assert main(["publish", str(repo), "--repo", "me/atari", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "notes.txt" in err and "is not part of a packed repository" in err and err.count("\n") == 1
    (repo / "notes.txt").unlink()
    (repo / "meta" / "link.json").symlink_to("/etc/hostname")
    assert main(["publish", str(repo), "--repo", "me/atari", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "link.json" in err and "is a symlink" in err


def _game_dirs(packed: Path) -> tuple[str, str]:
    """(source, game) of one game in the packed fixture."""
    meta = sorted((packed / "meta").glob("*/*.json"))[0]
    return meta.parent.name, meta.stem


STRAYS = [
    "webdataset/{s}/{g}/notes.txt",
    "schema/notes.txt",
    "meta/{s}/{g}.json.bak",
    "meta/private/keys.json",
    "webdataset/{s}/{g}/train-00000[1].tar",
    "data/{s}/{g}/train-00000-of-00001 copy.parquet",
    "schema/a\nb.json",
    b"schema/caf\xe9.json",
]


@pytest.mark.parametrize("stray", STRAYS, ids=range(len(STRAYS)))
def test_publish_refuses_a_file_of_no_packed_repository_at_any_depth(packed, tmp_path, capsys, stray):
    """Only top-level strays were refused: notes under webdataset/, meta/ or schema/, a name that is
    not UTF-8 (which failed at upload, unnamed, for ever) and one with a newline were uploaded."""
    import shutil

    from atari_data.cli import main

    repo = tmp_path / "repo"
    shutil.copytree(packed, repo)
    s, g = _game_dirs(packed)
    rel = (
        stray.replace(b"{s}", s.encode()).replace(b"{g}", g.encode())
        if isinstance(stray, bytes)
        else stray.format(s=s, g=g)
    )
    path = os.fsdecode(os.path.join(os.fsencode(repo), os.fsencode(rel)))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(b"{}")
    assert main(["publish", str(repo), "--repo", "me/atari", "--dry-run"]) == 2
    err = capsys.readouterr().err
    named = Path(path).name.encode("utf-8", "backslashreplace").decode().replace("\n", "\\n")
    assert named in err and err.count("\n") == 1 and err.startswith("error: "), err


REVISIONS = ["../x", "a b", "x\ny", "-f", "refs/heads/main", "a..b", "v1.lock", "x.", "a/b.", "HEAD", "v1", "0" * 40]


@pytest.mark.parametrize("repo", ["me/a..b", "me/modèle", "me/x.git", "me/x--y", "me/" + "a" * 97, "atari"])
@pytest.mark.parametrize("command", ["publish", "pack"])
def test_a_repo_id_the_hub_refuses_is_refused_first(layout_master, packed, capsys, tmp_path, repo, command):
    """These passed publish's dry run and pack's card, and the Hub refused them at upload."""
    from atari_data.cli import main

    if command == "publish":
        argv = ["publish", str(packed), "--repo", repo, "--dry-run"]
    else:
        argv = ["pack", str(layout_master), str(tmp_path / "out"), "--repo", repo]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--repo" in err and err.count("\n") == 1 and err.startswith("error: "), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("revision", REVISIONS)
def test_publish_refuses_a_revision_that_is_no_branch_name(packed, capsys, revision):
    """--revision went to the Hub as given: '../x' or a name with a newline."""
    from atari_data.cli import main

    assert main(["publish", str(packed), "--repo", "me/atari", f"--revision={revision}", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "--revision" in err and err.count("\n") == 1 and err.startswith("error: "), err


@pytest.mark.slow
def test_a_second_publish_leaves_the_hub_holding_what_the_folder_holds(hub, packed, layout_master, tmp_path):
    """Published again from a pack with other shard sizes, the first pack's shards stayed on the Hub,
    matched the card's patterns, and a streamed split read every record twice. A branch publish
    moved the v1 tag off main."""
    from atari_data.publish.pack import PackConfig, pack

    first = _run(hub, "-m", "atari_data.cli", "publish", str(packed), "--repo", "laya/again")
    assert first.returncode == 0, first.stderr[-2000:]
    repo = "datasets/laya/again"
    main_head = hub.store.repos[repo]["branches"]["main"]
    # The user's own files beside the dataset, put there on the Hub (the real Hub starts a repo with
    # .gitattributes): not the publisher's to remove, nor doctor's to refuse.
    notes, lfs = hub.store.put_blob(b"my notes"), hub.store.put_blob(b"*.parquet filter=lfs\n")
    hub.store.commit(repo, "main", {"NOTES.md": (notes, 8, False), ".gitattributes": (lfs, 21, False)}, [])
    other = tmp_path / "other"
    pack(PackConfig(root=str(layout_master), out=str(other), shard_size=40_000))
    local = sorted(str(p.relative_to(other)) for p in other.rglob("*") if p.is_file())
    assert set(local) != {str(p.relative_to(packed)) for p in packed.rglob("*") if p.is_file()}, "other shard names"

    again = _run(hub, "-m", "atari_data.cli", "publish", str(other), "--repo", "laya/again")
    assert again.returncode == 0, again.stderr[-2000:]
    old = sorted({str(p.relative_to(packed)) for p in packed.rglob("*") if p.is_file()} - set(local))
    assert f"deleted {len(old)} files" in again.stdout and old[0] in again.stdout, again.stdout  # said, not silent
    head = hub.store.repos[repo]["branches"]["main"]
    assert sorted(hub.store.files(repo, head)) == sorted([*local, ".gitattributes", "NOTES.md"])
    doctor = _run(hub, "-m", "atari_data.cli", "doctor", "laya/again", cache="doctor")
    assert doctor.returncode == 0 and "healthy" in doctor.stdout, doctor.stdout[-2000:] + doctor.stderr[-2000:]
    read = _run(hub, "-c", READ_BACK, "laya/again", "expert2f", cache="again")
    assert read.returncode == 0, read.stderr[-3000:]
    got = json.loads(read.stdout.strip().splitlines()[-1])
    for streaming in (False, True):
        assert got[f"expert2f streaming={streaming}"] == _layout_rows(layout_master, "expert2f"), streaming

    main_head = head
    branch = _run(hub, "-m", "atari_data.cli", "publish", str(packed), "--repo", "laya/again", "--revision", "dev")
    assert branch.returncode == 0, branch.stderr[-2000:]
    assert hub.store.repos[repo]["tags"] == {"v1": main_head}, "v1 names main's newest, not the branch's"
