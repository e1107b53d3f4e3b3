/* kflashpy bootstrap: the smallest program that gets the flasher running at full
 * baud. The mask ROM only takes 1 KiB frames at 115200 (~10 KiB/s), so the host
 * uploads this (< 1 KiB) first; it switches the link to the baud rate patched into
 * its header, answers NOP, and takes SRAM_WRITE / EXEC (same framing as the flasher).
 * SPDX-License-Identifier: MIT
 */
#include "hw.h"

#define BOOT_MAX_FRAME (16 + 4096)

extern const u32 _start[];
static u8 frame[BOOT_MAX_FRAME + 4] __attribute__((aligned(8)));

void uart_poll(void)
{
}

#define rd32(p) (*(const u32 *)(p)) /* frame is aligned; fields at 4, 8, 12 */

/* one SLIP frame; oversize or badly escaped frames come back as length 0 */
static u32 recv_frame(void)
{
    u32 n = 0;
    int esc = 0, bad = 0;
    for (;;) {
        while (!(UART_LSR & LSR_DR))
            delay_us(4); /* a 16-byte FIFO lasts 53 us at 3 Mbaud */
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
            if (c == 0xDC)
                c = 0xC0;
            else if (c == 0xDD)
                c = 0xDB;
            else
                bad = 1;
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

int main(void)
{
    u32 baud = _start[2];
    clock_init();
    uart_init(baud);
    for (;;) {
        u32 n = recv_frame();
        u8 op = frame[0];
        if (n < 16) {
            if (op == OP_NOP)
                reply_status(OP_NOP, ST_OK);
            continue;
        }
        u32 addr = rd32(frame + 8), len = rd32(frame + 12);
        if (crc32_bitwise(0, frame + 8, n - 8) != rd32(frame + 4)) {
            reply_status(op, ST_BAD_CRC);
        } else if (op == OP_NOP) {
            reply_status(op, ST_OK);
        } else if (op == OP_SRAM_WRITE && len == n - 16) {
            u8 *dst = (u8 *)(u64)addr;
            for (u32 i = 0; i < len; i++)
                dst[i] = frame[16 + i];
            reply_begin(op, ST_OK);
            reply_u32(addr);
            reply_u32(len);
            reply_end();
        } else if (op == OP_SET_BAUD && len == 4 && n == 20) {
            u32 b = rd32(frame + 16), d = uart_divisor(b);
            reply_begin(op, ST_OK);
            reply_u32(apb0_hz() / d);
            reply_u32(d);
            reply_end();
            uart_drain();
            delay_us(200);
            uart_init(b);
            baud = b;
        } else if (op == OP_EXEC) {
            reply_status(op, ST_OK);
            uart_drain();
            __asm__ volatile("fence.i");
            ((void (*)(u32, u32))(u64)addr)(EXEC_MAGIC, baud);
        } else {
            reply_status(op, ST_BAD_CMD);
        }
    }
}
