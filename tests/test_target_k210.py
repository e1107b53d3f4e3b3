"""The K210 facts in kflashpy.target.k210 are the ones every consumer uses."""

from __future__ import annotations

from kflashpy.image import content
from kflashpy.isp import frames, ramimage, rom, stage2, stubs
from kflashpy.sim import flash, memory
from kflashpy.sim import rom as sim_rom
from kflashpy.target import k210


def test_consumers_read_the_facts_from_target():
    assert ramimage.DEFAULT_LOAD == stubs.KFLASH_STUB_ADDRESS == memory.SRAM_BASE == k210.SRAM_BASE
    assert content.SECTOR == stage2.SECTOR == flash.SECTOR_SIZE == k210.FLASH_SECTOR
    assert rom.ROM_BAUD == sim_rom.ISP_BAUD == k210.ROM_BAUD
    assert frames.ROM_MAX_CHUNK == k210.ROM_MAX_WRITE
    assert flash.MAX_SIZE == k210.FLASH_MAX_SIZE


def test_peripheral_map_has_no_overlaps_and_in_sram_checks_both_views():
    blocks = sorted(k210.PERIPHERALS.values())
    for a, b in zip(blocks, blocks[1:], strict=False):
        assert a.base + a.size <= b.base
    assert k210.in_sram(k210.SRAM_BASE, k210.GENERAL_SRAM_SIZE)
    assert k210.in_sram(k210.SRAM_UNCACHED + 16, 16)
    assert not k210.in_sram(k210.GENERAL_SRAM_END - 4, 8)


def test_the_simulator_maps_every_peripheral_of_the_table(tmp_path):
    """The core maps the one table: each block answers at its base with its size."""
    from kflashpy.sim.board import VirtualBoard
    from kflashpy.sim.config import BoardConfig
    from kflashpy.sim.core import Core

    board = VirtualBoard(BoardConfig())
    core = Core(board, k210.SRAM_BASE)
    regions = {(start, end) for start, end, _perms in core.uc.mem_regions()}
    for name, (base, size) in k210.PERIPHERALS.items():
        assert (base, base + size - 1) in regions, name
