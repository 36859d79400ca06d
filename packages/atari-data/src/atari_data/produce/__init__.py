"""Producing records: expert generation, DAgger rounds, importers of public datasets, fan-out."""
