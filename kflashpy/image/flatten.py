"""One flat flash image from a checked plan: what the flash holds after burning the plan.

Factory programmers take a single binary written from address 0, and the virtual board
takes one as its flash file (``sim://?flash=FILE``). Each region is placed as ``burn``
writes it (a raw firmware at the boot address as its boot image, kpu.load_flash models
word-swapped), and every byte no region covers is 0xFF, what erased NOR flash reads as.
"""

from __future__ import annotations

from ..errors import InputError
from ..units import fmt_addr
from .plan import FlashPlan

#: what erased NOR flash reads as: the fill between and after the regions
ERASED = 0xFF


def flatten(plan: FlashPlan, *, fill_to: int | None = None) -> bytes:
    """The plan's writes laid out from address 0, gaps 0xFF, up to ``fill_to`` if given.

    Without ``fill_to`` the image ends where the last region ends. Raises
    :class:`InputError` if ``fill_to`` would cut a region off, or the plan writes nothing.
    """
    writes = plan.writes
    if not writes:
        raise InputError("nothing to merge", "give ADDR FILE pairs or a kfpkg")
    end = max(r.end for r in writes)
    if fill_to is not None and fill_to < end:
        raise InputError(
            f"--fill-to 0x{fill_to:X} would cut off the image, which ends at {fmt_addr(end)}",
            f"give at least 0x{end:X} (or the flash size, e.g. 16M)",
        )
    if fill_to is not None and fill_to > plan.flash_size:
        raise InputError(
            f"--fill-to 0x{fill_to:X} is larger than the {plan.flash_size >> 20} MiB flash",
            f"give at most 0x{plan.flash_size:X}",
        )
    image = bytearray([ERASED]) * (fill_to if fill_to is not None else end)
    for r in writes:  # the checker has refused overlaps: each byte has one region
        image[r.address : r.end] = r.write
    return bytes(image)
