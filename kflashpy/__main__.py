"""``python -m kflashpy``: the same entry point as the ``kflashpy`` command."""

from kflashpy.cli import console_main

if __name__ == "__main__":
    console_main()
