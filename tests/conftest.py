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


def _ignored_and_blocked() -> tuple[int, int]:
    """This process's ignored signals and its main thread's blocked ones, as the kernel has them (a
    library's C code changes them without Python's ``signal.getsignal`` seeing it)."""
    with open("/proc/self/status") as f:
        fields = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
    return int(fields["SigIgn"], 16), int(fields["SigBlk"], 16)


@pytest.fixture(autouse=True)
def signals_left_as_found():
    """Fails a test that leaves this process ignoring or blocking a signal it did not, or leaves the
    kernel's SIGINT, SIGTERM or SIGHUP disagreeing with Python's table, and puts it back first:
    whatever later tests start inherits what this process ignores, and a CLI started deaf to Ctrl-C or
    SIGHUP ignores the very signal a later test sends it (see ``tests/processes.py:as_from_a_terminal``).
    The disagreement is C code under Python's feet: polars' import did it (its own SIGINT handler)
    until ``atari_data.layout.stats`` put SIGINT back; so the kernel's SIGINT handler is compared too,
    not only whether it ignores. Not SIGTERM's: Ray's core (``_raylet.so``) installs its own in a
    driver while tasks run, under the handler ``ray.init`` set through Python (the Ray tests)."""
    import signal

    from atari_data.signals import handler_address

    before = _ignored_and_blocked()
    numbers = range(1, signal.NSIG)
    handlers = {n: signal.getsignal(n) for n in numbers if n not in (signal.SIGKILL, signal.SIGSTOP)}
    sigint_at = handler_address(signal.SIGINT)
    yield
    ignored, blocked = _ignored_and_blocked()
    changed = []
    for n in (n for n in numbers if (ignored & ~before[0]) >> (n - 1) & 1):
        name = signal.Signals(n).name if n in set(signal.Signals) else str(n)
        changed.append(f"ignoring {name} (Python's own table said {signal.getsignal(n)!r})")
        signal.signal(n, handlers[n] if handlers.get(n) not in (None, signal.SIG_IGN) else signal.SIG_DFL)
    if blocked != before[1]:
        changed.append("with other signals blocked")
        signal.pthread_sigmask(signal.SIG_SETMASK, {n for n in numbers if before[1] >> (n - 1) & 1})
    ignored = _ignored_and_blocked()[0]
    for n in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        python = signal.getsignal(n)
        disagrees = (python is signal.SIG_IGN) != bool(ignored >> (n - 1) & 1)
        swapped = n == signal.SIGINT and python == handlers[n] and handler_address(n) != sigint_at
        if python is not None and (disagrees or swapped):
            changed.append(f"with the kernel's {n.name} not what Python's table says ({python!r})")
            signal.signal(n, python)  # the kernel told again what Python's table says
    if changed:
        pytest.fail(f"the test left this process {' and '.join(changed)}; put back", pytrace=False)


@pytest.fixture(scope="session")
def small_pong(tmp_path_factory):
    """Makes a small two-frame Pong layout from real ALE play: (name, train records, val records,
    decisions an episode) -> its root. One episode a split, none for baselines."""
    from atari_data.produce.generate import GenerateConfig, generate_game

    def make(name: str, train: int, val: int, cap: int):
        root = tmp_path_factory.mktemp(name)
        cfg = GenerateConfig(
            root=str(root),
            train_frames=train,
            val_frames=val,
            min_train_episodes=1,
            decision_cap=cap,
            baseline_episodes=0,
        )
        generate_game(cfg, "Pong")
        return root

    return make


@pytest.fixture(scope="session")
def pong_data(small_pong):
    """The shared small Pong layout, read-only (copy it to corrupt it)."""
    return small_pong("pong-data", train=24, val=8, cap=40)


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray instance for every test that needs one: starting Ray costs ~5 s each time."""
    import signal

    ray = pytest.importorskip("ray", reason="Ray is an optional extra ([ray])")
    before = signal.getsignal(signal.SIGTERM)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    # ray.init set a SIGTERM handler through Python; ray.shutdown puts the kernel's back to the default
    # under Python's feet, and the signal guard fails the test whose teardown that happens in
    signal.signal(signal.SIGTERM, before)


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
