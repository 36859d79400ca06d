"""The one exception this package raises; each package turns it into its own one-line error."""


class UnknownName(ValueError):
    """A game, scenario or action set that does not exist; ``close`` holds the nearest real names."""

    def __init__(self, message: str, close: tuple[str, ...] = ()):
        super().__init__(message + (f"; did you mean {', '.join(close)}?" if close else ""))
        self.close = close
