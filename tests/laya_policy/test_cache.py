import numpy as np
import pytest
import torch

from laya_policy.cache import FrameFeatureCache


class Encoder:
    """A deterministic 'vision tower': a random projection of the frame's pixels."""

    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.w = torch.randn(8 * 8 * 3, 16, generator=g)
        self.calls, self.frames = 0, 0

    def __call__(self, frames):
        self.calls += 1
        self.frames += len(frames)
        return torch.as_tensor(frames.reshape(len(frames), -1), dtype=torch.float32) @ self.w


def screens(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, 8, 8, 3), dtype=np.uint8)


def test_cached_and_uncached_agree_and_two_frame_play_hits_half():
    enc, ref = Encoder(), Encoder()
    cache = FrameFeatureCache(enc)
    frames = screens(6)
    prev = frames[:1].repeat(3, 0)
    for t in range(1, 6):  # 3 episodes in lockstep, all on the same trajectory for simplicity
        cur = np.stack([frames[t]] * 3)
        batch = np.concatenate([prev, cur])
        got = cache(batch)
        assert torch.allclose(got, ref(batch), rtol=1e-5, atol=1e-3)  # float32: batch size changes the sums
        prev = cur
    # each step: 6 rows, 2 distinct frames, one of them seen in the previous call
    assert enc.frames == 6 and cache.hit_rate == pytest.approx((30 - 6) / 30)


def test_forced_hash_collision_reencodes_instead_of_returning_a_wrong_feature():
    enc, ref = Encoder(), Encoder()
    cache = FrameFeatureCache(enc, key=lambda f: 42)  # every frame collides
    a, b = screens(2, seed=1)
    first = cache(np.stack([a]))
    second = cache(np.stack([b, a]))
    assert torch.allclose(second[0], ref(np.stack([b]))[0], rtol=1e-5, atol=1e-3), "b is not served a's feature"
    assert torch.allclose(second[1], first[0])
    assert cache.hits == 1 and cache.misses == 2


def test_entries_expire_after_keep_calls():
    enc = Encoder()
    cache = FrameFeatureCache(enc, keep=2)
    a, b, c = screens(3, seed=2)
    cache(np.stack([a]))
    cache(np.stack([b]))
    cache(np.stack([c]))
    cache(np.stack([a]))  # a was last used three calls ago: gone
    assert cache.misses == 4 and cache.hits == 0
    cache(np.stack([a]))
    assert cache.hits == 1
