/* kflashpy bootstrap: the smallest program that gets the flasher running at full
 * baud. The mask ROM only takes 1 KiB frames at 115200 (~10 KiB/s), so the host
 * uploads this first; it switches the link to the baud rate patched into its header,
 * answers NOP, and takes SET_BAUD / LOAD / EXEC (same framing as the flasher). A LOAD
 * request is followed on the wire by its payload, raw: the bytes come by DMA while the
 * core sleeps in wfi (nothing to poll per byte: cheap on the virtual board too). Kept
 * small: every byte costs 87 us at 115200. docs/flasher-protocol.md, "2. Start-up".
 * SPDX-License-Identifier: MIT
 */
#include "hw.h"

#define BOOT_MAX_FRAME (16 + 12) /* requests: header and up to 12 bytes of data */
#define LOAD_MAX 32768u          /* bytes of one LOAD payload: the flasher in one piece */

extern const u32 _start[];
static u8 frame[BOOT_MAX_FRAME] __attribute__((aligned(8)));
/* a LOAD's payload, one word per byte (the DMA's items): past what start.S zeroes
 * (link.ld .dma), read only through the uncached SRAM view (the DMAC writes behind the
 * cache) */
static u32 load_mem[LOAD_MAX] __attribute__((section(".dma")));
#define load_buf ((volatile u32 *)((u64)load_mem - 0x40000000u))
static u32 baud, gap_us; /* the link's baud rate; 8 character times (half the FIFO) */

static void link_at(u32 b)
{
    uart_init(b);
    baud = b;
    gap_us = 80000000u / b;
}

void uart_poll(void)
{
}

#define rd32(p) (*(const u32 *)(p)) /* frame is aligned; fields at 4, 8, 12 */

/* one SLIP frame; oversize or badly escaped frames come back as length 0 */
static u32 recv_frame(void)
{
    u32 n = 0, k = 0;
    int esc = 0, bad = 0;
    for (;;) {
        /* the FIFO's level read once for all the bytes it holds (bytes left in it when
         * the frame ends stay there for the next one), after 8 character times: half
         * the FIFO gathers between looks, the other half is the margin */
        while (!k) {
            delay_us(gap_us);
            k = UART_RFL;
        }
        k--;
        u8 c = (u8)UART_RBR;
        if (c == 0xC0) {
            if (n && !bad && !esc)
                return n;
            n = 0;
            esc = bad = 0;
            continue;
        }
        if (esc) {
            esc = 0;
            c = c == 0xDC ? 0xC0 : c == 0xDD ? 0xDB : (bad = 1, c);
        } else if (c == 0xDB) {
            esc = 1;
            continue;
        }
        if (n < sizeof(frame))
            frame[n++] = c;
        else
            bad = 1;
    }
}

/* A reply: op, status, the low `nbytes` bytes of `words` (little-endian) and, for our
 * 0xB_ ops, the CRC-32 of all that; SLIP-framed. Built byte by byte: the K210 core does
 * not take misaligned word stores. */
static void reply(u8 op, u8 st, u64 words, u32 nbytes)
{
    u8 r[14];
    u32 n = 0;
    r[n++] = op;
    r[n++] = st;
    for (; nbytes; nbytes--, words >>= 8)
        r[n++] = (u8)words;
    if (IS_EXT_OP(op)) {
        u32 c = crc32_bitwise(0, r, n);
        for (int i = 0; i < 4; i++, c >>= 8)
            r[n++] = (u8)c;
    }
    uart_putc(0xC0);
    for (u32 i = 0; i < n; i++) {
        u8 b = r[i];
        if (b == 0xC0 || b == 0xDB) {
            uart_putc(0xDB);
            b = b == 0xC0 ? 0xDC : 0xDD;
        }
        uart_putc(b);
    }
    uart_putc(0xC0);
}

/* A LOAD's payload: `n` bytes by DMA into load_buf (the bytes that followed the request
 * and wait in the FIFO go first), asleep in wfi (mie: the DMA's done interrupt, the
 * timer) until the block is complete or `wait` mtime ticks have passed (a byte lost on
 * the way, a host gone mid-payload: the channel is stopped, and what the buffer holds
 * then fails the CRC). "Ready" is answered once the channel is armed. */
static void load_receive(u32 n, u32 wait)
{
    rx_dma_start(load_mem, n);
    reply(OP_LOAD, ST_OK, 0, 0);
    u64 deadline = MTIME + wait;
    MTIMECMP = deadline;
    for (;;) {
        u32 id = PLIC_CLAIM; /* a wake is pending until claimed: acknowledged first */
        if (id)
            PLIC_CLAIM = id;
        if (!(DMAC_CHEN & (1u << RX_DMA_CH)))
            break;
        if (MTIME >= deadline) {
            DMAC_CHEN = 0x100u << RX_DMA_CH;
            while (DMAC_CHEN & (1u << RX_DMA_CH))
                ;
            break;
        }
        __asm__ volatile("wfi");
    }
    DMAC_CH(RX_DMA_CH, CH_INTCLEAR) = ~0u;
}

int main(void)
{
    clock_init();
    link_at(_start[2]);
    rx_dma_init();
    PLIC_THRESHOLD = 0;
    /* wfi's wakes (mstatus.MIE stays 0: no trap is taken); the flasher's start clears mie */
    __asm__ volatile("csrs mie, %0" ::"r"(MIE_MEIE | MIE_MTIE));
    for (;;) {
        u32 n = recv_frame();
        u8 op = frame[0], st = ST_OK;
        u32 addr = rd32(frame + 8), len = rd32(frame + 12), nb = 0;
        u64 words = 0;
        if (n < 16 || len != n - 16 || crc32_bitwise(0, frame + 8, n - 8) != rd32(frame + 4)) {
            st = ST_BAD_CRC;
        } else if (op == OP_LOAD && len == 12) {
            /* data: payload bytes, their CRC-32, the longest wait for them (mtime ticks) */
            u32 size = rd32(frame + 16);
            if (size - 1 >= LOAD_MAX) {
                st = ST_BAD_LEN;
            } else {
                load_receive(size, rd32(frame + 24));
                u8 *dst = (u8 *)(u64)addr;
                for (u32 i = 0; i < size; i++)
                    dst[i] = (u8)load_buf[i];
                if (crc32_bitwise(0, dst, size) != rd32(frame + 20))
                    st = ST_BAD_CRC;
                words = addr | (u64)size << 32;
                nb = 8;
            }
        } else if (op == OP_SET_BAUD && len == 4) {
            u32 b = rd32(frame + 16), d = uart_divisor(b);
            reply(op, ST_OK, APB0_HZ / d | (u64)d << 32, 8);
            uart_drain();
            delay_us(200);
            link_at(b);
            continue;
        } else if (op == OP_EXEC) {
            reply(op, ST_OK, 0, 0);
            uart_drain();
            __asm__ volatile("fence.i");
            ((void (*)(u32, u32))(u64)addr)(EXEC_MAGIC, baud);
        } else if (op != OP_NOP) {
            st = ST_BAD_CMD;
        }
        reply(op, st, words, nb);
    }
}
