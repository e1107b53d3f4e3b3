"""Helpers that several test modules share (tests import them as ``support.<module>``).

Shared *fixtures* live in ``tests/conftest.py``; plain functions live here, so that no
test module imports another one.
"""
