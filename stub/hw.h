/* K210 registers used by the kflashpy flasher and its bootstrap (no trap is ever
 * taken, no floating point; the flasher sleeps in wfi with mstatus.MIE = 0). Register
 * offsets: docs/flasher-protocol.md and docs/simulator.md ("The core and the
 * peripherals"), sources cited in the reference notes (Kendryte SDK headers for
 * SYSCTL/FPIOA/UART/SPI3/PLIC/CLINT).
 * SPDX-License-Identifier: MIT
 */
#ifndef KFPY_HW_H
#define KFPY_HW_H

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long u64;

#define REG32(addr) (*(volatile u32 *)(u64)(addr))

/* SYSCTL */
#define SYSCTL 0x50440000u
#define SYSCTL_PLL0 REG32(SYSCTL + 0x08)
#define SYSCTL_PLL_LOCK REG32(SYSCTL + 0x18)
#define SYSCTL_CLK_SEL0 REG32(SYSCTL + 0x20)
#define SYSCTL_CLK_EN_CENT REG32(SYSCTL + 0x28)
#define SYSCTL_CLK_EN_PERI REG32(SYSCTL + 0x2C)
#define SYSCTL_SOFT_RESET REG32(SYSCTL + 0x30)
#define SYSCTL_PERI_RESET REG32(SYSCTL + 0x34)
#define SYSCTL_CLK_TH1 REG32(SYSCTL + 0x3C)

#define PERI_SPI3 (1u << 9)
#define PERI_UART3 (1u << 18)
#define PERI_FPIOA (1u << 20)

/* FPIOA: IO4 = link RX, IO5 = link TX (the pins the mask ROM uses) */
#define FPIOA_IO(n) REG32(0x502B0000u + 4u * (n))
#define FUNC_UART3_RX 68u
#define FUNC_UART3_TX 69u

/* DW APB UART3 */
#define UART3 0x50230000u
#define UART_RBR REG32(UART3 + 0x00) /* also THR, DLL */
#define UART_IER REG32(UART3 + 0x04) /* also DLH */
#define UART_FCR REG32(UART3 + 0x08)
#define UART_LCR REG32(UART3 + 0x0C)
#define UART_MCR REG32(UART3 + 0x10)
#define UART_LSR REG32(UART3 + 0x14)
#define UART_USR REG32(UART3 + 0x7C)
#define UART_TFL REG32(UART3 + 0x80) /* bytes in the transmit FIFO */
#define UART_RFL REG32(UART3 + 0x84) /* bytes in the receive FIFO */
#define UART_FIFO_DEPTH 16u /* each way */
#define LSR_TX_FULL 0x20u /* with IER.PTIME set: transmit FIFO full */
#define UART_DLF REG32(UART3 + 0xC0)
#define LSR_TEMT 0x40u
#define IER_ERBFI 0x01u /* receive interrupt: FIFO at its trigger level, or timed out */
#define IER_PTIME 0x80u /* LSR bit 5 = transmit FIFO full */
#define FCR_FIFO_ON 0x01u
#define FCR_RX_HALF (2u << 6) /* RX trigger level: half the 16-byte FIFO */
#define UART3_IRQ 13u

/* PLIC, hart 0 machine-mode context */
#define PLIC_PRIORITY(irq) REG32(0x0C000000u + 4u * (irq))
#define PLIC_ENABLE0 REG32(0x0C002000u) /* sources 0-31 */
#define PLIC_THRESHOLD REG32(0x0C200000u)
#define PLIC_CLAIM REG32(0x0C200004u) /* read: claim, write: complete */

/* DMAC (DW_axi_dmac, docs/simulator.md "The DMAC"): 64-bit registers, written here as
 * 32-bit halves; channel n's registers at 0x100 + 0x100 n */
#define DMAC 0x50000000u
#define DMAC_CFG REG32(DMAC + 0x10) /* bit 0 DMAC_EN, bit 1 INT_EN */
#define DMAC_CHEN REG32(DMAC + 0x18) /* CH_EN[n] at bit n, its write enable at bit n + 8 */
#define DMAC_CH(n, off) REG32(DMAC + 0x100u + 0x100u * (n) + (off))
#define CH_SAR 0x00
#define CH_DAR 0x08
#define CH_BLOCK_TS 0x10 /* items - 1 */
#define CH_CTL 0x18
#define CH_CFG 0x20
#define CH_INTSTATUS_EN 0x80
#define CH_INTSIGNAL_EN 0x90
#define CH_INTCLEAR 0x98
#define DMA_TFR_DONE 2u
#define DMA_IRQ(n) (27u + (n)) /* PLIC source of channel n */
#define SYSCTL_DMA_SEL0 REG32(SYSCTL + 0x64) /* request of handshake interface n: bits 6n.. */
#define PERI_DMA (1u << 1)
#define DMA_REQ_UART3_RX 18u
#define RX_DMA_CH 0u /* the link's receive channel (hwcommon.c rx_dma_init) */

/* SHA-256 engine (docs/flasher-protocol.md "Hashing"; Kendryte SDK sha256.h), fed by DMA */
#define SHA256 0x502C0000u
#define SHA_RESULT(i) REG32(SHA256 + 4u * (i)) /* word 7-i: digest bytes 4i..4i+3, LE */
#define SHA_DATA_IN (SHA256 + 0x20)
#define SHA_NUM REG32(SHA256 + 0x28)   /* bits 0-15 data_cnt: the message's 64-byte blocks */
#define SHA_FUNC0 REG32(SHA256 + 0x2C) /* bit 0 sha_en (reads 1 once done), 16 endian */
#define SHA_FUNC1 REG32(SHA256 + 0x34) /* bit 0 dma_en: words come by DMA (SHA_RX) */
#define PERI_SHA (1u << 26)
#define DMA_REQ_SHA_RX 21u

/* CLINT: mtime counts at CPU clock / 50. A 64-bit access is two bus accesses (the
 * flasher reads the low word alone, flasher.c "now") */
#define MTIME (*(volatile u64 *)0x0200BFF8u)
#define MTIME_LO REG32(0x0200BFF8u)
#define MTIMECMP_LO REG32(0x02004000u) /* hart 0 */
#define MTIMECMP_HI REG32(0x02004004u)
#define MTIMECMP (*(volatile u64 *)0x02004000u)
#define TICKS(us) ((u64)(us) * (CPU_HZ / 50u / 1000u) / 1000u) /* mtime ticks in us */
#define MIE_MTIE (1u << 7)
#define MIE_MEIE (1u << 11)

/* DW APB SSI, K210 SPI3 layout (on-board NOR flash on CS0) */
#define SPI3 0x54000000u
#define SPI_CTRLR0 REG32(SPI3 + 0x00)
#define SPI_CTRLR1 REG32(SPI3 + 0x04)
#define SPI_SSIENR REG32(SPI3 + 0x08)
#define SPI_SER REG32(SPI3 + 0x10)
#define SPI_BAUDR REG32(SPI3 + 0x14)
#define SPI_TXFLR REG32(SPI3 + 0x20)
#define SPI_RXFLR REG32(SPI3 + 0x24)
#define SPI_SR REG32(SPI3 + 0x28)
#define SPI_IMR REG32(SPI3 + 0x2C)
#define SPI_DMACR REG32(SPI3 + 0x4C) /* bit 0 RDMAE, bit 1 TDMAE */
#define SPI_DMATDLR REG32(SPI3 + 0x50) /* TX DMA request while TXFLR <= this */
/* SPI3's DMA requests (SYSCTL dma_sel) and the channel status the flasher waits on */
#define DMA_REQ_SSI3_RX 6u
#define DMA_REQ_SSI3_TX 7u
#define CH_INTSTATUS 0x88
#define SPI_DR REG32(SPI3 + 0x60)
#define SPI_SPI_CTRLR0 REG32(SPI3 + 0xF4)
#define SPI_ENDIAN REG32(SPI3 + 0x118)

/* Clock plan: PLL0 = 26 MHz * 30 = 780 MHz, CPU = PLL0 / 2 = 390 MHz,
 * APB0 = CPU / 2 = 195 MHz (UART3: 1.5 M and 3 M baud divide exactly),
 * SPI3 = PLL0 / ((3 + 1) * 2) = 97.5 MHz, SCLK = SPI3 / 2 = 48.75 MHz. */
#define IN0_HZ 26000000u
#define PLL0_CLKF 29u
#define SPI3_THRESHOLD 3u
#define CPU_HZ 390000000u
#define APB0_HZ 195000000u

/* shared by the bootstrap and the flasher (hwcommon.c) */
void clock_init(void);
u32 cpu_hz(void);
u32 apb0_hz(void);
u32 spi3_sclk_hz(void);
void uart_init(u32 baud);
u32 uart_divisor(u32 baud);
void uart_drain(void);
void uart_putc(u8 c);
void delay_us(u32 us);
u32 crc32_bitwise(u32 crc, const u8 *p, u32 n);

/* replies: C0 op status [payload] [crc32 over op..payload, for ops 0xB0-0xBF] C0 */
extern u32 (*reply_crc_fn)(u32 crc, const u8 *p, u32 n);
void reply_begin(u8 op, u8 status);
void reply_bytes(const void *p, u32 n);
void reply_u32(u32 v);
void reply_end(void);
void reply_status(u8 op, u8 status);

#define ST_OK 0xE0
#define ST_BAD_LEN 0xE1
#define ST_BAD_CRC 0xE2
#define ST_BAD_CMD 0xE3
#define ST_BAD_INIT 0xE4
#define ST_BAD_ERASE 0xE5
#define ST_BAD_WRITE 0xE6

#define OP_NOP 0xD2
#define OP_SRAM_WRITE 0xB9
#define OP_EXEC 0xBA
#define OP_SET_BAUD 0xBB
#define OP_LOAD 0xBD /* bootstrap only: a raw payload by DMA (docs/flasher-protocol.md) */
#define IS_EXT_OP(op) (((op) & 0xF0) == 0xB0)

/* the caller's receive hook: called whenever the CPU waits (TX full, flash busy) */
void uart_poll(void);

/* DMAC channel RX_DMA_CH programmed to take UART3's received bytes (SYSCTL dma_sel0
 * interface 0 = the UART3_RX request): RBR fixed, one 32-bit word per byte (as the SDK's
 * uart_receive_data_dma does it), its done interrupt (DMA_TFR_DONE) raised through the
 * PLIC; rx_dma_start arms a block. The bootstrap receives the flasher this way, the
 * flasher its write frames. Inline: each program calls them from one place, where the
 * registers' base addresses are at hand (out of line, the flasher grew by 40 bytes). */
static inline void rx_dma_init(void)
{
    SYSCTL_DMA_SEL0 = (SYSCTL_DMA_SEL0 & ~0x3Fu) | DMA_REQ_UART3_RX; /* interface 0 */
    DMAC_CFG = 3;                                                    /* DMAC_EN | INT_EN */
    /* DMS = master 2, SAR fixed, DAR incrementing, 32-bit items, bursts of 1 */
    DMAC_CH(RX_DMA_CH, CH_CTL) = (1u << 2) | (1u << 4) | (2u << 8) | (2u << 11);
    DMAC_CH(RX_DMA_CH, CH_CTL + 4) = 0;
    DMAC_CH(RX_DMA_CH, CH_CFG) = 0; /* single block */
    /* TT_FC periph -> memory, hardware handshake on the source, SRC_PER = DST_PER = 0 */
    DMAC_CH(RX_DMA_CH, CH_CFG + 4) = 2u | (1u << 4);
    DMAC_CH(RX_DMA_CH, CH_SAR) = UART3;
    DMAC_CH(RX_DMA_CH, CH_DAR + 4) = 0;
    DMAC_CH(RX_DMA_CH, CH_INTSTATUS_EN) = DMA_TFR_DONE;
    DMAC_CH(RX_DMA_CH, CH_INTSIGNAL_EN) = DMA_TFR_DONE;
    PLIC_PRIORITY(DMA_IRQ(RX_DMA_CH)) = 1;
    PLIC_ENABLE0 |= 1u << DMA_IRQ(RX_DMA_CH);
}

/* the next `items` received bytes into words at `dst` (its channel stopped) */
static inline void rx_dma_start(const u32 *dst, u32 items)
{
    DMAC_CH(RX_DMA_CH, CH_DAR) = (u32)(u64)dst;
    DMAC_CH(RX_DMA_CH, CH_BLOCK_TS) = items - 1;
    DMAC_CHEN = 0x101u << RX_DMA_CH;
}

/* boot hand-off: a program started by EXEC gets a0 = EXEC_MAGIC, a1 = current baud */
#define EXEC_MAGIC 0x4B465059u /* "KFPY" */

#endif
