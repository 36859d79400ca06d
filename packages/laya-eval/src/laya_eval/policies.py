"""How a policy plugs into laya-eval.

A policy is any callable that takes a :class:`Batch` and returns, for its ``n`` rows, either
actions (integers ``[n]``, indices into ``batch.actions``) or probabilities (floats ``[n, A]``;
then ``--greedy``, the default, takes the top one and ``--sample`` draws). It may also define
``reset(game, actions)``, called before each game, and ``close()``.

``--policy`` finds one by:
  * ``NAME[:ARG]``: the ``laya_eval.policies`` entry point NAME, called as ``factory(ARG, **kwargs)``;
    built in: ``random``, ``noop``, ``constant:ACTION``; ``laya:CKPT`` once laya-policy is installed;
  * ``module:attr``: a factory in an importable module, called as ``factory(**kwargs)``;
  * ``cmd:COMMAND``: a subprocess speaking the stdio protocol (:mod:`laya_eval.stdio`), any language.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

import numpy as np

from laya_eval.batch import Batch
from laya_eval.errors import EvalError

GROUP = "laya_eval.policies"


class RandomPolicy:
    """Uniform over the game's actions, from its own seeded random stream."""

    def __init__(self, arg: str | None = None, seed: int = 0):
        self.seed = int(arg) if arg else seed
        self.rng = np.random.default_rng(self.seed)

    def reset(self, game: str, actions) -> None:
        self.rng = np.random.default_rng([self.seed, *game.encode()])

    def __call__(self, batch: Batch) -> np.ndarray:
        return self.rng.integers(len(batch.actions), size=len(batch))


def constant_button(spec: str) -> str | None:
    """The button a ``constant:NAME`` policy spec presses (as ConstantPolicy names it), or None for any
    other spec: what `run` and `doom` refuse before play when a game lacks it."""
    name, _, arg = spec.partition(":")
    return arg.upper() if name == "constant" and arg else None


class ConstantPolicy:
    """Always the same action, by name (``constant:FIRE``). `laya-eval run` refuses a game that lacks it
    before playing; called directly, it plays NOOP there."""

    def __init__(self, arg: str | None = None):
        if not arg:
            raise EvalError("constant needs an action name, e.g. constant:FIRE", field="--policy")
        self.name = arg.upper()

    def __call__(self, batch: Batch) -> np.ndarray:
        index = batch.actions.index(self.name) if self.name in batch.actions else 0
        return np.full(len(batch), index)


class NoopPolicy(ConstantPolicy):
    def __init__(self, arg: str | None = None):
        super().__init__("NOOP")


POLICY_TIMEOUT = 60.0  # seconds a cmd: policy may take per call, by default
#: The longest a cmd: policy may be given per call (11.6 days): past ~1e9 s the waits overflow.
MAX_TIMEOUT = 1_000_000


def timeout_problem(timeout) -> str | None:
    """Why ``timeout`` is no per-call limit for a cmd: policy, or None."""
    if isinstance(timeout, (int, float)) and 0 < timeout <= MAX_TIMEOUT:  # NaN fails both
        return None
    return f"{timeout} (expected a positive number of seconds, at most {MAX_TIMEOUT:,})"


def kwargs_problem(spec: str, kwargs: dict | None) -> str | None:
    """Why ``kwargs`` cannot go to the policy ``spec``, or None: a cmd: policy is a command line, and
    takes none (the results would record arguments nothing used)."""
    if kwargs and spec.startswith("cmd:"):
        return "a cmd: policy takes no keyword arguments; give them to its command line"
    return None


def load_policy(spec: str, kwargs: dict | None = None, timeout: float = POLICY_TIMEOUT):
    """Resolve a ``--policy`` spec to a policy object."""
    if problem := kwargs_problem(spec, kwargs):
        raise EvalError(problem, field="--policy-kwargs")
    kwargs = kwargs or {}
    if spec.startswith("cmd:"):
        from laya_eval.stdio import StdioPolicy

        return StdioPolicy(spec[4:], timeout=timeout)
    name, _, arg = spec.partition(":")
    found = {ep.name: ep for ep in entry_points(group=GROUP)}
    if name in found:
        try:
            factory = found[name].load()
        except ImportError as e:
            raise EvalError(
                f"the {name!r} policy is registered but cannot be imported ({e})", field="--policy"
            ) from None
        return _create(spec, factory, arg or None, **kwargs)
    if arg:
        try:
            module = _import_here_too(name)
        except ImportError as e:
            raise EvalError(
                f"cannot import {name!r} ({e}); registered policies: {', '.join(sorted(found))}", field="--policy"
            ) from None
        factory = getattr(module, arg, None)
        if factory is None:
            raise EvalError(f"module {name!r} has no attribute {arg!r}", field="--policy")
        return _create(spec, factory, **kwargs)
    raise EvalError(
        f"unknown policy {spec!r}; registered: {', '.join(sorted(found))}; or module:attr, or cmd:COMMAND",
        field="--policy",
    )


def _import_here_too(name: str):
    """``name`` imported as installed, else from the current folder, as ``python -m`` would find it
    (a console script's path does not hold the current folder: a module beside the user was not found)."""
    import os
    import sys

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        here = os.getcwd()
        if e.name != name.partition(".")[0] or here in sys.path:
            raise
        sys.path.append(here)  # last: an installed module of the same name still wins
        try:
            return importlib.import_module(name)
        finally:
            sys.path.remove(here)


def _create(spec: str, factory, *args, **kwargs):
    try:
        return factory(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - a third-party factory may raise anything; say so on one line
        raise EvalError(f"{spec!r} could not be created: {type(e).__name__}: {e}", field="--policy") from None
