"""Facts that atari-data, laya-policy and laya-eval share, each defined once here.

- :mod:`laya_protocol.protocol`: the evaluation protocol record and its named caps;
- :mod:`laya_protocol.games`: ALE game names and their minimal and full action sets;
- :mod:`laya_protocol.seeds`: episode-number ranges by role;
- :mod:`laya_protocol.names`: split names and baseline key names;
- :mod:`laya_protocol.doom`: the ViZDoom scenario and its labels-buffer expert;

and two helpers every package needs the same: :mod:`laya_protocol.config` (flags from a config
dataclass) and :mod:`laya_protocol.ray` (joining Ray).

It depends on ale-py and numpy only, so the judge can share these facts without importing any
code it judges.
"""
