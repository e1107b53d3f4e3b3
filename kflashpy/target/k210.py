"""Every fact about the K210 chip that kflashpy relies on, in one place.

The client (``isp``), the image tools (``image``) and the virtual board (``sim``) read these
names; none of them restates an address or a size. Sources: docs/protocol.md (mask-ROM ISP,
SRAM that the ROM accepts writes to), docs/simulator.md (memory map and peripherals the
virtual board models) and docs/flasher-protocol.md (flash geometry the stage-2 flashers
work in).
"""

from __future__ import annotations

from typing import NamedTuple

# --- on-chip SRAM -------------------------------------------------------------------------

#: SRAM through the cache: where programs are loaded and run
SRAM_BASE = 0x8000_0000
#: the same cells seen without the cache
SRAM_UNCACHED = 0x4000_0000
#: both views, cached first
SRAM_VIEWS = (SRAM_BASE, SRAM_UNCACHED)
#: general-purpose SRAM (6 MiB), where a loaded program must fit
GENERAL_SRAM_SIZE = 6 << 20
GENERAL_SRAM_END = SRAM_BASE + GENERAL_SRAM_SIZE
#: general SRAM followed by the 2 MiB AI SRAM: the whole buffer the bus decodes
SRAM_SIZE = 8 << 20
#: the mask ROM's own data, stacks and boot patch at the top of general SRAM
ROM_DATA = (0x805F_8000, GENERAL_SRAM_END)

# --- clocks -------------------------------------------------------------------------------

#: the CPU clock kflashpy's bootstrap and flasher run at (PLL0 780 MHz / 2,
#: docs/flasher-protocol.md "Clocks"); the mask ROM leaves the same (inferred,
#: docs/simulator.md "The core and the peripherals")
CPU_HZ = 390_000_000
#: the CLINT's mtime counts the CPU clock divided by this
MTIME_DIVIDER = 50

# --- mask ROM -----------------------------------------------------------------------------

#: the mask ROM's code
MASK_ROM = (0x8800_0000, 0x8802_0000)
#: the ROM's ISP listens on UARTHS at this rate (8N1)
ROM_BAUD = 115200
#: the longest memory write the ROM's ISP accepts in one frame
ROM_MAX_WRITE = 1024

# --- SPI NOR flash (on SPI3) --------------------------------------------------------------

#: program page
FLASH_PAGE = 256
#: erase sector: the smallest unit a burn can change
FLASH_SECTOR = 4096
#: erase block (and the unit kflash-style flashers rewrite per frame)
FLASH_BLOCK = 64 * 1024
#: 3-byte addressing tops out at 16 MiB; every known board carries that much
FLASH_MAX_SIZE = 16 << 20
#: smallest flash chip the virtual board accepts
FLASH_MIN_SIZE = 64 * 1024


# --- peripherals --------------------------------------------------------------------------


class Peripheral(NamedTuple):
    """A block of registers on the bus: where it starts and how many bytes it decodes."""

    base: int
    size: int


#: the peripheral map, by name, in address order
PERIPHERALS: dict[str, Peripheral] = {
    "clint": Peripheral(0x0200_0000, 0x1_0000),
    "plic": Peripheral(0x0C00_0000, 0x400_0000),
    "uarths": Peripheral(0x3800_0000, 0x1000),
    "gpiohs": Peripheral(0x3800_1000, 0x1000),
    "dmac": Peripheral(0x5000_0000, 0x1000),
    "gpio": Peripheral(0x5020_0000, 0x1000),
    "uart1": Peripheral(0x5021_0000, 0x1000),
    "uart2": Peripheral(0x5022_0000, 0x1000),
    "uart3": Peripheral(0x5023_0000, 0x1000),
    "spi2": Peripheral(0x5024_0000, 0x1000),
    "i2s": Peripheral(0x5025_0000, 0x3000),
    "i2c": Peripheral(0x5028_0000, 0x3000),
    "fpioa": Peripheral(0x502B_0000, 0x1000),
    "sha256": Peripheral(0x502C_0000, 0x1000),
    "timers": Peripheral(0x502D_0000, 0x3000),
    "wdt": Peripheral(0x5040_0000, 0x2000),
    "otp": Peripheral(0x5042_0000, 0x1000),
    "dvp": Peripheral(0x5043_0000, 0x1000),
    "sysctl": Peripheral(0x5044_0000, 0x1000),
    "aes": Peripheral(0x5045_0000, 0x1000),
    "rtc": Peripheral(0x5046_0000, 0x1000),
    "spi0": Peripheral(0x5200_0000, 0x1000),
    "spi1": Peripheral(0x5300_0000, 0x1000),
    "spi3": Peripheral(0x5400_0000, 0x1000),
}

#: PLIC interrupt sources of the UARTs
UART_IRQ = {"uart1": 11, "uart2": 12, "uart3": 13, "uarths": 33}
#: PLIC interrupt sources of the DMAC's six channels (channel n: 27 + n)
DMA_IRQ = tuple(range(27, 33))
#: DMA handshake request numbers (the SDK's sysctl_dma_select_t), which SYSCTL dma_sel
#: routes to the DMAC's handshake interfaces (kflashpy/sim/dmac.py)
DMA_REQUEST = {
    name: number
    for number, name in enumerate(
        (
            "ssi0_rx",
            "ssi0_tx",
            "ssi1_rx",
            "ssi1_tx",
            "ssi2_rx",
            "ssi2_tx",
            "ssi3_rx",
            "ssi3_tx",
            "i2c0_rx",
            "i2c0_tx",
            "i2c1_rx",
            "i2c1_tx",
            "i2c2_rx",
            "i2c2_tx",
            "uart1_rx",
            "uart1_tx",
            "uart2_rx",
            "uart2_tx",
            "uart3_rx",
            "uart3_tx",
            "aes_req",
            "sha_rx",
            "ai_rx",
            "fft_rx",
            "fft_tx",
            "i2s0_tx",
            "i2s0_rx",
            "i2s1_tx",
            "i2s1_rx",
            "i2s2_tx",
            "i2s2_rx",
            "i2s0_bf_dir",
            "i2s0_bf_voice",
        )
    )
}


def in_sram(address: int, size: int, limit: int = GENERAL_SRAM_SIZE) -> bool:
    """True when ``address..address+size`` lies in the first ``limit`` bytes of one SRAM
    view (general SRAM by default)."""
    return any(base <= address and address + size <= base + limit for base in SRAM_VIEWS)
