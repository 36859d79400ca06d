"""laya-eval."""

from importlib.metadata import version

__version__ = version("laya-eval")  # one home: the package's pyproject.toml
