"""The exceptions this package raises, and how every package words a foreign one in its one-line errors."""


class UnknownName(ValueError):
    """A game, scenario or action set that does not exist; ``close`` holds the nearest real names."""

    def __init__(self, message: str, close: tuple[str, ...] = ()):
        super().__init__(message + (f"; did you mean {', '.join(close)}?" if close else ""))
        self.close = close


def cause(e: BaseException, width: int = 200) -> str:
    """``e`` for a one-line error: its type and the first line of its message, at most ``width``
    characters. A pickle refused by ``torch.load(weights_only=True)`` is named for what it is: torch's
    own first line is advice to load the file anyway, and cut short it lost its warning."""
    import pickle

    try:
        text = str(e)
    except Exception:  # noqa: BLE001 - a stranger's exception may fail even to say what it is
        text = ""
    if isinstance(e, pickle.UnpicklingError) and "Weights only load failed" in text:
        found = next((line.strip() for line in text.splitlines() if "GLOBAL" in line), "")
        return (
            f"{type(e).__name__}: it holds pickled objects that are not tensors or plain data "
            f"({found[:width] or 'an unsupported object'}); refused, as loading them could run code"
        )
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")[:width]
    return f"{type(e).__name__}: {first}" if first else type(e).__name__
