"""kflashpy: a toolchain for Kendryte K210 boards.

The library is the product; the ``kflashpy`` command is a thin layer on it. Public
functions never print or exit: they return typed results, raise
:class:`kflashpy.errors.KflashError` subclasses, and report progress through a
callback (:mod:`kflashpy.progress`).
"""

__version__ = "0.1.0"
