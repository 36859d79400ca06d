"""Melting Pot world-model LMDBs: not game-decision records, so apart from the rest."""
