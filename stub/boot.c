/* kflashpy bootstrap: the smallest program that gets the flasher running at full
 * baud. The mask ROM only takes 1 KiB frames at 115200 (~10 KiB/s), so the host
 * uploads this first; it switches the link to the baud rate patched into its header,
 * answers NOP, and takes SET_BAUD / SRAM_WRITE / EXEC (same framing as the flasher).
 * Kept small: every byte costs 87 us at 115200.
 * SPDX-License-Identifier: MIT
 */
#include "hw.h"

#define BOOT_MAX_FRAME (16 + 16384) /* SRAM_WRITE frames of up to 16 KiB */

extern const u32 _start[];
static u8 frame[BOOT_MAX_FRAME + 4] __attribute__((aligned(8)));
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

int main(void)
{
    clock_init();
    link_at(_start[2]);
    for (;;) {
        u32 n = recv_frame();
        u8 op = frame[0], st = ST_OK;
        u32 addr = rd32(frame + 8), len = rd32(frame + 12), nb = 0;
        u64 words = 0;
        if (n < 16 || len != n - 16 || crc32_bitwise(0, frame + 8, n - 8) != rd32(frame + 4)) {
            st = ST_BAD_CRC;
        } else if (op == OP_SRAM_WRITE) {
            u8 *dst = (u8 *)(u64)addr;
            for (u32 i = 0; i < len; i++)
                dst[i] = frame[16 + i];
            words = addr | (u64)len << 32;
            nb = 8;
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
