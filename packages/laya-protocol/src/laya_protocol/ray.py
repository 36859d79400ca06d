"""Ray, started or joined the same way by every package that fans work out over it."""

from __future__ import annotations

import os


def connect(num_cpus: int | None = None):
    """The ``ray`` module, connected to ``RAY_ADDRESS`` when set, else to a local instance it starts
    (of ``num_cpus`` CPUs; all of this machine's by default). Raises ImportError without Ray.

    Workers use this interpreter and its packages: under ``uv run``, Ray would otherwise rebuild a uv
    environment for them from a copy of the working directory. Ray reads that switch once, when it is
    first imported, so it is set before the import."""
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    import ray

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), num_cpus=num_cpus, log_to_driver=False, include_dashboard=False)
    return ray
