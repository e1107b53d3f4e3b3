"""click parameter types shared by all commands (one spelling means one thing)."""

from __future__ import annotations

import click

from ..errors import InputError
from ..units import parse_int


class IntSpec(click.ParamType):
    """An address or size: ``0x300000``, ``3145728``, ``3M``, ``64k``."""

    name = "ADDR"

    def convert(self, value, param, ctx):  # noqa: D102 - click API
        if isinstance(value, int):
            return value
        try:
            return parse_int(value, param.human_readable_name if param else "value")
        except InputError as e:
            self.fail(f"{e.message} ({e.hint})" if e.hint else e.message, param, ctx)


class SizeOrAll(IntSpec):
    """A size, or ``all``: up to the end of the flash (``None``)."""

    name = "SIZE|all"

    def convert(self, value, param, ctx):  # noqa: D102 - click API
        if isinstance(value, str) and value.strip().lower() == "all":
            return None
        return super().convert(value, param, ctx)


ADDRESS = IntSpec()
SIZE_OR_ALL = SizeOrAll()


def pairs(values: tuple[str, ...], what: str = "ADDR FILE") -> list[tuple[int, str]]:
    """Split ``ADDR FILE [ADDR FILE ...]`` positional arguments into typed pairs."""
    if len(values) % 2:
        raise InputError(
            f"expected {what} pairs, got an odd number of arguments ({len(values)})",
            "give an address before every file, e.g. 0 firmware.bin 0x300000 model.kmodel",
        )
    return [
        (parse_int(values[i], f"address of {values[i + 1]}"), values[i + 1])
        for i in range(0, len(values), 2)
    ]
