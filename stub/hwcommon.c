/* Clocks, polled UART3 link and small helpers shared by bootstrap and flasher.
 * SPDX-License-Identifier: MIT
 */
#include "hw.h"

static u64 pll0_hz(void)
{
    u32 p = SYSCTL_PLL0;
    u64 clkr = p & 0xF, clkf = (p >> 4) & 0x3F, clkod = (p >> 10) & 0xF;
    return (u64)IN0_HZ * (clkf + 1) / ((clkr + 1) * (clkod + 1));
}

u32 cpu_hz(void)
{
    u32 sel = SYSCTL_CLK_SEL0;
    if (!(sel & 1))
        return IN0_HZ;
    return (u32)(pll0_hz() / (2u << ((sel >> 1) & 3)));
}

u32 apb0_hz(void)
{
    return cpu_hz() / (((SYSCTL_CLK_SEL0 >> 3) & 7) + 1);
}

u32 spi3_sclk_hz(void)
{
    u64 src = (SYSCTL_CLK_SEL0 >> 12) & 1 ? pll0_hz() : IN0_HZ;
    u32 th = SYSCTL_CLK_TH1 >> 24;
    return (u32)(src / ((th + 1) * 2) / 2); /* BAUDR = 2 */
}

/* Sets the clock plan of hw.h; idempotent: a flasher started by the bootstrap finds
 * the PLL already running and must not glitch the clock under a live high-speed link.
 * Afterwards CPU_HZ and APB0_HZ hold (cpu_hz() and apb0_hz() read them back). */
void clock_init(void)
{
    u32 want = (PLL0_CLKF << 4) | (PLL0_CLKF << 14) /* bwadj = clkf */ | (1u << 21) /* pwrd */
               | (1u << 25) /* out_en */;
    SYSCTL_CLK_EN_CENT |= 0x3F; /* cpu, sram0, sram1, apb0, apb1, apb2 */
    if ((SYSCTL_PLL0 & 0x3FFFu) != (want & 0x3FFFu) || !(SYSCTL_CLK_SEL0 & 1)) {
        SYSCTL_CLK_SEL0 &= ~1u; /* run from IN0 while the PLL relocks */
        SYSCTL_PLL0 = want | (1u << 20);
        SYSCTL_PLL0 = want;
        for (u32 i = 0; i < 100000 && (SYSCTL_PLL_LOCK & 3) != 3; i++)
            SYSCTL_PLL_LOCK |= 1u << 2; /* slip clear */
    }
    /* aclk = PLL0 / 2, apb0 = aclk / 2, SPI3 from PLL0: written every time, because the
     * ROM may leave the PLL running with other selectors (SPI3 on the 26 MHz IN0 gave
     * a 1.6 MHz SCLK instead of 48.75 MHz) */
    SYSCTL_CLK_SEL0 = (SYSCTL_CLK_SEL0 & ~0x103Fu) | 1u | (1u << 3) | (1u << 12);
    SYSCTL_CLK_TH1 = (SYSCTL_CLK_TH1 & 0x00FFFFFFu) | (SPI3_THRESHOLD << 24);
    SYSCTL_CLK_EN_PERI |= PERI_SPI3 | PERI_UART3 | PERI_FPIOA | PERI_DMA;
}

/* busy-wait; runs at CPU_HZ (each iteration takes two cycles) */
void delay_us(u32 us)
{
    for (u64 n = (u64)us * (CPU_HZ / 2000000u); n; n--)
        __asm__ volatile("");
}

u32 uart_divisor(u32 baud)
{
    return (APB0_HZ + baud / 2) / baud;
}

/* baud = APB0 / divisor; DLH:DLL hold divisor >> 4, DLF the low 4 bits */
void uart_init(u32 baud)
{
    u32 d = uart_divisor(baud);
    FPIOA_IO(4) = FUNC_UART3_RX | (1u << 20) /* ie_en */ | (1u << 23) /* st */;
    FPIOA_IO(5) = FUNC_UART3_TX | (0xFu << 8) /* ds */ | (1u << 12) /* oe_en */;
    UART_LCR = 0x80;
    UART_RBR = (d >> 4) & 0xFF;
    UART_IER = d >> 12;
    UART_LCR = 0x03; /* 8N1 */
    UART_DLF = d & 0xF;
    UART_IER = 0x80; /* PTIME: LSR bit 5 = transmit FIFO full; no interrupts */
    UART_FCR = 0x07; /* FIFOs on and cleared */
    UART_MCR = 0;
}

#ifdef KFPY_BOOTSTRAP
/* an LSR read a byte: the bootstrap's few replies do not pay for the 40 bytes the
 * flasher's way costs it (the ROM takes it at 115200) */
void uart_putc(u8 c)
{
    while (UART_LSR & LSR_TX_FULL)
        uart_poll();
    UART_RBR = c;
}
#else
/* Bytes the transmit FIFO surely takes: its depth less its level (TFL) when that was
 * last read, less what was written since (the FIFO only empties meanwhile). One TFL
 * read serves up to 16 bytes of a reply, not one LSR read a byte. */
static u32 tx_room;

/* the FIFO was full as last seen: its level until it has room (the link served) */
static __attribute__((noinline)) void tx_wait(void)
{
    while (!(tx_room = UART_FIFO_DEPTH - UART_TFL))
        uart_poll();
}

void uart_putc(u8 c)
{
    if (!tx_room)
        tx_wait(); /* out of line: a byte with room saves no register on the stack */
    tx_room--;
    UART_RBR = c;
}
#endif

/* wait until the last stop bit left the wire (before a baud change or reset) */
void uart_drain(void)
{
    while (!(UART_LSR & LSR_TEMT) || (UART_USR & 1))
        uart_poll();
}

u32 crc32_bitwise(u32 crc, const u8 *p, u32 n)
{
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xEDB88320u & -(crc & 1));
    }
    return ~crc;
}

u32 (*reply_crc_fn)(u32 crc, const u8 *p, u32 n) = crc32_bitwise;
static u32 reply_crc;
static u8 reply_ext;

static void slip_put(u8 c)
{
    if (c == 0xC0) {
        uart_putc(0xDB);
        uart_putc(0xDC);
    } else if (c == 0xDB) {
        uart_putc(0xDB);
        uart_putc(0xDD);
    } else {
        uart_putc(c);
    }
}

void reply_bytes(const void *p, u32 n)
{
    const u8 *b = p;
    reply_crc = reply_crc_fn(reply_crc, b, n);
    for (u32 i = 0; i < n; i++)
        slip_put(b[i]);
}

void reply_u32(u32 v)
{
    reply_bytes(&v, 4);
}

void reply_begin(u8 op, u8 status)
{
    u8 h[2] = {op, status};
    reply_crc = 0;
    reply_ext = IS_EXT_OP(op);
    uart_putc(0xC0);
    reply_bytes(h, 2);
}

void reply_end(void)
{
    if (reply_ext) {
        u32 c = reply_crc;
        for (int i = 0; i < 4; i++)
            slip_put((u8)(c >> (8 * i)));
    }
    uart_putc(0xC0);
}

void reply_status(u8 op, u8 status)
{
    reply_begin(op, status);
    reply_end();
}
