import atexit
import os
import shutil
import sys
import tempfile

# Where PYTHONDONTWRITEBYTECODE is set (this workspace's machines do), every process the tests start
# would compile torch and transformers from source again: ~9 of a CLI's ~19 s. Let this process and
# its children write bytecode, so the compiling is done once a run.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Nothing in the tests may reach a hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
# `datasets` caches what it loads; keep the tests' caches out of the user's home, and remove them after.
_cache = tempfile.mkdtemp(prefix="hf-datasets-cache-")
os.environ["HF_DATASETS_CACHE"] = _cache
atexit.register(shutil.rmtree, _cache, True)
# Ray workers use this interpreter (see tests/test_ray_workers.py); Ray reads this on its first import.
os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray instance for every test that needs one: starting Ray costs ~5 s each time."""
    ray = pytest.importorskip("ray", reason="Ray is an optional extra ([ray])")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def pytest_configure(config):
    # The suite runs on two pytest-xdist workers, one per core (pyproject's addopts): torch's default of
    # one intra-op thread per core would have the two workers' threads spin against each other.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"  # and for the processes the tests start
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(items):
    """The READMEs' examples first (the longest tests: 15-110 s each), so the two workers start them
    while the rest is still left to balance the load; the tests that use Ray last, so its idle
    processes do not share the cores with the rest."""

    def order(item) -> int:
        if "ray_local" in getattr(item, "fixturenames", ()):
            return 2
        return 0 if getattr(item, "originalname", None) == "test_readme_examples_run_in_order" else 1

    items.sort(key=order)
