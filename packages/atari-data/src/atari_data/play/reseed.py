"""A seeded reset without reloading the ROM.

gymnasium's ``AtariEnv.reset(seed=...)`` reloads the ROM to seed ALE's random numbers: about 80 ms,
most of it ale-py rebuilding a colour table that never changes, where an episode of 500 decisions
plays in about 200 ms. Right after a reset the emulator is the same whatever the seed, except ALE's
Mersenne Twister, freshly seeded and not yet drawn from. So a reset can restore the state a real one
left, with only the twister's words written for the new seed (about 4 ms).

The shortcut is trusted only once it has been checked in this process: the second seeded reset is
made both ways, and the two must agree byte for byte (the emulator's whole state and the screen).
Until then, and for good if they disagree (another ale-py, a ROM whose reset draws random numbers),
every reset reloads the ROM.
"""

from __future__ import annotations

_LENGTH = 4  # ALE's serializer writes a string as a little-endian int32 length and its bytes


def twister_text(seed: int) -> bytes:
    """How ALE serialises a ``std::mt19937`` just seeded with ``seed``: its 624 words (the
    standard's seeding recurrence) and its position, past the last word."""
    words = [seed & 0xFFFFFFFF]
    for i in range(1, 624):
        words.append((1812433253 * (words[-1] ^ (words[-1] >> 30)) + i) & 0xFFFFFFFF)
    return (" ".join(map(str, words)) + " 624").encode()


def _length(state: bytes | bytearray, at: int) -> int:
    return int.from_bytes(state[at : at + _LENGTH], "little")


class Reseeder:
    """Seeded resets of one ``AtariEnv``; :attr:`trusted` says whether the shortcut is in use."""

    def __init__(self, env, shortcut: bool = True):
        self.env = env
        self.ale = env.ale
        self.trusted: bool | None = None if shortcut else False  # None: not checked yet
        self._before = bytearray()  # the state a real reset left, around the twister's text
        self._after = b""
        self._lengths: list[int] = []  # where in _before a string that ends with the twister starts
        self._kept = 0  # the kept twister's length

    def reset(self, seed: int) -> None:
        """What ``env.reset(seed=seed)`` does, in the way that is trusted."""
        if self.trusted is False or not self._before:
            ale_seed = self._real(seed)
            if self.trusted is None:
                self._keep(ale_seed)
            return
        quick = self._quick(seed)
        if quick is None:
            self._real(seed)
        elif self.trusted is None:  # the check: a real reset after the quick one, compared
            self._real(seed)
            self.trusted = quick == self._now()

    def _real(self, seed: int) -> int:
        self.env.reset(seed=seed)
        return self.ale.getInt("random_seed") & 0xFFFFFFFF

    def _now(self) -> tuple[bytes, bytes]:
        return self._state(), self.ale.getScreenRGB().tobytes()

    def _state(self) -> bytes:
        return bytes(self.ale.cloneState(include_rng=True).serialize())

    def _keep(self, ale_seed: int) -> None:
        """Keep the state a real reset seeded with ``ale_seed`` left, split around its twister, and
        where the lengths of the strings that end with the twister are (the twister's own and the
        emulator's, nested in the state): a new seed's twister may be longer or shorter."""
        if ale_seed == 0:
            return  # seeded by the clock, not by its seed: keep the next one
        state, text = self._state(), twister_text(ale_seed)
        at = state.find(text)
        end = at + len(text)
        ends_here = [o for o in range(at - _LENGTH + 1) if _length(state, o) == end - o - _LENGTH]
        if state.count(text) != 1 or not ends_here or ends_here[-1] != at - _LENGTH:
            self.trusted = False  # not the layout this module knows: always reload
            return
        self._before, self._after, self._lengths = bytearray(state[:at]), state[end:], ends_here
        self._kept = len(text)

    def _quick(self, seed: int) -> tuple[bytes, bytes] | None:
        """Reset to the kept state with the twister of ``seed``; returns the state and screen, or
        None, having done nothing, where ALE would not seed so (0 asks it for a time-based seed)."""
        import ale_py

        _np_seed, ale_seed = self.env.seed_game(seed)  # gymnasium's own seeding, without the reload
        if int(ale_seed) == 0:
            return None
        text = twister_text(int(ale_seed))
        before = bytearray(self._before)
        for o in self._lengths:
            before[o : o + _LENGTH] = (_length(self._before, o) + len(text) - self._kept).to_bytes(_LENGTH, "little")
        state = bytes(before) + text + self._after
        self.ale.reset_game()  # what a state does not carry (the sticky last action, the screen)
        self.ale.restoreState(ale_py.ALEState(state))
        return self._now()
