"""How every package words a count in what it prints."""

from __future__ import annotations


def counted(n: int, noun: str, grouped: bool = False) -> str:
    """``1 game``, ``3 games``; ``grouped`` writes thousands with commas (``1,000 records``)."""
    number = f"{n:,}" if grouped else str(n)
    return f"{number} {noun}{'s' * (n != 1)}"
