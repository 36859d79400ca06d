"""Experts from published Atari checkpoints: SB3 rl-zoo zips and CleanRL Flax msgpack files.

Neither format is unpickled: an SB3 zip's ``policy.pth`` is read with
``torch.load(weights_only=True)`` (its ``data`` member, base64 cloudpickle, is never touched), and
a ``.cleanrl_model`` is plain msgpack read with numpy. Both become a torch module.

Each expert sees what it was trained on: the max of the last two emulator frames of a decision,
in grey, resized to 84x84 with INTER_AREA, four decisions stacked, oldest first. SB3's AtariWrapper
greys the RGB max with OpenCV; envpool (CleanRL) takes ALE's own grey screens. Needs the
``experts`` extra (torch, opencv-python-headless).
"""

from __future__ import annotations

import copy
import io
import logging
import zipfile
from collections import deque
from pathlib import Path

import numpy as np

from atari_data import limits
from atari_data.errors import AtariDataError
from atari_data.play.ale import AtariGame
from laya_protocol.errors import cause
from laya_protocol.games import minimal_actions

Q_TEMPERATURE = 0.1  # DQN Q-values become a distribution through softmax(q / this)


def _torch():
    try:
        import torch
    except ImportError:
        raise AtariDataError("checkpoint experts need torch: install atari-data[experts]", field="--expert") from None
    return torch


# -- observation pipelines -------------------------------------------------------------------------


def preprocess(last_two: tuple[np.ndarray, np.ndarray], grey: str) -> np.ndarray:
    """84x84 uint8 observation of one decision from its last two emulator frames.

    ``grey="opencv"``: max of the RGB frames, then OpenCV's RGB-to-grey (SB3's AtariWrapper).
    ``grey="ale"``: frames are ALE grey screens already; their max (envpool).
    """
    import cv2

    a, b = last_two
    if grey == "opencv":
        frame = cv2.cvtColor(np.maximum(a, b), cv2.COLOR_RGB2GRAY)
    else:
        frame = np.maximum(a, b)
    return cv2.resize(frame, (84, 84), interpolation=cv2.INTER_AREA)


# -- networks --------------------------------------------------------------------------------------


def nature_cnn(n_actions: int, flatten: str):
    """The DQN-paper CNN; ``flatten`` is the order its 7x7x64 features were flattened in (chw|hwc)."""
    torch = _torch()
    nn = torch.nn

    class NatureCNN(nn.Module):  # type: ignore[name-defined]  # torch is an optional extra, imported late
        def __init__(self):
            super().__init__()
            self.cnn = nn.Sequential(
                nn.Conv2d(4, 32, 8, 4),
                nn.ReLU(),
                nn.Conv2d(32, 64, 4, 2),
                nn.ReLU(),
                nn.Conv2d(64, 64, 3, 1),
                nn.ReLU(),
            )
            self.linear = nn.Linear(3136, 512)
            self.head = nn.Linear(512, n_actions)

        def forward(self, x):  # x: uint8 [N, 4, 84, 84]
            h = self.cnn(x.float() / 255.0)
            if flatten == "hwc":
                h = h.permute(0, 2, 3, 1)
            return self.head(torch.relu(self.linear(h.flatten(1))))

    return NatureCNN()


def impala_cnn(n_actions: int):
    """Cleanba's IMPALA CNN (channels 16, 32, 32), with Flax's SAME padding reproduced exactly."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    def same_pool(x):
        # Flax SAME pooling pads the far side first: (0, 1) for even sizes, (1, 1) for odd ones.
        pads = []
        for n in (x.shape[3], x.shape[2]):
            total = max((-(-n // 2) - 1) * 2 + 3 - n, 0)
            pads += [total // 2, total - total // 2]
        return F.max_pool2d(F.pad(x, pads, value=float("-inf")), 3, 2)

    class Residual(nn.Module):  # type: ignore[name-defined]  # torch is an optional extra, imported late
        def __init__(self, c):
            super().__init__()
            self.conv0, self.conv1 = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)

        def forward(self, x):
            return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))

    class ConvSequence(nn.Module):  # type: ignore[name-defined]  # torch is an optional extra, imported late
        def __init__(self, c_in, c):
            super().__init__()
            self.conv = nn.Conv2d(c_in, c, 3, padding=1)
            self.res0, self.res1 = Residual(c), Residual(c)

        def forward(self, x):
            return self.res1(self.res0(same_pool(self.conv(x))))

    class Impala(nn.Module):  # type: ignore[name-defined]  # torch is an optional extra, imported late
        def __init__(self):
            super().__init__()
            self.seqs = nn.ModuleList([ConvSequence(4, 16), ConvSequence(16, 32), ConvSequence(32, 32)])
            self.linear = nn.Linear(11 * 11 * 32, 256)
            self.head = nn.Linear(256, n_actions)

        def forward(self, x):
            h = x.float() / 255.0
            for s in self.seqs:
                h = s(h)
            h = torch.relu(h).permute(0, 2, 3, 1).flatten(1)  # Flax flattens H, W, C
            return self.head(torch.relu(self.linear(h)))

    return Impala()


# -- CleanRL: Flax msgpack --------------------------------------------------------------------------


def read_flax_msgpack(data: bytes):
    """Decode Flax ``to_bytes`` output with msgpack and numpy (no JAX): arrays are ExtType 1."""
    import msgpack

    def ext_hook(code, payload):
        if code == 1:
            shape, dtype, raw = msgpack.unpackb(payload, raw=False)
            return np.frombuffer(raw, dtype=np.dtype(dtype)).reshape(shape)
        if code == 3:  # numpy scalar
            dtype, raw = msgpack.unpackb(payload, raw=False)
            return np.frombuffer(raw, dtype=np.dtype(dtype))[0]
        raise ValueError(f"unknown msgpack extension type {code}")

    return msgpack.unpackb(data, ext_hook=ext_hook, raw=False, strict_map_key=False)


def _arr(p, key: str, where: str, name: str) -> np.ndarray:
    value = p.get(key) if isinstance(p, dict) else None
    if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
        raise AtariDataError(
            f"is {type(value).__name__ if value is not None else 'missing'}, expected a float array",
            file=where,
            field=f"{name}.{key}",
        )
    return value


def _conv(module, p, where: str = "", name: str = "conv"):
    kernel = _arr(p, "kernel", where, name)
    if kernel.ndim != 4:
        raise AtariDataError(
            f"has shape {kernel.shape}, expected a 4-d HWIO kernel", file=where, field=f"{name}.kernel"
        )
    _set(module.weight, kernel.transpose(3, 2, 0, 1), where, f"{name}.kernel")
    _set(module.bias, _arr(p, "bias", where, name), where, f"{name}.bias")


def _dense(module, p, where: str = "", name: str = "dense"):
    kernel = _arr(p, "kernel", where, name)
    if kernel.ndim != 2:
        raise AtariDataError(f"has shape {kernel.shape}, expected a 2-d kernel", file=where, field=f"{name}.kernel")
    _set(module.weight, kernel.T, where, f"{name}.kernel")
    _set(module.bias, _arr(p, "bias", where, name), where, f"{name}.bias")


def load_cleanrl(path: Path):
    """(torch module, saved args) from a ``.cleanrl_model`` (Nature or IMPALA CNN)."""
    import msgpack

    try:
        tree = read_flax_msgpack(limits.read_bytes(path, "member", "--expert"))
        args, (network, actor, _critic) = tree["0"], (tree["1"]["0"], tree["1"]["1"], tree["1"]["2"])
        net_p, actor_p = network["params"], actor["params"]
        n_actions = _action_count(int(actor_p["Dense_0"]["kernel"].shape[1]), path, "actor.Dense_0.kernel")
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError, msgpack.UnpackException) as e:
        raise AtariDataError(
            f"is not a CleanRL Flax checkpoint ({type(e).__name__}: {e})", file=str(path), field="--expert"
        ) from None
    where = str(path)
    try:
        if "Conv_0" in net_p:
            net = nature_cnn(n_actions, flatten="hwc")
            for i, j in ((0, 0), (1, 2), (2, 4)):
                _conv(net.cnn[j], net_p[f"Conv_{i}"], where, f"Conv_{i}")
            _dense(net.linear, net_p["Dense_0"], where, "Dense_0")
        elif "ConvSequence_0" in net_p:
            net = impala_cnn(n_actions)
            for i, seq in enumerate(net.seqs):
                p = net_p[f"ConvSequence_{i}"]
                _conv(seq.conv, p["Conv_0"], where, f"ConvSequence_{i}.Conv_0")
                for r, res in enumerate((seq.res0, seq.res1)):
                    block = f"ConvSequence_{i}.ResidualBlock_{r}"
                    _conv(res.conv0, p[f"ResidualBlock_{r}"]["Conv_0"], where, f"{block}.Conv_0")
                    _conv(res.conv1, p[f"ResidualBlock_{r}"]["Conv_1"], where, f"{block}.Conv_1")
            _dense(net.linear, net_p["Dense_0"], where, "Dense_0")
        else:
            raise AtariDataError(
                f"unknown CleanRL network (top-level parameters {sorted(net_p)})", file=where, field="--expert"
            )
        _dense(net.head, actor_p["Dense_0"], where, "actor.Dense_0")
    except (KeyError, TypeError, IndexError, AttributeError) as e:
        raise AtariDataError(
            f"is not a CleanRL Flax checkpoint ({type(e).__name__}: {e})", file=where, field="--expert"
        ) from None
    return net.eval(), args


# -- SB3 rl-zoo zips --------------------------------------------------------------------------------


def load_sb3(path: Path):
    """(torch module, is_q_network) from an SB3 PPO or DQN zip, reading only ``policy.pth``."""
    torch = _torch()
    try:
        with zipfile.ZipFile(path) as z:
            data = limits.zip_member(z, "policy.pth", "member", f"{path}!policy.pth", "--expert")
            pth = io.BytesIO(data)
            limits.check_torch_zip(pth, file=f"{path}!policy.pth", field="--expert")
            state = torch.load(pth, map_location="cpu", weights_only=True)
    except AtariDataError:
        raise
    except Exception as e:  # noqa: BLE001 - zipfile, zlib and torch.load raise many kinds; weights_only runs no code
        raise AtariDataError(
            f"is not an SB3 model zip with a tensors-only policy.pth ({cause(e, 160)})",
            file=str(path),
            field="--expert",
        ) from None
    if not isinstance(state, dict):
        raise AtariDataError(
            f"policy.pth holds a {type(state).__name__}, expected a state dict", file=str(path), field="--expert"
        )
    layouts = (
        ("features_extractor", "action_net", False),  # PPO
        ("pi_features_extractor", "action_net", False),  # PPO, unshared extractors
        ("q_net.features_extractor", "q_net.q_net.0", True),
    )  # DQN
    found = next((lay for lay in layouts if f"{lay[0]}.cnn.0.weight" in state and f"{lay[1]}.weight" in state), None)
    if found is None:
        raise AtariDataError(
            "policy.pth has no Nature-CNN actor or Q-network (expected features_extractor.cnn.* "
            "with action_net.* or q_net.q_net.0.*)",
            file=str(path),
            field="--expert",
        )
    feat, head, is_q = found
    n_actions = _action_count(getattr(state[f"{head}.weight"], "shape", (0,))[0], path, f"{head}.weight")
    net = nature_cnn(n_actions, flatten="chw")
    where = f"{path}!policy.pth"
    for i in (0, 2, 4):
        _set(net.cnn[i].weight, state.get(f"{feat}.cnn.{i}.weight"), where, f"{feat}.cnn.{i}.weight")
        _set(net.cnn[i].bias, state.get(f"{feat}.cnn.{i}.bias"), where, f"{feat}.cnn.{i}.bias")
    _set(net.linear.weight, state.get(f"{feat}.linear.0.weight"), where, f"{feat}.linear.0.weight")
    _set(net.linear.bias, state.get(f"{feat}.linear.0.bias"), where, f"{feat}.linear.0.bias")
    _set(net.head.weight, state.get(f"{head}.weight"), where, f"{head}.weight")
    _set(net.head.bias, state.get(f"{head}.bias"), where, f"{head}.bias")
    return net.eval(), is_q


def _action_count(n: int, path: Path, field: str) -> int:
    """A head's action count, checked before any layer is built from it (a 35 KB file may declare 10^11)."""
    if not 1 <= n <= 18:
        raise AtariDataError(f"declares {n} actions (an ALE game has 1 to 18)", file=str(path), field=field)
    return n


def _set(param, value, where: str, name: str) -> None:
    """Copy a checkpoint tensor into ``param``, refusing (at load, not at play) a missing one, a
    non-tensor, a wrong shape or non-finite values."""
    torch = _torch()
    if isinstance(value, np.ndarray):  # a copy only when read-only (a file's buffer) or strided
        value = torch.from_numpy(np.require(value, requirements=("C_CONTIGUOUS", "WRITEABLE")))
    if not isinstance(value, torch.Tensor) or not (value.is_floating_point() or value.dtype == torch.bfloat16):
        raise AtariDataError(
            f"is {type(value).__name__ if value is not None else 'missing'}, expected a float "
            f"tensor of shape {tuple(param.shape)}",
            file=where,
            field=name,
        )
    if tuple(value.shape) != tuple(param.shape):
        raise AtariDataError(f"has shape {tuple(value.shape)}, expected {tuple(param.shape)}", file=where, field=name)
    if not torch.isfinite(value).all():
        raise AtariDataError("holds NaN or infinite values", file=where, field=name)
    param.data = value.float().clone()


# -- the expert -------------------------------------------------------------------------------------


class CheckpointExpert:
    """A network on a 4-decision stack of 84x84 grey observations."""

    def __init__(self, net, game: str, grey: str, name: str, q_values: bool = False):
        self.net, self.grey, self.name, self.q_values = net, grey, name, q_values
        self.frames = "grey" if grey == "ale" else "rgb"  # what AtariGame must keep of each decision
        self.n = len(minimal_actions(game))
        self.stack: deque = deque(maxlen=4)

    def reset(self) -> None:
        self.stack.clear()

    def fork(self) -> CheckpointExpert:
        """A copy sharing the network, with its own frame stack, for a planner's rollout."""
        twin = copy.copy(self)
        twin.stack = deque(self.stack, maxlen=4)
        return twin

    def probs(self, game: AtariGame) -> np.ndarray:
        torch = _torch()
        assert game.last_two is not None  # the game keeps frames for this expert (``frames`` says which)
        obs = preprocess(game.last_two, self.grey)
        if not self.stack:
            self.stack.extend([obs] * 4)  # an episode starts with copies, as in training
        else:
            self.stack.append(obs)
        with torch.inference_mode():
            out = self.net(torch.from_numpy(np.stack(self.stack)[None]))[0].double()
        if self.q_values:
            out = out / Q_TEMPERATURE
        return torch.softmax(out, 0).numpy()


def checkpoint_expert(kind: str, arg: str, game: str) -> CheckpointExpert:
    if kind == "hub":
        path = _download(arg)
        kind = "cleanrl" if path.suffix == ".cleanrl_model" else "sb3"
    else:
        path = Path(arg)
        if not path.is_file():
            raise AtariDataError("does not exist", file=str(path), field="--expert")
    if kind == "cleanrl":
        net, args = load_cleanrl(path)
        trained_on = str(args.get("env_id", "")) if isinstance(args, dict) else ""
        if trained_on and trained_on.split("-")[0] != game:
            raise AtariDataError(f"was trained on {trained_on}, not {game}", file=str(path), field="--expert")
        expert = CheckpointExpert(net, game, grey="ale", name=f"cleanrl:{path.name}")
    else:
        net, is_q = load_sb3(path)
        expert = CheckpointExpert(net, game, grey="opencv", name=f"sb3:{path.name}", q_values=is_q)
    n_out = net.head.out_features
    if n_out != expert.n:
        raise AtariDataError(
            f"has {n_out} actions but {game}'s minimal set has {expert.n} ({', '.join(minimal_actions(game))})",
            file=str(path),
            field="--expert",
        )
    return expert


def _download(repo: str) -> Path:
    """Fetch the one checkpoint file of a Hub repo (``cleanrl/...`` or ``sb3/...``)."""
    import httpx2  # huggingface_hub's HTTP client: its errors are not OSErrors
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import HFValidationError, OfflineModeIsEnabled

    hint = "download it elsewhere and pass --expert cleanrl:PATH or sb3:PATH"
    # huggingface_hub logs a warning line for each retry; the failure is said once, below.
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)
    try:
        files = HfApi().list_repo_files(repo)
        name = next((f for f in files if f.endswith((".cleanrl_model", ".zip"))), None)
        if name is None:
            raise AtariDataError(f"hub repo {repo} has no .cleanrl_model or .zip file", field="--expert")
        return Path(hf_hub_download(repo, name))
    except (OfflineModeIsEnabled, HFValidationError, OSError, httpx2.HTTPError) as e:  # unreachable, refused, 404
        raise AtariDataError(f"cannot fetch hub repo {repo} ({type(e).__name__}); {hint}", field="--expert") from None
    finally:
        hub_log.setLevel(level)
