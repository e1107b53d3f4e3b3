"""Files meant to run on the board (MicroPython), shipped as package data.

``kseal.py`` verifies and decrypts kflashpy sealed containers on MaixPy. It is not
imported by kflashpy itself; copy it to the board's file system (its path is
given by :func:`helper_path`).
"""

from __future__ import annotations

from pathlib import Path


def helper_path() -> Path:
    """Path of the MicroPython unseal helper inside the installed package."""
    return Path(__file__).with_name("kseal.py")
