"""A seeded reset without reloading the ROM.

gymnasium's ``AtariEnv.reset(seed=...)`` reloads the ROM to seed ALE's random numbers: about 80 ms,
most of it ale-py rebuilding a colour table that never changes, where an episode of 500 decisions
plays in about 200 ms. Right after a reset the emulator is the same whatever the seed, except ALE's
Mersenne Twister, freshly seeded and not yet drawn from. So a reset can restore the state a real one
left, with only the twister's words written for the new seed (about 4 ms).

Nothing here is taken on trust. Each emulator checks the shortcut once, at its second seeded reset:
made both ways, the two resets must leave the same saved state and screen, and still the same saved
state after :data:`CHECK_FRAMES` frames of play (a cartridge can hold what its saved state rounds,
and show it only later). Every shortcut reset after that must read back as exactly the state it
wrote. Where any of this fails (another ale-py, a ROM whose reset draws random numbers), every
reset reloads the ROM.
"""

from __future__ import annotations

_LENGTH = 4  # ALE's serializer writes a string as a little-endian int32 length and its bytes
_SYSTEM = 24  # where ALEState's string of the emulator's state (which ends with the twister) starts
_CLOCK_SEED = 0xFFFFFFFF  # random_seed -1: ALE seeds from the clock, not from the number
CHECK_FRAMES = 240  # frames played both ways at the check, cycling through the minimal action set


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
    """Seeded resets of one ``AtariEnv``; :attr:`trusted` says whether the shortcut is in use
    (None until the check)."""

    def __init__(self, env, shortcut: bool = True):
        self.env = env
        self.ale = env.ale
        self.trusted: bool | None = None if shortcut else False
        self._before = bytearray()  # the state a real reset left, up to the twister's text
        self._after = b""  # and after it
        self._kept = 0  # the kept twister text's length

    def reset(self, seed: int) -> None:
        """What ``env.reset(seed=seed)`` does, in the way that is trusted."""
        if self.trusted is False or not self._before:
            ale_seed = self._real(seed)
            if self.trusted is None:
                self._keep(ale_seed)
            return
        quick = self._quick(seed)
        if quick is None:  # a seed ALE does not take as a number, or a state that did not read back
            self._real(seed)
        elif self.trusted is None:  # the check: the same reset made by reloading, compared
            quick_played = self._played()
            self._real(seed)
            same = quick == self._now() and quick_played == self._played()
            self._real(seed)
            self.trusted = same

    def _real(self, seed: int) -> int:
        self.env.reset(seed=seed)
        return self.ale.getInt("random_seed") & 0xFFFFFFFF

    def _state(self) -> bytes:
        return bytes(self.ale.cloneState(include_rng=True).serialize())

    def _now(self) -> tuple[bytes, bytes]:
        return self._state(), self.ale.getScreenRGB().tobytes()

    def _played(self) -> bytes:
        actions = self.ale.getMinimalActionSet()
        for i in range(CHECK_FRAMES):
            self.ale.act(actions[i % len(actions)])
        return self._state()

    def _keep(self, ale_seed: int) -> None:
        """Keep the state a real reset seeded with ``ale_seed`` left, split around its twister,
        where ALE's layout is known: the twister's text right after its length, and the emulator's
        string, which it ends, at :data:`_SYSTEM`."""
        if ale_seed == _CLOCK_SEED:
            return  # keep the next one
        state, text = self._state(), twister_text(ale_seed)
        at = state.find(text)
        if (
            state.count(text) != 1
            or _length(state, at - _LENGTH) != len(text)
            or _length(state, _SYSTEM) != at + len(text) - _SYSTEM - _LENGTH
        ):
            self.trusted = False  # not the layout this module knows: always reload
            return
        self._before, self._after, self._kept = bytearray(state[: at - _LENGTH]), state[at + len(text) :], len(text)

    def _quick(self, seed: int) -> tuple[bytes, bytes] | None:
        """Reset to the kept state with the twister of ``seed``; returns the state and screen, or
        None where ALE would seed it from the clock or the state did not read back as written (the
        shortcut is then dropped for good)."""
        import ale_py

        _np_seed, ale_seed = self.env.seed_game(seed)  # gymnasium's own seeding, without the reload
        if int(ale_seed) == _CLOCK_SEED:
            return None
        text = twister_text(int(ale_seed))
        before = self._before.copy()
        before[_SYSTEM : _SYSTEM + _LENGTH] = (_length(before, _SYSTEM) + len(text) - self._kept).to_bytes(
            _LENGTH, "little"
        )
        state = bytes(before) + len(text).to_bytes(_LENGTH, "little") + text + self._after
        self.ale.reset_game()  # what a state does not carry (the sticky last action, the screen)
        self.ale.restoreState(ale_py.ALEState(state))
        now = self._now()
        if now[0] != state:
            self.trusted = False
            return None
        return now
