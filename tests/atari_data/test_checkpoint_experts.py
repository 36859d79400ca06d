"""Checkpoint experts against independent numpy forward passes in the upstream layouts.

The checkpoints are written here in exactly the upstream formats, with random weights: CleanRL's
Flax msgpack (`to_bytes([vars(args), [network, actor, critic]])`, arrays as ExtType 1) and SB3's
zip (`policy.pth` state dict beside a JSON `data` member)."""

import io
import json
import zipfile

import msgpack
import numpy as np
import pytest
import torch

from atari_data.errors import AtariDataError
from atari_data.layout import GameDir
from atari_data.layout.validate import validate
from atari_data.play.ale import AtariGame, play_episode
from atari_data.play.experts.checkpoint import checkpoint_expert, preprocess
from atari_data.produce.generate import generate_game

from .conftest import small_config

RNG = np.random.default_rng(0)


# -- upstream writers ---------------------------------------------------------------------------------


def flax_to_bytes(tree) -> bytes:
    """What flax.serialization.to_bytes writes: lists become {"0": ...} maps, arrays ExtType 1."""

    def state(x):
        if isinstance(x, (list, tuple)):
            return {str(i): state(v) for i, v in enumerate(x)}
        if isinstance(x, dict):
            return {k: state(v) for k, v in x.items()}
        return x

    def default(o):
        if isinstance(o, np.ndarray):
            return msgpack.ExtType(1, msgpack.packb((o.shape, o.dtype.name, o.tobytes("C")), use_bin_type=True))
        raise TypeError(type(o))

    return msgpack.packb(state(tree), default=default, use_bin_type=True)


def w(*shape, scale=0.05):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def conv_p(kh, kw, cin, cout):
    return {"kernel": w(kh, kw, cin, cout), "bias": w(cout)}


def dense_p(i, o):
    return {"kernel": w(i, o), "bias": w(o)}


def cleanrl_nature(n_actions):
    return {
        "params": {
            "Conv_0": conv_p(8, 8, 4, 32),
            "Conv_1": conv_p(4, 4, 32, 64),
            "Conv_2": conv_p(3, 3, 64, 64),
            "Dense_0": dense_p(3136, 512),
        }
    }


def cleanrl_impala():
    p, cin = {}, 4
    for i, c in enumerate((16, 32, 32)):
        p[f"ConvSequence_{i}"] = {
            "Conv_0": conv_p(3, 3, cin, c),
            **{f"ResidualBlock_{r}": {"Conv_0": conv_p(3, 3, c, c), "Conv_1": conv_p(3, 3, c, c)} for r in (0, 1)},
        }
        cin = c
    p["Dense_0"] = dense_p(3872, 256)
    return {"params": p}


def write_cleanrl(path, network, hidden, n_actions, env_id):
    args = {"env_id": env_id, "exp_name": path.stem, "seed": 1, "total_timesteps": 10_000_000}
    actor = {"params": {"Dense_0": dense_p(hidden, n_actions)}}
    critic = {"params": {"Dense_0": dense_p(hidden, 1)}}
    path.write_bytes(flax_to_bytes([args, [network, actor, critic]]))


def write_sb3(path, n_actions, dqn=False):
    sd = {}
    pre = "q_net.features_extractor" if dqn else "features_extractor"
    for i, (cin, cout, k) in zip((0, 2, 4), ((4, 32, 8), (32, 64, 4), (64, 64, 3)), strict=True):
        sd[f"{pre}.cnn.{i}.weight"] = torch.from_numpy(w(cout, cin, k, k))
        sd[f"{pre}.cnn.{i}.bias"] = torch.from_numpy(w(cout))
    sd[f"{pre}.linear.0.weight"] = torch.from_numpy(w(512, 3136))
    sd[f"{pre}.linear.0.bias"] = torch.from_numpy(w(512))
    head = "q_net.q_net.0" if dqn else "action_net"
    sd[f"{head}.weight"] = torch.from_numpy(w(n_actions, 512))
    sd[f"{head}.bias"] = torch.from_numpy(w(n_actions))
    if not dqn:
        sd["value_net.weight"], sd["value_net.bias"] = torch.from_numpy(w(1, 512)), torch.from_numpy(w(1))
    buf = io.BytesIO()
    torch.save(sd, buf)
    data = {
        "policy_class": {":type:": "<class 'abc.ABCMeta'>", ":serialized:": "gAWVOwAAAAAAAACMH3N0YWJsZQ=="},
        "action_space": {":type:": "<class 'gymnasium.spaces.discrete.Discrete'>", "n": n_actions},
    }
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("data", json.dumps(data))
        z.writestr("policy.pth", buf.getvalue())
        z.writestr("policy.optimizer.pth", b"")
        z.writestr("pytorch_variables.pth", b"")
        z.writestr("_stable_baselines3_version", "2.3.0")
        z.writestr("system_info.txt", "OS: test")
    return sd


# -- independent numpy forward passes, in the original layouts -----------------------------------------


def conv_nhwc(x, kernel, bias, stride, pad):
    """x [N,H,W,C], kernel HWIO; pad ((top, bottom), (left, right))."""
    x = np.pad(x, ((0, 0), pad[0], pad[1], (0, 0)))
    kh, kw = kernel.shape[:2]
    oh, ow = (x.shape[1] - kh) // stride + 1, (x.shape[2] - kw) // stride + 1
    out = np.zeros((x.shape[0], oh, ow, kernel.shape[3]))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, i : i + stride * oh : stride, j : j + stride * ow : stride, :]
            out += patch @ kernel[i, j]
    return out + bias


def maxpool_same(x):
    out_h = -(-x.shape[1] // 2)
    total = max((out_h - 1) * 2 + 3 - x.shape[1], 0)
    lo, hi = total // 2, total - total // 2
    x = np.pad(x, ((0, 0), (lo, hi), (lo, hi), (0, 0)), constant_values=-np.inf)
    oh = (x.shape[1] - 3) // 2 + 1
    return np.max([x[:, i : i + 2 * oh : 2, j : j + 2 * oh : 2, :] for i in range(3) for j in range(3)], axis=0)


relu = lambda a: np.maximum(a, 0)  # noqa: E731


def flax_nature_logits(net, actor, obs):
    x = obs.transpose(0, 2, 3, 1) / 255.0
    p = net["params"]
    for name, s in (("Conv_0", 4), ("Conv_1", 2), ("Conv_2", 1)):
        x = relu(conv_nhwc(x, p[name]["kernel"], p[name]["bias"], s, ((0, 0), (0, 0))))
    x = relu(x.reshape(len(x), -1) @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"])
    return x @ actor["params"]["Dense_0"]["kernel"] + actor["params"]["Dense_0"]["bias"]


def flax_impala_logits(net, actor, obs):
    x = obs.transpose(0, 2, 3, 1) / 255.0
    p = net["params"]
    same = ((1, 1), (1, 1))
    for i in range(3):
        q = p[f"ConvSequence_{i}"]
        x = maxpool_same(conv_nhwc(x, q["Conv_0"]["kernel"], q["Conv_0"]["bias"], 1, same))
        for r in (0, 1):
            b = q[f"ResidualBlock_{r}"]
            h = conv_nhwc(relu(x), b["Conv_0"]["kernel"], b["Conv_0"]["bias"], 1, same)
            x = x + conv_nhwc(relu(h), b["Conv_1"]["kernel"], b["Conv_1"]["bias"], 1, same)
    x = relu(relu(x).reshape(len(x), -1) @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"])
    return x @ actor["params"]["Dense_0"]["kernel"] + actor["params"]["Dense_0"]["bias"]


def sb3_logits(sd, obs, dqn=False):
    pre = "q_net.features_extractor" if dqn else "features_extractor"
    x = obs / 255.0  # NCHW, OIHW kernels: convert to the NHWC helper's layout only for the arithmetic
    x = x.transpose(0, 2, 3, 1)
    for i, s in ((0, 4), (2, 2), (4, 1)):
        k = sd[f"{pre}.cnn.{i}.weight"].numpy().transpose(2, 3, 1, 0)
        x = relu(conv_nhwc(x, k, sd[f"{pre}.cnn.{i}.bias"].numpy(), s, ((0, 0), (0, 0))))
    x = x.transpose(0, 3, 1, 2).reshape(len(x), -1)  # torch flattens C, H, W
    x = relu(x @ sd[f"{pre}.linear.0.weight"].numpy().T + sd[f"{pre}.linear.0.bias"].numpy())
    head = "q_net.q_net.0" if dqn else "action_net"
    return x @ sd[f"{head}.weight"].numpy().T + sd[f"{head}.bias"].numpy()


def real_stacks(game, keep, grey, n=6):
    """Observation stacks from real ALE play, made the way the expert makes them."""
    g = AtariGame(game, keep=keep)
    obs, stacks = [], []
    rng = np.random.default_rng(1)
    for _ in play_episode(g, 7, lambda d: int(rng.integers(len(g.actions))), 40):
        o = preprocess(g.last_two, grey)
        obs = obs[-3:] + [o] if obs else [o] * 4
        stacks.append(np.stack(obs))
    return np.stack(stacks[-n:])


# A read-only array made a tensor warned on the user's terminal (torch: writing to it is undefined).
@pytest.mark.filterwarnings("error:The given NumPy array is not writable")
@pytest.mark.parametrize("arch", ["nature", "impala"])
def test_cleanrl_logits_match_numpy_reference(tmp_path, arch):
    net = cleanrl_nature(4) if arch == "nature" else cleanrl_impala()
    hidden = 512 if arch == "nature" else 256
    actor = {"params": {"Dense_0": dense_p(hidden, 4)}}
    path = tmp_path / f"ppo_{arch}.cleanrl_model"
    critic = {"params": {"Dense_0": dense_p(hidden, 1)}}
    path.write_bytes(flax_to_bytes([{"env_id": "Breakout-v5"}, [net, actor, critic]]))
    expert = checkpoint_expert("cleanrl", str(path), "Breakout")
    obs = real_stacks("Breakout", "grey", "ale")
    ref = (flax_nature_logits if arch == "nature" else flax_impala_logits)(net, actor, obs.astype(np.float64))
    got = expert.net(torch.from_numpy(obs)).detach().numpy()
    assert np.abs(got - ref).max() < 1e-4 * max(1, np.abs(ref).max())
    assert np.ptp(ref) > 0, "real frames give different logits"


@pytest.mark.parametrize("dqn", [False, True])
def test_sb3_logits_match_numpy_reference(tmp_path, dqn):
    path = tmp_path / "model.zip"
    sd = write_sb3(path, 6, dqn=dqn)
    expert = checkpoint_expert("sb3", str(path), "Pong")
    assert expert.q_values == dqn
    obs = real_stacks("Pong", "rgb", "opencv")
    ref = sb3_logits(sd, obs.astype(np.float64), dqn=dqn)
    got = expert.net(torch.from_numpy(obs)).detach().numpy()
    assert np.abs(got - ref).max() < 1e-4 * max(1, np.abs(ref).max())


def test_expert_probs_follow_the_episode(tmp_path):
    path = tmp_path / "model.zip"
    write_sb3(path, 6)
    expert = checkpoint_expert("sb3", str(path), "Pong")
    g = AtariGame("Pong", keep=expert.frames)
    expert.reset()
    seen = []
    for _ in play_episode(g, 3, lambda d: int(np.argmax(expert.probs(g))), 20):
        p = expert.probs(g)
        seen.append(p)
    assert all(abs(p.sum() - 1) < 1e-9 and p.shape == (6,) for p in seen)


def test_generate_with_a_cleanrl_expert(tmp_path):
    path = tmp_path / "ppo.cleanrl_model"
    write_cleanrl(path, cleanrl_nature(4), 512, 4, "Breakout-v5")
    cfg = small_config(tmp_path / "data", expert=f"cleanrl:{path}", train_frames=40, val_frames=10, decision_cap=60)
    meta = generate_game(cfg, "Breakout")
    assert meta["baselines"]["expert"] == f"cleanrl:{path}"
    assert validate(tmp_path / "data", images=True).ok
    rec = next(GameDir(tmp_path / "data", "expert2f", "Breakout").records())
    assert len(rec["target"]) == 4


def test_wrong_action_count_and_wrong_game_are_refused(tmp_path):
    path = tmp_path / "m.zip"
    write_sb3(path, 9)
    with pytest.raises(AtariDataError, match=r"has 9 actions but Pong's minimal set has 6"):
        checkpoint_expert("sb3", str(path), "Pong")
    c = tmp_path / "x.cleanrl_model"
    write_cleanrl(c, cleanrl_nature(6), 512, 6, "Pong-v5")
    with pytest.raises(AtariDataError, match="was trained on Pong-v5, not Breakout"):
        checkpoint_expert("cleanrl", str(c), "Breakout")


def test_broken_checkpoints_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(AtariDataError, match="is not an SB3 model zip"):
        checkpoint_expert("sb3", str(bad), "Pong")
    junk = tmp_path / "junk.cleanrl_model"
    junk.write_bytes(msgpack.packb({"0": {}, "1": {"0": 3}}))
    with pytest.raises(AtariDataError, match="is not a CleanRL Flax checkpoint"):
        checkpoint_expert("cleanrl", str(junk), "Pong")
    with pytest.raises(AtariDataError, match="does not exist"):
        checkpoint_expert("cleanrl", str(tmp_path / "missing"), "Pong")


def test_hub_offline_names_the_repo_and_the_local_path():
    with pytest.raises(AtariDataError, match=r"cleanrl/Breakout-v5-ppo-seed1.*cleanrl:PATH"):
        checkpoint_expert("hub", "cleanrl/Breakout-v5-ppo-seed1", "Breakout")
