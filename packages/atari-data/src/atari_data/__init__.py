"""atari-data."""

from importlib.metadata import version

__version__ = version("atari-data")  # one home: the package's pyproject.toml
