"""A small Hugging Face Hub for tests: the part of the Hub's HTTP API that ``huggingface_hub`` and
``datasets`` use for dataset and model repositories, served from a temporary folder on a loopback port.

Covered (``{repo}`` is ``ORG/NAME``, ``{rev}`` a branch, tag or commit id). Dataset routes are listed;
a model repo's are the same with ``/api/models/`` for ``/api/datasets/`` and no ``/datasets`` prefix
on the git-lfs and resolve routes, as on the Hub:

    POST /api/repos/create                                    create a repo (409 if it exists)
    POST /api/validate-yaml                                   check a card's YAML header
    GET  /api/datasets/{repo}[/revision/{rev}]                 repo info: sha, siblings, cardData
    GET  /api/datasets/{repo}/tree/{rev}[/{path}]              list files (``recursive``; LFS info)
    POST /api/datasets/{repo}/paths-info/{rev}                 info of given paths
    GET  /api/datasets/{repo}/refs                             branches and tags
    POST /api/datasets/{repo}/branch/{branch}                  create a branch
    POST /api/datasets/{repo}/tag/{rev}                        tag a revision
    DELETE /api/datasets/{repo}/tag/{tag}                      delete a tag
    POST /api/datasets/{repo}/preupload/{rev}                  upload mode (regular or lfs) per file
    POST /datasets/{repo}.git/info/lfs/objects/batch           git-lfs batch API (basic transfer)
    PUT  /lfs/{oid}                                            the upload target the batch API hands out
    POST /api/datasets/{repo}/commit/{rev}                     NDJSON commit: files, LFS files, deletions
    GET, HEAD /datasets/{repo}/resolve/{rev}/{path}            file contents, with Range requests

Uploads use git-lfs, so clients must run with ``HF_HUB_DISABLE_XET=1`` (Xet storage is not served).
Anything else answers 404 and is recorded in ``server.unknown`` so a test can see what it missed.
``server.hold_after`` makes the server stop answering after that many more uploads (LFS PUTs and
commits): later uploads hang until ``server.release()``, so a test can cut a client off half-way.
``server.cut_downloads`` makes that many more file downloads (GETs of ``resolve``) stop half-way:
the full Content-Length is declared, half the bytes sent, the connection closed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LFS_SUFFIXES = (".parquet", ".tar", ".png", ".jpg", ".npy", ".safetensors", ".bin", ".zip")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Store:
    """Repos as commits of {path: (sha256, size, lfs)} over a content-addressed blob folder."""

    def __init__(self, root: Path):
        self.root = root
        (root / "blobs").mkdir(parents=True, exist_ok=True)
        self.repos: dict[str, dict] = {}
        self.lock = threading.Lock()

    def blob(self, sha256: str) -> Path:
        return self.root / "blobs" / sha256

    def put_blob(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        self.blob(sha).write_bytes(data)
        return sha

    def create(self, repo: str) -> bool:
        with self.lock:
            if repo in self.repos:
                return False
            first = self._commit_id(repo, None, {})
            self.repos[repo] = {
                "commits": {first: {"parent": None, "files": {}}},
                "branches": {"main": first},
                "tags": {},
            }
            return True

    def _commit_id(self, repo: str, parent: str | None, files: dict) -> str:
        return hashlib.sha1(json.dumps([repo, parent, sorted(files.items()), time.time_ns()]).encode()).hexdigest()

    def resolve(self, repo: str, rev: str) -> str | None:
        r = self.repos.get(repo)
        if r is None:
            return None
        rev = urllib.parse.unquote(rev)
        return r["branches"].get(rev) or r["tags"].get(rev) or (rev if rev in r["commits"] else None)

    def files(self, repo: str, commit: str) -> dict:
        return self.repos[repo]["commits"][commit]["files"]

    def commit(self, repo: str, branch: str, adds: dict, deletes: list[str]) -> str:
        with self.lock:
            r = self.repos[repo]
            parent = r["branches"][branch]
            files = dict(r["commits"][parent]["files"])
            for path in deletes:
                files = {p: v for p, v in files.items() if p != path and not p.startswith(path.rstrip("/") + "/")}
            files.update(adds)
            new = self._commit_id(repo, parent, files)
            r["commits"][new] = {"parent": parent, "files": files}
            r["branches"][branch] = new
            return new


class Handler(BaseHTTPRequestHandler):
    server: HubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    # -- plumbing ---------------------------------------------------------------------------------

    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            return self.rfile.read(n)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if not size:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return b""

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header(
            "Content-Length",
            str(len(body)) if not head or "Content-Length" not in (headers or {}) else headers["Content-Length"],
        )
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, value, status: int = 200, headers: dict | None = None) -> None:
        self._send(status, json.dumps(value).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _error(self, status: int, message: str) -> None:
        self._json({"error": message}, status, {"X-Error-Message": message})

    def _dropped(self) -> bool:
        """Count one upload; past ``hold_after``, hang until released, then drop the connection."""
        with self.server.store.lock:
            held = self.server.hold_after is not None and self.server.hold_after <= 0
            if self.server.hold_after is not None and not held:
                self.server.hold_after -= 1
        if not held:
            return False
        self.server.holding.set()
        self.server.released.wait()
        self.close_connection = True
        return True

    # -- routes -----------------------------------------------------------------------------------

    ROUTES = [
        ("POST", r"/api/repos/create", "create"),
        ("POST", r"/api/validate-yaml", "validate_yaml"),
        ("GET", r"/api/(?P<kind>datasets|models)/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?", "tree"),
        ("POST", r"/api/(?P<kind>datasets|models)/(?P<repo>[^/]+/[^/]+)/paths-info/(?P<rev>[^/]+)", "paths_info"),
        ("GET", r"/api/(?P<kind>datasets|models)/(?P<repo>[^/]+/[^/]+)/refs", "refs"),
        ("POST", r"/api/(?P<kind>datasets|models)/(?P<repo>[^/]+/[^/]+)/branch/(?P<branch>[^/]+)", "branch"),
        ("POST", r"/api/(?P<kind>datasets|models)/(?P<repo>[^/]+/[^/]+)/tag/(?P<rev>[^/]+)", "tag"),
        ("DELETE", r"/api/(?P<kind>datasets|models)/(?P<repo>[^/]+/[^/]+)/tag/(?P<tag>[^/]+)", "delete_tag"),
        ("POST", r"/api/(?P<kind>datasets|models)/(?P<repo>[^/]+/[^/]+)/preupload/(?P<rev>[^/]+)", "preupload"),
        ("POST", r"/api/(?P<kind>datasets|models)/(?P<repo>[^/]+/[^/]+)/commit/(?P<rev>[^/]+)", "commit"),
        ("GET", r"/api/(?P<kind>datasets|models)/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?", "info"),
        ("POST", r"/(?:(?P<kind>datasets)/)?(?P<repo>[^/]+/[^/]+)\.git/info/lfs/objects/batch", "lfs_batch"),
        ("PUT", r"/lfs/(?P<oid>[0-9a-f]{64})", "lfs_put"),
        ("GET", r"/(?:(?P<kind>datasets)/)?(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)", "resolve"),
        ("HEAD", r"/(?:(?P<kind>datasets)/)?(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)", "resolve"),
    ]

    def _route(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        self.query = urllib.parse.parse_qs(url.query)
        for m, pattern, name in self.ROUTES:
            match = re.fullmatch(pattern, url.path)
            if m == method and match:
                args = {k: urllib.parse.unquote(v) if v else v for k, v in match.groupdict().items()}
                if "kind" in args:  # one store for both kinds: a repo's key says which it is
                    args["repo"] = f"{args.pop('kind') or 'models'}/{args['repo']}"
                return getattr(self, name)(**args)
        self.server.unknown.append(f"{method} {url.path}")
        self._error(404, f"not served by the test Hub: {method} {url.path}")

    def do_GET(self):
        self._route("GET")

    def do_HEAD(self):
        self._route("HEAD")

    def do_POST(self):
        self._route("POST")

    def do_PUT(self):
        self._route("PUT")

    def do_DELETE(self):
        self._route("DELETE")

    # -- handlers ---------------------------------------------------------------------------------

    def _repo_commit(self, repo: str, rev: str | None) -> str | None:
        commit = self.server.store.resolve(repo, rev or "main")
        if commit is None:
            what = "Repository" if repo not in self.server.store.repos else "Revision"
            self._send(
                404,
                json.dumps({"error": f"{what} Not Found"}).encode(),
                {
                    "X-Error-Code": "RepoNotFound" if what == "Repository" else "RevisionNotFound",
                    "X-Error-Message": f"{what} Not Found",
                    "Content-Type": "application/json",
                },
            )
        return commit

    def create(self):
        body = json.loads(self._body() or b"{}")
        repo = f"{body.get('organization')}/{body['name']}" if body.get("organization") else body["name"]
        kind = body.get("type") or "model"
        if kind not in ("dataset", "model"):
            return self._error(400, "the test Hub serves dataset and model repos only")
        key = f"{kind}s/{repo}"
        url = self._url(key)
        self.server.created.append((self.path, body))
        if not self.server.store.create(key):
            return self._json({"error": f"You already created this {kind} repo", "url": url}, 409)
        # the Hub's request: "private" (older clients) or "visibility"; a repo is public unless asked
        private = body.get("private") is True or body.get("visibility") == "private"
        self.server.store.repos[key]["private"] = private
        self._json({"url": url, "name": repo})

    def _url(self, key: str) -> str:
        """A repo's web address: models live at the Hub's root, datasets under /datasets."""
        kind, repo = key.split("/", 1)
        return f"{self.server.url}/{repo}" if kind == "models" else f"{self.server.url}/datasets/{repo}"

    def validate_yaml(self):
        import yaml

        text = json.loads(self._body()).get("content", "")
        m = re.match(r"---\n(.*?)\n---\n", text, re.S)
        try:
            header = yaml.safe_load(m[1]) if m else None
        except yaml.YAMLError as e:
            return self._json({"errors": [{"message": f"YAML does not parse: {e}"}], "warnings": []}, 400)
        if m and not isinstance(header, dict):
            return self._json({"errors": [{"message": "the YAML header is not a mapping"}], "warnings": []}, 400)
        self._json({"errors": [], "warnings": []})

    def _entry(self, path: str, meta: tuple) -> dict:
        sha256, size, lfs = meta
        entry = {
            "type": "file",
            "path": path,
            "size": size,
            "oid": git_blob_sha1(self.server.store.blob(sha256).read_bytes()),
        }
        if lfs:
            entry["lfs"] = {"oid": sha256, "size": size, "pointerSize": 130}
        return entry

    def _listing(self, files: dict, base: str, recursive: bool) -> list[dict]:
        base = base.strip("/")
        prefix = base + "/" if base else ""
        out, dirs = [], set()
        for path, meta in sorted(files.items()):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :]
            parts = rest.split("/")
            for i in range(1, len(parts) if recursive else min(2, len(parts))):
                dirs.add(prefix + "/".join(parts[:i]))
            if recursive or len(parts) == 1:
                out.append(self._entry(path, meta))
        out += [
            {"type": "directory", "path": d, "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0}
            for d in sorted(dirs)
        ]
        return out

    def tree(self, repo: str, rev: str, path: str | None = None):
        commit = self._repo_commit(repo, rev)
        if commit is None:
            return
        files = self.server.store.files(repo, commit)
        base = (path or "").strip("/")
        if base and not any(p.startswith(base + "/") for p in files) and base not in files:
            return self._send(
                404,
                b'{"error":"Entry not found"}',
                {"X-Error-Code": "EntryNotFound", "Content-Type": "application/json"},
            )
        recursive = self.query.get("recursive", ["false"])[0].lower() in ("1", "true")
        self._json(self._listing(files, base, recursive))

    def paths_info(self, repo: str, rev: str):
        commit = self._repo_commit(repo, rev)
        if commit is None:
            return
        raw = self._body().decode()
        if self.headers.get("Content-Type", "").startswith("application/json"):
            paths = json.loads(raw).get("paths", [])
        else:
            paths = urllib.parse.parse_qs(raw).get("paths", [])
        files = self.server.store.files(repo, commit)
        out = []
        for p in paths:
            p = p.strip("/")
            if p in files:
                out.append(self._entry(p, files[p]))
            elif any(f.startswith(p + "/") for f in files) or p == "":
                out.append({"type": "directory", "path": p, "oid": hashlib.sha1(p.encode()).hexdigest(), "size": 0})
        self._json(out)

    def refs(self, repo: str):
        if self._repo_commit(repo, "main") is None:
            return
        r = self.server.store.repos[repo]
        self._json(
            {
                "branches": [
                    {"name": b, "ref": f"refs/heads/{b}", "targetCommit": c} for b, c in r["branches"].items()
                ],
                "tags": [{"name": t, "ref": f"refs/tags/{t}", "targetCommit": c} for t, c in r["tags"].items()],
                "converts": [],
            }
        )

    def branch(self, repo: str, branch: str):
        body = json.loads(self._body() or b"{}")
        start = self._repo_commit(repo, body.get("startingPoint") or "main")
        if start is None:
            return
        r = self.server.store.repos[repo]
        if branch in r["branches"]:
            return self._error(409, "Reference already exists")
        r["branches"][branch] = start
        self._json({})

    def tag(self, repo: str, rev: str):
        body = json.loads(self._body() or b"{}")
        commit = self._repo_commit(repo, rev)
        if commit is None:
            return
        r = self.server.store.repos[repo]
        if body["tag"] in r["tags"]:
            return self._error(409, "Tag already exists")
        r["tags"][body["tag"]] = commit
        self._json({})

    def delete_tag(self, repo: str, tag: str):
        if self._repo_commit(repo, "main") is None:
            return
        if self.server.store.repos[repo]["tags"].pop(tag, None) is None:
            return self._error(404, "Tag not found")
        self._json({})

    def preupload(self, repo: str, rev: str):
        commit = self._repo_commit(repo, rev)
        if commit is None:
            return
        files = self.server.store.files(repo, commit)
        out = []
        for f in json.loads(self._body())["files"]:
            lfs = f["path"].endswith(LFS_SUFFIXES) or f["size"] >= 1_000_000
            entry = {"path": f["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False}
            if f["path"] in files:
                entry["oid"] = self._entry(f["path"], files[f["path"]])["oid"]
            out.append(entry)
        self._json({"files": out, "commitOid": commit})

    def lfs_batch(self, repo: str):
        if self._repo_commit(repo, "main") is None:
            return
        body = json.loads(self._body())
        objects = []
        for obj in body["objects"]:
            entry = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
            if not self.server.store.blob(obj["oid"]).exists():  # else already stored: nothing to send
                entry["actions"] = {"upload": {"href": f"{self.server.url}/lfs/{obj['oid']}", "header": {}}}
            objects.append(entry)
        self._json(
            {"transfer": "basic", "objects": objects, "hash_algo": "sha256"},
            headers={"Content-Type": "application/vnd.git-lfs+json"},
        )

    def lfs_put(self, oid: str):
        data = self._body()
        if self._dropped():
            return
        if hashlib.sha256(data).hexdigest() != oid:
            return self._error(400, "the uploaded bytes do not hash to their oid")
        self.server.store.put_blob(data)
        self.server.lfs_puts += 1
        self._send(200)

    def commit(self, repo: str, rev: str):
        branch = urllib.parse.unquote(rev)
        if self._repo_commit(repo, branch) is None:
            return
        if branch not in self.server.store.repos[repo]["branches"]:
            return self._error(400, "commits go to a branch")
        adds, deletes, summary = {}, [], ""
        for line in self._body().splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                summary = value.get("summary", "")
            elif key == "file":
                data = (
                    base64.b64decode(value["content"])
                    if value.get("encoding") == "base64"
                    else value["content"].encode()
                )
                adds[value["path"]] = (self.server.store.put_blob(data), len(data), False)
            elif key == "lfsFile":
                if not self.server.store.blob(value["oid"]).exists():
                    return self._error(422, f"LFS object {value['oid']} of {value['path']} was never uploaded")
                size = self.server.store.blob(value["oid"]).stat().st_size
                adds[value["path"]] = (value["oid"], size, True)
            elif key in ("deletedFile", "deletedFolder"):
                deletes.append(value["path"])
            else:
                return self._error(400, f"unknown commit operation {key!r}")
        if self._dropped():
            return
        new = self.server.store.commit(repo, branch, adds, deletes)
        self.server.commits.append((repo, branch, summary, sorted(adds)))
        self._json({"commitUrl": f"{self._url(repo)}/commit/{new}", "commitOid": new, "pullRequestUrl": None})

    def info(self, repo: str, rev: str | None = None):
        commit = self._repo_commit(repo, rev)
        if commit is None:
            return
        files = self.server.store.files(repo, commit)
        card = None
        if "README.md" in files:
            text = self.server.store.blob(files["README.md"][0]).read_text()
            m = re.match(r"---\n(.*?)\n---\n", text, re.S)
            if m:
                import yaml

                card = yaml.safe_load(m[1])
        name = repo.split("/", 1)[1]
        self._json(
            {
                "_id": hashlib.sha1(repo.encode()).hexdigest()[:24],
                "id": name,
                "author": name.split("/")[0],
                "sha": commit,
                "private": self.server.store.repos[repo].get("private", False),
                "disabled": False,
                "gated": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "cardData": card,
                "lastModified": "2026-12-01T00:00:00.000Z",
                "createdAt": "2026-12-01T00:00:00.000Z",
                "siblings": [{"rfilename": p, "size": m[1]} for p, m in sorted(files.items())],
            }
        )

    def resolve(self, repo: str, rev: str, path: str):
        head = self.command == "HEAD"
        commit = self._repo_commit(repo, rev)
        if commit is None:
            return
        files = self.server.store.files(repo, commit)
        if path not in files:
            return self._send(
                404,
                b'{"error":"Entry not found"}',
                {"X-Error-Code": "EntryNotFound", "Content-Type": "application/json"},
                head,
            )
        sha256, size, lfs = files[path]
        data = self.server.store.blob(sha256).read_bytes()
        etag = sha256 if lfs else git_blob_sha1(data)
        headers = {
            "X-Repo-Commit": commit,
            "ETag": f'"{etag}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if lfs:
            headers.update({"X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": str(size)})
        rng = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        if rng:
            start = int(rng[1]) if rng[1] else max(0, size - int(rng[2]))
            end = min(int(rng[2]), size - 1) if rng[1] and rng[2] else size - 1
            part = data[start : end + 1]
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            headers["Content-Length"] = str(len(part))
            return self._send(206, part, headers, head)
        headers["Content-Length"] = str(size)
        with self.server.store.lock:
            cut = not head and self.server.cut_downloads > 0
            self.server.cut_downloads -= cut
        if cut:  # as a network that drops mid-file: the size promised, half of it sent
            self.send_response(200)
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data[: size // 2])
            self.close_connection = True
            return
        self._send(200, data, headers, head)


class HubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path):
        super().__init__(("127.0.0.1", 0), Handler)
        self.store = Store(root)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.unknown: list[str] = []
        self.created: list[tuple[str, dict]] = []  # (path, body) of every create request
        self.commits: list[tuple] = []
        self.lfs_puts = 0
        self.hold_after: int | None = None
        self.cut_downloads = 0
        self.holding, self.released = threading.Event(), threading.Event()

    def release(self) -> None:
        self.hold_after = None
        self.released.set()

    def client_env(self, home: Path) -> dict:
        """The environment of a process that talks to this Hub as a user's would: online, with a token,
        git-lfs uploads (no Xet) and a Hub cache of its own in ``home``."""
        import os

        # Without the bar switches an in-process CLI command of an earlier test left in this worker's
        # environment: a user's process decides them itself (tests/test_library_bars.py).
        quiet = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")
        return {
            **{k: v for k, v in os.environ.items() if k not in quiet},
            "HF_ENDPOINT": self.url,
            "HF_HUB_DISABLE_XET": "1",
            "HF_TOKEN": "hf_test",
            "HF_HUB_OFFLINE": "0",
            "HF_DATASETS_OFFLINE": "0",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HOME": str(home),
        }

    def __enter__(self) -> HubServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.released.set()
        self.shutdown()
        self.server_close()
