"""The K210 and its boards: every fact about the chip and the board/firmware model.

* :mod:`.k210` — the chip: SRAM and mask-ROM addresses, ROM baud, flash geometry and
  limits, the peripheral map. Every other module reads these names instead of restating
  a number.
* :mod:`.boards` — boards, reset wirings and firmware layouts, loaded from the TOML data in
  ``firmware_layouts/`` (documented by ``firmware_layouts/SCHEMA.md``).

Ground floor: imports nothing of kflashpy above ``errors`` and ``units``.
"""
