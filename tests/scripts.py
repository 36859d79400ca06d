"""Load a script of tools/ as a module, so a test calls its functions (the scripts are not a package)."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """``relative`` under the repository root, e.g. ``tools/bench/load.py``."""
    path = ROOT / relative
    if str(path.parent) not in sys.path:  # as when it runs: its folder's helpers import (tools/bench/_timing.py)
        sys.path.append(str(path.parent))
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
