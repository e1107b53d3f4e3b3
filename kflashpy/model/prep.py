"""``kpu.load_flash`` preprocessing: the 32-bit word swap, with the checks that make it safe.

MaixPy's ``kpu.load_flash`` reads the model through SPI3 with 32-bit frames, which
reverses every 4-byte group on the way into RAM, so the file must be stored with
every 32-bit word byte-reversed ("word-swapped"). The transform is its own inverse.
Before swapping we check what the (closed) loader relies on: a V3/V4 model (MaixPy
has no V5 loader), everything before the first body within the first 4096 bytes (the
only header read), and body offsets that are multiples of 4 (bodies are fetched with
32-bit reads). Details and sources: docs/kmodel.md ("Preparing for kpu.load_flash").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatError, UsageError
from .detect import KmodelSignature, detect, swap_words
from .dispatch import parse, unswap
from .info import LOAD_FLASH_MAX_HEADER, ram_estimates
from .v3 import KModelV3
from .v4 import KModelV4

__all__ = ["FlashPrep", "prep_flash", "MAX_SPI_SPEED", "DEFAULT_SPI_SPEED"]

#: the loader refuses SPI clocks above this (Hz)
MAX_SPI_SPEED = 80_000_000
#: the official demo's clock (Hz)
DEFAULT_SPI_SPEED = 60_000_000
_BATCH_MAX = 0x10000
_BATCH_MIN = 0x400


@dataclass
class FlashPrep:
    """Result of :func:`prep_flash`: the bytes to burn and how to load them."""

    data: bytes
    version: int
    direction: str  # "swap" (plain -> load_flash form) or "unswap"
    pad_bytes: int
    header_end: int
    model_size: int
    max_body: int
    main_mem: int
    ram: dict[str, int] = field(default_factory=dict)
    batch_size: int = 0
    warnings: list[str] = field(default_factory=list)

    def call(self, address: int, dual: bool = True, spi_speed: int = DEFAULT_SPI_SPEED) -> str:
        """The exact MaixPy call for a model burned at flash ``address``."""
        batch = self.batch_size if dual else 0
        return f"kpu.load_flash(0x{address:x}, {int(dual)}, 0x{batch:x}, {spi_speed})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "direction": self.direction,
            "size": len(self.data),
            "pad_bytes": self.pad_bytes,
            "header_end": self.header_end,
            "model_size": self.model_size,
            "max_body": self.max_body,
            "main_mem": self.main_mem,
            "ram": self.ram,
            "batch_size": self.batch_size,
            "warnings": self.warnings,
        }


def recommended_batch(max_body: int) -> int:
    """A dual-buffer batch size: the loader caps it at one buffer (max_body + 256)."""
    cap = max_body + 256
    return max(_BATCH_MIN, min(_BATCH_MAX, cap) // _BATCH_MIN * _BATCH_MIN)


def _refuse_signature(sig: KmodelSignature | None, source: str) -> None:
    if sig is None:
        raise FormatError(f"{source}: not a kmodel", "prep-flash takes a V3 or V4 .kmodel file")
    if sig.opaque:
        raise FormatError(
            f"{source}: MaixHub .{sig.opaque} models are opaque and must not be word-swapped",
            "burn it unchanged and load it with kpu.load(path) on MaixPy",
        )
    if sig.version == 5:
        raise FormatError(
            f"{source}: kmodel V5 (nncase 1.x) cannot be loaded by kpu.load_flash",
            "MaixPy has no V5 loader at all; recompile with nncase v0.2 (V4) or v0.1 (V3), "
            "or use CanMV",
        )
    if sig.version not in (3, 4):
        raise FormatError(
            f"{source}: kmodel V{sig.version} has no kpu.load_flash loader (V3 and V4 only)",
            "recompile the model with nncase v0.1 (V3) or v0.2 (V4)",
        )


def prep_flash(
    data: bytes, source: str = "kmodel", *, unswap_input: bool = False, force: bool = False
) -> FlashPrep:
    """Check a V3/V4 kmodel and return its load_flash (word-swapped) form.

    ``unswap_input``: the input is already swapped; return the plain file instead.
    ``force``: swap even though the input already looks swapped (normally refused,
    because swapping twice silently gives the plain file back).
    A length that is not a multiple of 4 is padded with zero bytes (the loader never
    reads them: it stops at the model size).
    """
    data = bytes(data)
    sig = detect(data, source)
    _refuse_signature(sig, source)
    assert sig is not None  # narrowed by _refuse_signature
    if unswap_input and not sig.swapped:
        raise UsageError(
            f"{source}: --unswap given but the file is a plain (not swapped) kmodel",
            "drop --unswap to prepare it for kpu.load_flash",
        )
    if sig.swapped and not unswap_input and not force:
        raise UsageError(
            f"{source}: already in the kpu.load_flash word-swapped form",
            "burn it as is; --unswap gives the plain file back; --force swaps it again",
        )
    plain = unswap(data) if sig.swapped else data
    model = parse(plain, source)
    assert isinstance(model, KModelV3 | KModelV4)  # V5 was refused above
    ops = model.layers if isinstance(model, KModelV3) else model.nodes
    main = model.main_mem_usage if isinstance(model, KModelV3) else model.main_mem
    warnings: list[str] = []
    if model.header_end > LOAD_FLASH_MAX_HEADER:
        raise FormatError(
            f"{source}: header and tables end at byte {model.header_end}; kpu.load_flash "
            f"reads only the first {LOAD_FLASH_MAX_HEADER} bytes before the first body",
            "load this model with kpu.load instead",
        )
    for op in ops:
        if op.offset % 4:
            raise FormatError(
                f"{source}: body of {'layer' if isinstance(model, KModelV3) else 'node'} "
                f"{op.index} ({op.name}) at 0x{op.offset:x} is not at a multiple of 4",
                "kpu.load_flash reads 32-bit words; load this model with kpu.load instead",
            )
    if len(plain) < model.model_size:
        warnings.append(
            f"file is {model.model_size - len(plain)} bytes shorter than its declared model size "
            "(missing final padding); the loader reads those bytes from flash but never uses them"
        )
    pad = -len(data) % 4
    if unswap_input:
        out, direction = plain, "unswap"
    elif sig.swapped:  # forced second swap: the result is the plain form again
        out, direction = swap_words(data + bytes(pad)), "unswap"
        warnings.append(
            "the input was already word-swapped: swapping it again gives the plain form "
            "(for kpu.load), which kpu.load_flash cannot load"
        )
    else:
        out, direction = swap_words(data + bytes(pad)), "swap"
    return FlashPrep(
        data=out,
        version=sig.version,
        direction=direction,
        pad_bytes=pad,
        header_end=model.header_end,
        model_size=model.model_size,
        max_body=model.max_body,
        main_mem=main,
        ram=ram_estimates(main, model.model_size, model.max_body),
        batch_size=recommended_batch(model.max_body),
        warnings=warnings,
    )
