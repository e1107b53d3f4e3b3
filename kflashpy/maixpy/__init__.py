"""The MaixPy side: a raw-REPL driver, on-board helpers and the board-vs-host comparison.

Everything here talks to a running MaixPy through a pyserial port (a real board, or
the virtual one as ``sim://...``); nothing imports the simulator.

- :mod:`.repl`: :class:`~.repl.MaixPyRepl` and :func:`~.repl.open_repl`;
- :mod:`.board`: flash read/hash through ``Maix.utils.flash_read``, board information;
- :mod:`.fs`: files on ``/flash`` and ``/sd`` (ls, get, put, rm, mkdir, df) and scripts;
- :mod:`.terminal`: the interactive terminal of ``kflashpy repl``;
- :mod:`.compare`: :func:`~.compare.compare` and its report types;
- :mod:`.errors`: MaixPy's KPU error codes with their likely causes.
"""
