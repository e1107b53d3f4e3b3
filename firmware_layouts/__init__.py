"""Data: K210 boards (flash, USB bridge, reset wiring) and firmware flash layouts.

The TOML files here are read by :mod:`kflashpy.target.boards`; ``SCHEMA.md`` documents
every key. This package holds data only.
"""
