"""Package boundaries (DESIGN.md) and no import cycles, read from the source itself."""

import ast
from pathlib import Path

import pytest

SRC = {p.parent.name: p for p in Path(__file__).parents[1].glob("packages/*/src/*/__init__.py")}
MAY_IMPORT = {
    "laya_protocol": set(),
    "atari_data": {"laya_protocol"},
    "laya_eval": {"laya_protocol"},
    "laya_policy": {"laya_protocol", "atari_data", "laya_eval"},
}


def _modules(package: str) -> dict[str, Path]:
    root = SRC[package].parent
    out = {}
    for f in root.rglob("*.py"):
        parts = f.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(path: Path, module: str, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = ast.walk(tree) if not top_level_only else _top_level(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                pkg = module.split(".")[: -node.level] if not path.name == "__init__.py" else module.split(".")
                base = ".".join(pkg + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return found


def _top_level(tree):
    """Imports run when the module is imported: not those inside functions or classes."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def test_every_package_is_listed():
    assert set(SRC) == set(MAY_IMPORT)


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_packages_import_only_what_they_may(package):
    bad = []
    for module, path in _modules(package).items():
        for name in _imports(path, module, top_level_only=False):
            top = name.split(".")[0]
            if top in MAY_IMPORT and top != package and top not in MAY_IMPORT[package]:
                bad.append(f"{module} imports {name}")
    assert not bad


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_no_import_cycles(package):
    modules = _modules(package)
    graph = {
        m: {n for n in _imports(p, m, top_level_only=False) if n in modules and n != m} for m, p in modules.items()
    }
    # Importing a submodule also imports its packages' __init__; those are part of the edge.
    state: dict[str, int] = {}
    cycles = []

    def visit(m, path):
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(" -> ".join([*path[path.index(n) :], n]))
            elif n not in state:
                visit(n, [*path, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles


#: Imports a package makes without declaring their distribution, and why that is right.
UNDECLARED = {
    # touched only when the caller has already imported them, to quiet their bars
    ("laya_protocol.bars", "datasets"): "already imported",
    ("laya_protocol.bars", "huggingface_hub"): "already imported",
    ("laya_protocol.bars", "transformers"): "already imported",
    # joined only by a caller whose own `ray` extra installs it
    ("laya_protocol.ray", "ray"): "the callers' extra",
    # huggingface_hub's own HTTP client, whose errors it raises: its version is the Hub library's
    ("atari_data.errors", "httpx2"): "huggingface_hub's client",
    ("atari_data.play.experts.checkpoint", "httpx2"): "huggingface_hub's client",
}


def _declared(project_dir: Path, extra: str | None = None) -> set[str]:
    """The distributions a package's pyproject declares (with ``extra``, that extra's), an extra of
    one of ours (``laya-protocol[vizdoom]``) read as what that extra declares."""
    import re

    tomllib = pytest.importorskip("tomllib", reason="pyproject files are read with tomllib, Python 3.11's")
    project = tomllib.loads((project_dir / "pyproject.toml").read_text())["project"]
    wanted = project.get("optional-dependencies", {}).get(extra, []) if extra else project.get("dependencies", [])
    if extra is None:
        wanted = wanted + [d for ds in project.get("optional-dependencies", {}).values() for d in ds]
    out = set()
    for requirement in wanted:
        name, extras = re.match(r"([A-Za-z0-9_.-]+)(?:\[([^\]]*)\])?", requirement).groups()
        name = name.lower().replace("_", "-")
        out.add(name)
        ours = name.replace("-", "_")
        for e in (extras or "").split(","):
            if e.strip() and ours in SRC:
                out |= _declared(SRC[ours].parents[2], e.strip())
    return out


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_every_third_party_import_is_a_declared_dependency(package):
    """An import that works only because another dependency pulls its distribution in (numpy under
    ale-py) breaks the day that dependency drops it: each package declares what it imports itself."""
    import sys
    from importlib.metadata import packages_distributions

    declared = _declared(SRC[package].parents[2]) | {p.replace("_", "-") for p in MAY_IMPORT}
    providers = packages_distributions()
    missing = set()
    for module, path in _modules(package).items():
        for name in _imports(path, module, top_level_only=False):
            top = name.split(".")[0]
            if not top or top in sys.stdlib_module_names or top in MAY_IMPORT or (module, top) in UNDECLARED:
                continue
            dists = {d.lower().replace("_", "-") for d in providers.get(top, [top])}
            if not dists & declared:
                missing.add(f"{module} imports {top} ({', '.join(sorted(dists))})")
    assert not missing, "\n".join(sorted(missing))
