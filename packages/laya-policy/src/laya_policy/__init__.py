"""laya-policy."""

from importlib.metadata import version

__version__ = version("laya-policy")  # one home: the package's pyproject.toml
