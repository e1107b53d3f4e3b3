/* kflashpy flasher: the stage-2 program that writes, reads, hashes and erases the
 * on-board SPI NOR flash of a K210. No trap is ever taken (no ecall, mstatus.MIE stays
 * 0) and no floating point is used. The protocol is documented byte by byte in
 * docs/flasher-protocol.md: kflash-compatible opcodes 0xD2-0xD9 plus our own
 * extensions in 0xB0-0xBF.
 *
 * Pipelining: received frames land in NSLOT receive slots from inside every busy loop
 * (uart_poll), so the next frame arrives while the flash erases or programs the
 * previous one. Frames are processed strictly in arrival order, one reply each.
 *
 * Waiting: with nothing to compute, the core sleeps in wfi (sleep_until). The UART's
 * receive interrupt (FIFO half full, or bytes waiting 4 character times) goes through
 * the PLIC, the CLINT timer marks when a flash operation is due; both are enabled in
 * mie but not globally, so wfi resumes without a trap (docs/simulator.md, "The core
 * and the peripherals"). A wake serves eight bytes at a time, not one poll per us.
 * SPDX-License-Identifier: MIT
 */
#include "flasher.h"

#define PROTO_VERSION 3
#define FW_VERSION 1

#define CAP_READ (1u << 0)
#define CAP_HASH (1u << 1)
#define CAP_HASH_LIST (1u << 2)
#define CAP_DEFLATE (1u << 3)
#define CAP_ERASE (1u << 4)
#define CAP_CHIP_ERASE (1u << 5)
#define CAP_SRAM (1u << 6)
#define CAP_BAUD (1u << 7)
#define CAP_REBOOT (1u << 8)
#define CAP_PIPELINE (1u << 9)
#define CAP_WRITE_DIGEST (1u << 10)
#define CAP_DICT (1u << 11)
#define CAPS 0xFFFu

/* kflash-compatible */
#define OP_FLASH_ERASE 0xD3
#define OP_FLASH_WRITE 0xD4
#define OP_REBOOT 0xD5
#define OP_BAUD 0xD6
#define OP_FLASH_INIT 0xD7
#define OP_ERASE_NB 0xD8 /* PyPI kflash 1.1.6 stub meaning */
#define OP_STATUS 0xD9
/* kflashpy extensions */
#define OP_IDENTIFY 0xB0
#define OP_READ 0xB1
#define OP_READ_ACK 0xB2
#define OP_HASH 0xB3
#define OP_HASH_LIST 0xB4
#define OP_WRITE 0xB5
#define OP_WRITE_DEFLATE 0xB6
#define OP_ERASE 0xB7
#define OP_CHIP_ERASE 0xB8
#define OP_WRITE_DEFLATE_DICT 0xBC

#define NSLOT 4
#define WRITE_WINDOW 3
#define MAX_DATA 65536u
#define SLOT_CAP (16 + MAX_DATA + 64)
#define BLOCK 65536u
#define SECTOR 4096u
#define PAGE 256u
/* a write's pages read back from the flash differ from what was programmed */
#define ST_BAD_CHECK 0xE8
/* a BC frame names a dictionary the board does not hold */
#define ST_NO_DICT 0xE9
#define DICT 32768u /* the longest preset dictionary: DEFLATE's window */

/* SRAM the host may write with SRAM_WRITE: everything below the flasher */
#define SRAM_LO 0x80000000u
#define SRAM_HI LINK_BASE

/* 8- and 4-byte accesses to byte buffers (one guest store instead of several) */
typedef u64 __attribute__((may_alias)) dword;
typedef u32 __attribute__((may_alias)) word;

struct slot {
    u32 len;
    u32 state; /* 0 free, 1 filling, 2 queued, 3 in use */
    u8 data[SLOT_CAP] __attribute__((aligned(8)));
};

static struct slot slots[NSLOT];
static u8 queue[NSLOT];
static u32 q_head, q_count;
static int rx_slot = -1;
static u32 rx_len;
static int rx_esc, rx_skip = 1;

static u8 unit_buf[BLOCK] __attribute__((aligned(8))); /* old + merged flash content */
/* decoded frames go to inflate_buf; the dictionary (the tail of the last write frame
 * decoded) sits right in front of it, where back references reach it */
static u8 inflate_mem[DICT + BLOCK] __attribute__((aligned(8)));
#define inflate_buf (inflate_mem + DICT)
static u32 dict_len, dict_end; /* its length; the flash address its bytes ended at */
static u8 page_dirty[BLOCK / PAGE];

static u32 flash_size = 16u << 20;
static u8 jedec[3], uid[8];
static int flash_ok;

/* ---------------------------------------------------------------- receive -- */

static int slot_alloc(void)
{
    for (int i = 0; i < NSLOT; i++)
        if (slots[i].state == 0) {
            slots[i].state = 1;
            return i;
        }
    return -1;
}

static void rx_byte(u8 c)
{
    if (c == 0xC0) {
        if (rx_slot >= 0 && rx_len && !rx_skip && !rx_esc) {
            slots[rx_slot].len = rx_len;
            slots[rx_slot].state = 2;
            queue[(q_head + q_count++) % NSLOT] = (u8)rx_slot;
            rx_slot = -1;
        }
        if (rx_slot < 0)
            rx_slot = slot_alloc();
        rx_len = 0;
        rx_esc = 0;
        rx_skip = rx_slot < 0; /* no free slot: this frame is dropped */
        return;
    }
    if (rx_skip)
        return;
    if (rx_esc) {
        rx_esc = 0;
        if (c == 0xDC)
            c = 0xC0;
        else if (c == 0xDD)
            c = 0xDB;
        else {
            rx_skip = 1;
            return;
        }
    } else if (c == 0xDB) {
        rx_esc = 1;
        return;
    }
    if (rx_len >= SLOT_CAP) {
        rx_skip = 1;
        return;
    }
    slots[rx_slot].data[rx_len++] = c;
}

static void bg_service(void);
static inline int bg_ready(void);

/* MTIME read as its low word, one bus access instead of two, and extended in software:
 * the low word going back is a wrap (every 2^32 ticks, 550 s), so it must be read at
 * least that often. Every wait has a deadline but sleep_until(NEVER), whose wake reads
 * the whole counter again (clock_sync). */
static u32 clk_hi, clk_lo;

static __attribute__((noinline)) u64 now(void)
{
    u32 lo = MTIME_LO;
    clk_hi += lo < clk_lo;
    clk_lo = lo;
    return (u64)clk_hi << 32 | lo;
}

static void clock_sync(void)
{
    u64 t = MTIME;
    clk_hi = (u32)(t >> 32);
    clk_lo = (u32)t;
}

/* Receiving by DMA. Once a write frame's 16-byte header is decoded, its length says how
 * many wire bytes it needs at least (the data still to come and the closing C0; escapes
 * only add bytes, so blocks of that many in all never take bytes of the next frame):
 * DMAC channel RXD_CH moves them from RBR into rxd, one 32-bit word per byte, in blocks
 * of up to RXD_HALF words that alternate between the two halves of rxd, while the core
 * computes or sleeps. The words are pre-filled with RXD_EMPTY (a received byte reads
 * 0x000000XX), so the polls decode what has landed without an MMIO access; a block is
 * complete when its last word has landed, and the next one is armed in the other half
 * before the completed one is decoded. The block's done interrupt wakes wfi. Headers,
 * short frames and what a frame needs beyond its plan (its escapes) come through the
 * FIFO (RFL, RBR). rxd is only ever reached through the uncached SRAM view (the DMAC
 * writes behind the cache) and lies past what start.S zeroes (link.ld, .dma), so no
 * cache line of it can be written back over what the DMAC brought.
 * docs/flasher-protocol.md, "1. Design". */
#define RXD_CH RX_DMA_CH
#define RXD_HALF 1024u /* decoded once the next block is armed: no FIFO margin to keep */
/* A plan's last block is decoded while the FIFO takes what follows (the frame's
 * escapes, its C0, the next frame): at most this many words, which decode in ~25 us
 * even all escapes, within the FIFO's 53 us at 3 Mbaud */
#define RXD_TAIL 256u
#define RXD_BLOCK_US 22000u /* a block's longest wire time (256 bytes at 115200) */
#define RXD_MIN 64u   /* fewer wire bytes still needed: the FIFO takes them */
#define RXD_EMPTY 0xFFFFFFFFu
#define RXD_GRACE_US 2000u /* a block this late past its last byte was cut short */
static u32 rxd_mem[2 * RXD_HALF] __attribute__((section(".dma"), aligned(8)));
#define rxd ((volatile u32 *)((u64)rxd_mem - 0x40000000u))
static u32 rxd_n[2], rxd_i[2]; /* per half: its block's words, words decoded */
static u32 rxd_h;              /* the half of the newest block */
static u32 rxd_busy;           /* the newest block is armed, its last word not yet seen */
static u32 rxd_rest;           /* wire bytes the frame needs after the newest block, at least */
static u32 rxd_got, rxd_seen;  /* words decoded in all; rxd_got at the last stall check */
static u64 rxd_check;          /* now() of the next stall check */
static u32 baud = 115200;

static void rxd_init(void)
{
    SYSCTL_CLK_EN_PERI |= PERI_DMA;
    for (u32 i = 0; i < 2 * RXD_HALF; i++)
        rxd[i] = RXD_EMPTY;
    rx_dma_init();
}

/* A channel's block size, written only when it changes: the DMAC keeps BLOCK_TS as
 * written (its progress shows in CH_STATUS), and a burn's blocks are mostly of one size
 * per channel (a page, a receive half). */
static u32 dma_items[3];

static void dma_block(u32 ch, u32 items)
{
    if (dma_items[ch] != items)
        DMAC_CH(ch, CH_BLOCK_TS) = (dma_items[ch] = items) - 1;
}

/* when `words` more bytes should have come, plus the grace */
static void rxd_due(u32 words)
{
    rxd_seen = rxd_got;
    rxd_check = now() + TICKS(RXD_GRACE_US) + (u64)words * (CPU_HZ / 5u) / baud;
}

/* arm the next block, in the other half, for up to `need` wire bytes */
static void rxd_arm(u32 need)
{
    u32 cap = (u32)((u64)baud * RXD_BLOCK_US / 10000000u), h = rxd_h ^ 1;
    u32 k = need < RXD_HALF ? need : RXD_HALF;
    if (need > RXD_TAIL && need - k < RXD_TAIL)
        k = need - RXD_TAIL;
    if (k > cap && cap >= RXD_MIN)
        k = cap;
    while (DMAC_CHEN & (1u << RXD_CH)) /* the last block's channel has stopped */
        ;
    DMAC_CH(RXD_CH, CH_DAR) = (u32)(u64)(rxd_mem + h * RXD_HALF);
    dma_block(RXD_CH, k);
    DMAC_CHEN = 0x101u << RXD_CH;
    rxd_n[h] = k;
    rxd_i[h] = 0;
    rxd_h = h;
    rxd_busy = 1;
    rxd_rest = need - k;
    rxd_due(k);
}

/* a word that has landed and is neither C0 nor DB (RXD_EMPTY is neither too) */
#define RXD_PLAIN(v) ((v) < 0xC0u || ((v) <= 0xFFu && (v) != 0xC0u && (v) != 0xDBu))
#define ONES 0x0101010101010101ul
/* does one of the 8 bytes of x equal c? (no false answer either way) */
#define HAS_BYTE(x, c) ((((x) ^ (c) * ONES) - ONES) & ~((x) ^ (c) * ONES) & 0x80 * ONES)

/* Decode the words of half h's block that have landed from p on, then pre-fill them
 * again. The bulk of a write frame is runs of plain bytes (neither C0 nor DB) into an
 * open slot: eight landed words (the eighth has: they land in order) are packed into a
 * 64-bit word, checked for C0 and DB at once and stored with one store; the edges of a
 * run go a byte at a time, and the words are pre-filled two to a 64-bit store. (Each
 * guest store costs an emulator as much as a dozen plain instructions,
 * docs/simulator.md: per byte this makes 0.6 stores instead of 3, and 7 instructions
 * instead of 40.) C0, DB, the byte after DB and a frame being dropped go through
 * rx_byte. */
static __attribute__((noinline)) void rxd_run(u32 h, volatile u32 *p)
{
    volatile u32 *w = rxd + h * RXD_HALF, *e = w + rxd_n[h], *p0 = p;
    while (p < e) {
        u32 v = *p;
        if (v == RXD_EMPTY)
            break;
        u32 len = rx_len;
        if (!RXD_PLAIN(v) || rx_skip || rx_esc || len >= SLOT_CAP) {
            rx_byte((u8)v);
            p++;
            continue;
        }
        volatile u32 *q = p, *stop = (u64)(e - p) < SLOT_CAP - len ? e : p + (SLOT_CAP - len);
        u8 *d = slots[rx_slot].data + len;
        for (;;) {
            if (!((u64)d & 7) && stop - q >= 8 && q[7] != RXD_EMPTY) {
                u64 x = (u64)q[0] | (u64)q[1] << 8 | (u64)q[2] << 16 | (u64)q[3] << 24 |
                        (u64)q[4] << 32 | (u64)q[5] << 40 | (u64)q[6] << 48 | (u64)q[7] << 56;
                if (!(HAS_BYTE(x, 0xC0) | HAS_BYTE(x, 0xDB))) {
                    *(dword *)(void *)d = x;
                    d += 8;
                    q += 8;
                    continue;
                }
            }
            if (q == stop || !RXD_PLAIN(*q))
                break;
            *d++ = (u8)*q++;
        }
        rx_len = len + (u32)(q - p);
        p = q;
    }
    u32 k = (u32)(p - p0);
    rxd_got += k;
    rxd_i[h] += k;
    if ((u64)p0 & 7 && p0 < p)
        *p0++ = RXD_EMPTY;
    for (; p - p0 >= 2; p0 += 2)
        *(volatile u64 *)p0 = ~(u64)0;
    if (p0 < p)
        *p0 = RXD_EMPTY;
}

/* decode what has landed in half h (the usual poll finds nothing new: no call) */
static inline void rxd_decode(u32 h)
{
    volatile u32 *p = rxd + h * RXD_HALF + rxd_i[h];
    if (rxd_i[h] < rxd_n[h] && *p != RXD_EMPTY)
        rxd_run(h, p);
}

/* Stop the channel and decode what it brought: the plan for the frame is over. */
static void rxd_stop(void)
{
    DMAC_CHEN = 0x100u << RXD_CH;
    while (DMAC_CHEN & (1u << RXD_CH))
        ;
    rxd_decode(rxd_h);
    rxd_n[rxd_h] = rxd_i[rxd_h];
    rxd_busy = rxd_rest = 0;
    DMAC_CH(RXD_CH, CH_INTCLEAR) = ~0u;
}

static u32 rxd_need(void);

/* Decode what the blocks hold, oldest first. The older block is complete: once it is
 * decoded, its half is free, and if the newest block is complete too (its done
 * interrupt then acknowledged) and the frame's plan goes on, the next block is armed
 * there before the newest one is decoded. */
static void rxd_take(void)
{
    u32 h = rxd_h, got = rxd_got;
    rxd_decode(h ^ 1);
    if (rxd_busy && (rxd_i[h] == rxd_n[h] || rxd[h * RXD_HALF + rxd_n[h] - 1] != RXD_EMPTY)) {
        rxd_busy = 0;
        DMAC_CH(RXD_CH, CH_INTCLEAR) = ~0u;
        if (rxd_rest)
            rxd_arm(rxd_rest);
    }
    rxd_decode(h);
    /* The plan is a lower bound of what the frame still brings (an escape only makes
     * the frame need more), so the frame needing less than what is still planned means
     * it ended early (damaged, or cut by the host): the plan would take bytes of later
     * frames with no wake when they come. The FIFO takes them from here. (Only a decode
     * changes either side: looked at when something was decoded.) */
    if (rxd_busy && rxd_got != got && rxd_need() < rxd_n[rxd_h] - rxd_i[rxd_h] + rxd_rest)
        rxd_stop();
}

/* After a wake with a block armed: past its stall check without a word since the last
 * check, the line has stopped short of the block (a byte lost on the way, or a header
 * whose length was damaged): stop the channel and decode what came; the frame is then
 * ended by its C0 as any damaged frame. */
static void rxd_stall_check(void)
{
    u32 h = rxd_h;
    /* (a wake at the block's end, the usual one, needs no look at the clock) */
    if (rxd[h * RXD_HALF + rxd_n[h] - 1] != RXD_EMPTY || now() < rxd_check)
        return;
    rxd_take();
    if (!rxd_busy)
        return;
    if (rxd_got != rxd_seen) {
        rxd_due(rxd_n[rxd_h] - rxd_i[rxd_h]);
        return;
    }
    rxd_stop();
}

/* wire bytes the frame being received still needs at least, if it is a write whose
 * header has come in (0 otherwise) */
static u32 rxd_need(void)
{
    if (rx_slot < 0 || rx_skip || rx_len < 16)
        return 0;
    const u8 *h = slots[rx_slot].data;
    u32 n = h[12] | (h[13] << 8) | (h[14] << 16) | ((u32)h[15] << 24);
    u8 op = h[0];
    int write = op == OP_FLASH_WRITE || op == OP_WRITE || op == OP_WRITE_DEFLATE ||
                op == OP_WRITE_DEFLATE_DICT || op == OP_SRAM_WRITE;
    if (!write || h[1] || n > MAX_DATA || rx_len > 16 + n)
        return 0;
    return 16 + n - rx_len + 1;
}

/* has a word landed that is not decoded yet, or has the newest block been decoded to
 * its end (then its plan goes on)? A poll's usual answer is no: a few loads, no call */
static inline int rxd_due_now(void)
{
    for (u32 h = 0; h < 2; h++)
        if (rxd_i[h] < rxd_n[h] ? rxd[h * RXD_HALF + rxd_i[h]] != RXD_EMPTY
                                : rxd_busy && h == rxd_h)
            return 1;
    return 0;
}

/* no block armed: what the receive FIFO holds (its level read once, then one RBR read
 * a byte), then a block for the rest of a write frame */
static void uart_fifo(void)
{
    for (u32 n = UART_RFL; n; n--)
        rx_byte((u8)UART_RBR);
    u32 need = rxd_need();
    if (need >= RXD_MIN)
        rxd_arm(need);
}

/* Take what has been received: the armed block's words, else what the receive FIFO
 * holds; then the background pages' turn. The usual poll (a block armed, nothing new)
 * makes no call and no store: an emulator pays for each guest store and for the
 * registers a call saves on the stack. */
static __attribute__((noinline)) void uart_poll_work(void)
{
    rxd_take();
    if (!rxd_busy)
        uart_fifo();
    if (bg_ready())
        bg_service();
}

void uart_poll(void)
{
    if (rxd_due_now() || !rxd_busy || bg_ready())
        uart_poll_work();
}

#define NEVER (~(u64)0)
static u32 cmp_lo, cmp_hi; /* MTIMECMP's halves as last written */

/* Route the receive interrupt to wake wfi: RX trigger level at half the FIFO (8 bytes
 * are 27 us at 3 Mbaud, 8 more fit before an overrun), ERBFI (which also raises the
 * character timeout), PLIC source enabled for hart 0 M-mode above threshold 0, MEIE
 * and MTIE in mie. The FIFOs stay enabled, so bytes already received are kept. */
static void link_wake_init(void)
{
    UART_FCR = FCR_FIFO_ON | FCR_RX_HALF;
    UART_IER = IER_PTIME | IER_ERBFI;
    PLIC_PRIORITY(UART3_IRQ) = 1;
    PLIC_ENABLE0 |= 1u << UART3_IRQ;
    PLIC_THRESHOLD = 0;
    MTIMECMP_HI = cmp_hi = ~0u; /* never */
    MTIMECMP_LO = 0;
    clock_sync();
    __asm__ volatile("csrs mie, %0" ::"r"(MIE_MEIE | MIE_MTIE));
}

/* Sleep until the link needs serving or now() reaches `deadline` (NEVER: no deadline);
 * the caller has just drained the FIFO (uart_poll) and checks its own condition again
 * after the wake. The PLIC keeps a source pending until it is claimed: the claim and
 * completion here acknowledge the last wake (the UART raises it again if bytes came in
 * meanwhile), so wfi sleeps. A wake with nothing to do costs one round of the caller. */
static __attribute__((noinline)) void sleep_until(u64 deadline)
{
    u32 id = PLIC_CLAIM;
    if (id)
        PLIC_CLAIM = id;
    int capped = rxd_busy && rxd_check < deadline; /* not past the block's stall check */
    if (capped)
        deadline = rxd_check;
    /* only the halves that change; no deadline: the high word all ones, the low one
     * left as it is (the compare value is complete before wfi) */
    u32 hi = (u32)(deadline >> 32), lo = (u32)deadline;
    if (hi != ~0u && lo != cmp_lo)
        MTIMECMP_LO = cmp_lo = lo;
    if (hi != cmp_hi)
        MTIMECMP_HI = cmp_hi = hi;
    __asm__ volatile("wfi");
    if (deadline == NEVER)
        clock_sync();
    if (capped)
        rxd_stall_check();
}

/* nothing to do until a frame is complete */
static void idle(void)
{
    uart_poll();
    while (!q_count) {
        sleep_until(NEVER);
        uart_poll();
    }
}

static struct slot *queue_peek(void)
{
    return q_count ? &slots[queue[q_head]] : 0;
}

static struct slot *queue_pop(void)
{
    struct slot *s = &slots[queue[q_head]];
    q_head = (q_head + 1) % NSLOT;
    q_count--;
    s->state = 3;
    return s;
}

static void slot_free(struct slot *s)
{
    s->state = 0;
}

/* ------------------------------------------------------------------ CRC-32 -- */

/* Slicing by 8: crc_table[k][i] is the CRC of byte i followed by k zero bytes, so
 * eight bytes take eight independent lookups instead of eight dependent ones (about 5
 * instructions a byte instead of 9: every frame's CRC is checked on the board) */
static u32 crc_table[8][256];

static u32 crc32_table(u32 crc, const u8 *p, u32 n)
{
    const u32(*t)[256] = crc_table;
    crc = ~crc;
    for (; n && ((u64)p & 7); n--)
        crc = t[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    for (; n >= 8; n -= 8, p += 8) {
        u64 v = *(const dword *)(const void *)p ^ crc;
        crc = t[7][v & 0xFF] ^ t[6][v >> 8 & 0xFF] ^ t[5][v >> 16 & 0xFF] ^ t[4][v >> 24 & 0xFF] ^
              t[3][v >> 32 & 0xFF] ^ t[2][v >> 40 & 0xFF] ^ t[1][v >> 48 & 0xFF] ^ t[0][v >> 56];
    }
    for (; n; n--)
        crc = t[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

static void crc_init(void)
{
    for (u32 i = 0; i < 256; i++) {
        u32 c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & -(c & 1));
        crc_table[0][i] = c;
    }
    for (u32 k = 1; k < 8; k++)
        for (u32 i = 0; i < 256; i++) {
            u32 c = crc_table[k - 1][i];
            crc_table[k][i] = crc_table[0][c & 0xFF] ^ (c >> 8);
        }
    reply_crc_fn = crc32_table;
}

static u32 crc32_polled(const u8 *p, u32 n)
{
    u32 crc = 0;
    while (n) {
        u32 k = n < 512 ? n : 512; /* 512 B take ~6 us: room for a background step */
        crc = crc32_table(crc, p, k);
        p += k;
        n -= k;
        uart_poll();
    }
    return crc;
}

/* -------------------------------------------------------------- SPI flash -- */

/* Bulk transfers go by DMA: DMAC channel SPI_TX_CH moves the frames of a page program
 * from memory to DR, SPI_RX_CH those of a read from DR to memory, one 32-bit frame per
 * memory word (see spi_dma for how the core waits). Channel 0 is the link's. A frame
 * goes out most significant byte first, so a word holds its 4 flash bytes swapped.
 * docs/flasher-protocol.md, "SPI flash". */
#define SPI_TX_CH 1u
#define SPI_RX_CH 2u

static void spi_stop(void)
{
    SPI_SER = 0;
    SPI_SSIENR = 0;
}

/* CTRLR0, CTRLR1 and SPI_CTRLR0 as last written (forgotten at the SPI3 reset): a
 * transaction writes only those that change, and SPI_CTRLR0 (the enhanced format's
 * instruction, address and wait fields) only for a dual/quad one: standard transfers
 * ignore it. Every transaction ends with spi_stop, so the controller is already
 * disabled, as they must be written. */
static u32 spi_regs[3];
#define SPI_SET(i, reg, v)            \
    if (spi_regs[i] != (v))           \
        reg = spi_regs[i] = (v)

static void spi_setup(u32 ctrlr0, u32 ctrlr1, u32 spi_ctrlr0)
{
    SPI_SET(0, SPI_CTRLR0, ctrlr0);
    SPI_SET(1, SPI_CTRLR1, ctrlr1);
    if (ctrlr0 >> 22 & 3) /* FRF: not standard */
        SPI_SET(2, SPI_SPI_CTRLR0, spi_ctrlr0);
    SPI_SSIENR = 1;
}

static void spi_start(u32 tmod, u32 frame_bits, u32 rx_frames)
{
    /* standard SPI */
    spi_setup((tmod << 10) | (frame_bits - 1), rx_frames ? rx_frames - 1 : 0, 0);
}

/* transmit-only transaction of 8-bit frames: command bytes, then data */
static void spi_send(const u8 *cmd, u32 nc, const u8 *data, u32 nd)
{
    u32 total = nc + nd, i = 0;
    spi_start(1, 8, 0);
    while (i < total && i < 32) {
        SPI_DR = i < nc ? cmd[i] : data[i - nc];
        i++;
    }
    SPI_SER = 1;
    while (i < total) {
        u32 room = 32 - SPI_TXFLR;
        while (room-- && i < total) {
            SPI_DR = i < nc ? cmd[i] : data[i - nc];
            i++;
        }
        uart_poll(); /* while the SPI shifts out a FIFO's worth */
    }
    while ((SPI_SR & 5) != 4)
        ;
    spi_stop();
}

/* "EEPROM read" transaction of 8-bit frames: command bytes out, n bytes in */
static void spi_recv(const u8 *cmd, u32 nc, u8 *out, u32 n)
{
    spi_start(3, 8, n);
    for (u32 i = 0; i < nc; i++)
        SPI_DR = cmd[i];
    SPI_SER = 1;
    for (u32 got = 0; got < n;) {
        u32 lvl = SPI_RXFLR;
        while (lvl-- && got < n)
            out[got++] = (u8)SPI_DR;
    }
    spi_stop();
}

/* The frames of a DMA transfer (a page program, or a read of up to a sector): where
 * start.S never writes (link.ld .dma) and reached only through the uncached SRAM view,
 * as the DMAC moves data behind the core's cache. */
static u32 spi_buf_mem[SECTOR / 4] __attribute__((section(".dma"), aligned(64)));
#define spi_buf ((volatile u32 *)((u64)spi_buf_mem - 0x40000000u))

static void spi_dma_init(void)
{
    SYSCTL_DMA_SEL0 = (SYSCTL_DMA_SEL0 & ~(0xFFFu << 6 * SPI_TX_CH)) |
                      DMA_REQ_SSI3_TX << 6 * SPI_TX_CH | DMA_REQ_SSI3_RX << 6 * SPI_RX_CH;
    DMAC_CFG = 3; /* DMAC_EN | INT_EN */
    /* both: DMS = master 2, 32-bit items; TX: DR fixed, bursts of 4 (DMATDLR 4: the
     * FIFO never runs dry, which would end the transfer); RX: DR fixed, bursts of 1 */
    DMAC_CH(SPI_TX_CH, CH_CTL) = 1u << 2 | 1u << 6 | 2u << 8 | 2u << 11 | 1u << 14 | 1u << 18;
    DMAC_CH(SPI_RX_CH, CH_CTL) = 1u << 2 | 1u << 4 | 2u << 8 | 2u << 11;
    /* TT_FC memory -> peripheral / peripheral -> memory, hardware handshake on the
     * peripheral side, SRC_PER = DST_PER = the channel */
    DMAC_CH(SPI_TX_CH, CH_CFG + 4) = 1u | 1u << 3 | SPI_TX_CH << 7 | SPI_TX_CH << 12;
    DMAC_CH(SPI_RX_CH, CH_CFG + 4) = 2u | 1u << 4 | SPI_RX_CH << 7 | SPI_RX_CH << 12;
    DMAC_CH(SPI_TX_CH, CH_DAR) = SPI3 + 0x60;
    DMAC_CH(SPI_RX_CH, CH_SAR) = SPI3 + 0x60;
    for (u32 ch = SPI_TX_CH; ch <= SPI_RX_CH; ch++) {
        DMAC_CH(ch, CH_INTSTATUS_EN) = DMA_TFR_DONE;
        DMAC_CH(ch, CH_INTSIGNAL_EN) = DMA_TFR_DONE;
        PLIC_PRIORITY(DMA_IRQ(ch)) = 1;
    }
    PLIC_ENABLE0 |= 1u << DMA_IRQ(SPI_TX_CH) | 1u << DMA_IRQ(SPI_RX_CH);
    SPI_DMATDLR = 4;
}

/* Move `words` frames of the open transaction between DR and spi_buf (rx: into it) by
 * DMA and end the transaction. A long transfer (`sleep`) serves the link and sleeps
 * until the block's done interrupt; a short one (a quad page: 11 us, well inside the
 * UART FIFO's 53 us at 3 Mbaud) is waited for on SR. */
static void spi_dma(u32 rx, u32 words, int sleep)
{
    u32 ch = rx ? SPI_RX_CH : SPI_TX_CH;
    DMAC_CH(ch, rx ? CH_DAR : CH_SAR) = (u32)(u64)spi_buf_mem;
    dma_block(ch, words);
    SPI_DMACR = rx ? 1 : 2;
    DMAC_CHEN = 0x101u << ch;
    SPI_SER = 1;
    while (sleep && !(DMAC_CH(ch, CH_INTSTATUS) & DMA_TFR_DONE)) {
        uart_poll();
        sleep_until(NEVER);
    }
    while ((SPI_SR & 5) != 4) /* the last frames leave the FIFO */
        ;
    while (!(DMAC_CH(ch, CH_INTSTATUS) & DMA_TFR_DONE)) /* the last item is in memory */
        ;
    DMAC_CH(ch, CH_INTCLEAR) = ~0u; /* else every later wfi would end at once */
    spi_stop();
    __asm__ volatile("" ::: "memory"); /* spi_buf is read after this, not before */
}

/* two frames (or 8 bytes) with each 32-bit half byte-reversed: a frame's most
 * significant byte goes first on the wire, so that is flash order both ways */
static u64 swap_halves(u64 v)
{
    v = (v >> 8 & 0x00FF00FF00FF00FFul) | (v & 0x00FF00FF00FF00FFul) << 8;
    return (v >> 16 & 0x0000FFFF0000FFFFul) | (v & 0x0000FFFF0000FFFFul) << 16;
}

/* The `n` bytes a read left in spi_buf (n a multiple of 4) to out (8-byte aligned, as
 * every buffer a read goes to is) in flash order, 1 KiB (~7 us) between link polls: two
 * frames to a 64-bit store (an emulator pays for each guest store, docs/simulator.md) */
static void spi_take(u8 *out, u32 n)
{
    volatile const u64 *f = (volatile const u64 *)spi_buf;
    dword *o = (dword *)(void *)out;
    for (u32 i = 0; i < n / 8; i++) {
        o[i] = swap_halves(f[i]);
        if (i % 128 == 127)
            uart_poll();
    }
    if (n & 4)
        *(word *)(void *)(out + n - 4) = (u32)swap_halves(spi_buf[n / 4 - 1]);
}

/* Bulk transfers in 32-bit frames (4 bytes per FIFO entry), reads of n <= SECTOR bytes
 * into spi_buf: the instruction and 24-bit address form the first frame. (The reads are
 * called from several places: kept out of line, the flasher stays within 16 KiB.) */
static __attribute__((noinline)) void spi_read32(u32 insn_addr, u32 n)
{
    spi_start(3, 32, n / 4);
    SPI_DR = insn_addr;
    spi_dma(1, n / 4, 1);
}

/* Quad transaction (DW SSI enhanced mode) of 32-bit frames: the instruction and the
 * 24-bit address go on one line (TX entries 0 and 1), then `wait` dummy clocks, then
 * the data on four lines: 4 bits per clock instead of 1. */
static void spi_start_quad(u32 tmod, u32 wait, u32 rx_words, u8 inst, u32 addr)
{
    spi_setup((2u << 22) /* FRF quad */ | (tmod << 10) | 31u, rx_words ? rx_words - 1 : 0,
              (wait << 11) | (2u << 8) /* 8-bit inst */ | (6u << 2) /* 24-bit addr */);
    SPI_DR = inst;
    SPI_DR = addr;
}

/* quad output fast read (0x6B): 8 dummy clocks */
static __attribute__((noinline)) void spi_read_quad(u32 addr, u32 n)
{
    spi_start_quad(2 /* RX only */, 8, n / 4, 0x6B, addr);
    spi_dma(1, n / 4, n > PAGE);
}

/* the data frames of a page program (data 8-byte aligned: a page of unit_buf or
 * inflate_buf), behind the instruction and address queued; on one line (43 us) the
 * link is served meanwhile */
static void spi_page_out(const u8 *data, int sleep)
{
    volatile u64 *f = (volatile u64 *)spi_buf;
    for (u32 i = 0; i < PAGE / 8; i++)
        f[i] = swap_halves(((const dword *)(const void *)data)[i]);
    spi_dma(0, PAGE / 4, sleep);
}

static void spi_write32(u32 insn_addr, const u8 *data)
{
    spi_start(1, 32, 0);
    SPI_DR = insn_addr;
    spi_page_out(data, 1);
}

/* quad page program (0x32) */
static void spi_write_quad(u32 addr, const u8 *data)
{
    spi_start_quad(1 /* TX only */, 0, 0, 0x32, addr);
    spi_page_out(data, 0);
}

static void cmd_addr(u8 *c, u8 op, u32 addr)
{
    c[0] = op;
    c[1] = (u8)(addr >> 16);
    c[2] = (u8)(addr >> 8);
    c[3] = (u8)addr;
}

static u8 flash_sr1(void)
{
    u8 c = 0x05, v;
    spi_recv(&c, 1, &v, 1);
    return v;
}

/* ---------------------------------------------------------- SHA-256 engine -- */

/* The K210's SHA-256 engine, fed by DMA (channel SHA_CH, request SHA_RX, bursts of 16
 * words as the Kendryte FreeRTOS SDK's driver feeds it): the core copies up to 4 KiB
 * at a time next to it and pads the message, the engine hashes while the core serves
 * the link and the flash (software takes ~64 cycles a byte). The DMAC reads memory
 * behind the core's cache, so the bytes go through the uncached view, into a buffer
 * past what start.S zeroes (link.ld .dma). The standalone SDK feeds the engine by PIO
 * only, so the DMA mode is not proven on every board: sha_hw_init hashes a test
 * message through it (in two DMA blocks, as a hash does) and compares with sha256.c.
 * On a mismatch or a timeout, and if the engine later fails to finish a block,
 * digests stay in software for the session. */
#define SHA_CH 3u
#define SHX_CHUNK SECTOR
#define SHX_MAX (65535u * 64 - 72) /* data_cnt is 16 bits */
/* the expected time of k bytes (mtime ticks, +1): 128 APB0 cycles per 64-byte block,
 * the simulator's figure (docs/simulator.md); a block is waited for 1 ms longer */
#define SHX_TICKS(k) (((u64)(k) * 21 >> 8) + 1) /* 0.082 per byte: 0.08 rounded up */
static int sha_hw; /* digests by the engine */
static u32 shx_mem[(SHX_CHUNK + 64) / 4] __attribute__((section(".dma"), aligned(64)));
#define shx_buf ((u8 *)((u64)shx_mem - 0x40000000u))
static u32 shx_fed, shx_busy;
static u64 shx_due;

/* a message of n bytes follows */
static void shx_begin(u32 n)
{
    SHA_NUM = (n + 72) / 64;
    SHA_FUNC0 = 1u << 16 | 1u; /* bytes in memory order; start */
    shx_fed = 0;
}

/* give the engine up: stop the channel, software from now on */
static void shx_abort(void)
{
    DMAC_CHEN = 0x100u << SHA_CH;
    while (DMAC_CHEN & (1u << SHA_CH))
        ;
    DMAC_CH(SHA_CH, CH_INTCLEAR) = ~0u;
    SHA_FUNC1 = 0;
    shx_busy = sha_hw = 0;
}

/* has the engine taken the last block handed over? */
static int shx_idle(void)
{
    if (shx_busy && DMAC_CH(SHA_CH, CH_INTSTATUS) & DMA_TFR_DONE) {
        DMAC_CH(SHA_CH, CH_INTCLEAR) = ~0u;
        shx_busy = 0;
    }
    return !shx_busy;
}

/* wait for that, serving the link: 0, or -1 (given up) 1 ms past its expected end */
static int shx_wait(void)
{
    while (!shx_idle()) {
        u64 t = now();
        if (t > shx_due + TICKS(1000)) {
            shx_abort();
            return -1;
        }
        uart_poll();
        sleep_until(t < shx_due ? shx_due : t + TICKS(20));
    }
    return 0;
}

/* hand p[0, k) over once the engine has taken the last block: the message's end if
 * `last` (padded here), else k is a multiple of 64. 0, or -1 (given up) */
static int shx_put(const u8 *p, u64 k, int last)
{
    u8 *b = shx_buf;
    u64 i = 0;
    if (shx_wait())
        return -1;
    if (!((u64)p & 7))
        for (; i + 8 <= k; i += 8)
            *(dword *)(void *)(b + i) = *(const dword *)(const void *)(p + i);
    for (; i < k; i++)
        b[i] = p[i];
    shx_fed += k;
    if (last) {
        u64 bits = (u64)shx_fed * 8;
        b[k++] = 0x80;
        while (k % 64 != 56)
            b[k++] = 0;
        for (int j = 56; j >= 0; j -= 8)
            b[k++] = (u8)(bits >> j);
    }
    __asm__ volatile("fence" ::: "memory"); /* the bytes are in SRAM before the DMAC looks */
    DMAC_CH(SHA_CH, CH_SAR) = (u32)(u64)shx_mem;
    DMAC_CH(SHA_CH, CH_BLOCK_TS) = k / 4 - 1;
    DMAC_CHEN = 0x101u << SHA_CH;
    SHA_FUNC1 = 1; /* after the channel, as the FreeRTOS SDK; it stays set */
    shx_busy = 1;
    shx_due = now() + SHX_TICKS(k);
    return 0;
}

/* the digest, once the engine is done: 0, or -1 (given up) */
static int shx_end(u8 out[32])
{
    if (shx_wait())
        return -1;
    for (u32 i = 0; !(SHA_FUNC0 & 1); i++) /* its last rounds */
        if (i > 100000) {
            shx_abort();
            return -1;
        }
    SHA_FUNC1 = 0;
    for (int i = 0; i < 32; i++)
        out[i] = (u8)(SHA_RESULT(7 - i / 4) >> (8 * (i % 4)));
    return 0;
}

/* configure the channel and check the engine on a test message of 134 bytes (a block,
 * then 70 bytes and the padding) against sha256.c */
static void sha_hw_init(void)
{
    struct sha256 s;
    u8 v[134], sw[32], hw[32];
    SYSCTL_CLK_EN_PERI |= PERI_SHA;
    SYSCTL_DMA_SEL0 = (SYSCTL_DMA_SEL0 & ~(0x3Fu << 6 * SHA_CH)) | DMA_REQ_SHA_RX << 6 * SHA_CH;
    /* DMS = master 2, DAR fixed, 32-bit items, bursts of 16; memory -> peripheral, the
     * destination on hardware handshake interface SHA_CH; no interrupt (polled) */
    DMAC_CH(SHA_CH, CH_CTL) = 1u << 2 | 1u << 6 | 2u << 8 | 2u << 11 | 3u << 14 | 3u << 18;
    DMAC_CH(SHA_CH, CH_CFG + 4) = 1u | 1u << 3 | SHA_CH << 7 | SHA_CH << 12;
    DMAC_CH(SHA_CH, CH_DAR) = SHA_DATA_IN;
    DMAC_CH(SHA_CH, CH_INTSTATUS_EN) = DMA_TFR_DONE;
    for (u32 i = 0; i < sizeof(v); i++)
        v[i] = (u8)(i * 0x9D + 0x35);
    sha256_init(&s);
    sha256_update(&s, v, sizeof(v));
    sha_hw = 1;
    shx_begin(sizeof(v));
    if (!shx_put(v, 64, 0))
        shx_put(v + 64, sizeof(v) - 64, 1);
    sha256_final(&s, sw);
    if (sha_hw && !shx_end(hw))
        for (int i = 0; i < 32; i++)
            sha_hw &= hw[i] == sw[i];
}

/* ------------------------------------------------------------ write check -- */

/* Every page a write programs or erases is read back and compared with what it should
 * hold; the pages it leaves alone were read from the flash to merge and held the new
 * bytes already, or lie in a sector a hash list read erased with nothing programmed
 * there since (erased_known). A write frame's acknowledgement then carries the SHA-256 of the frame's
 * data: the host compares it with its own, so flash == decoded data == host data, every
 * byte, without a separate hash pass. The digest advances inside the flash's busy
 * waits, where the core would only sleep: 64 bytes hashed per step (about 10 us), or
 * with the engine (sha_hw) the next 4 KiB copied next to it and handed over once it
 * has taken the last. */
static struct sha256 wd;
static const u8 *wd_src;
static u32 wd_left, wd_n;
static int wd_hw;     /* this digest goes by the engine */
static int wd_bad;    /* a page read back differed */
static u32 wd_erased; /* the write erased a sector or block (bit 0 of the ack's flags) */

static void digest_begin(const u8 *p, u32 n)
{
    wd_src = p;
    wd_left = wd_n = n;
    wd_bad = 0;
    wd_erased = 0;
    wd_hw = sha_hw && n;
    if (wd_hw)
        shx_begin(n);
    else
        sha256_init(&wd);
}

/* one step of the digest; 0 when there is nothing to do now (all taken, or the engine
 * still busy with the last 4 KiB) */
static int digest_step(void)
{
    u32 k;
    if (!wd_left)
        return 0;
    if (wd_hw) {
        if (!shx_idle())
            return 0;
        k = wd_left < SHX_CHUNK ? wd_left : SHX_CHUNK;
        shx_put(wd_src, k, k == wd_left); /* the engine is idle: it cannot fail */
    } else {
        k = wd_left < 64 ? wd_left : 64;
        sha256_update(&wd, wd_src, k);
    }
    wd_src += k;
    wd_left -= k;
    return 1;
}

static void digest_end(u8 out[32])
{
    if (wd_hw) {
        while (wd_left && (digest_step() || !shx_wait()))
            uart_poll();
        if (!wd_left && !shx_end(out))
            return;
        /* the engine failed and is given up: the frame's bytes again, in software */
        wd_src -= wd_n - wd_left;
        wd_left = wd_n;
        wd_hw = 0;
        sha256_init(&wd);
    }
    while (digest_step())
        uart_poll();
    sha256_final(&wd, out);
}

/* Until now() reaches `end`: serve the link, advance the write digest (a step takes
 * about 10 us: none in the last 12 us), else sleep. What lands in a receive block
 * meanwhile is decoded by the caller's next link poll, once its flash work is issued
 * (bg_step polls as soon as a page program has started): no wake before `end` for it.
 * Returns the last now() read. */
static __attribute__((noinline)) u64 wait_until(u64 end)
{
    u64 t;
    while ((t = now()) < end) {
        uart_poll();
        if (end - t < TICKS(12u) || !digest_step())
            sleep_until(end);
    }
    return t;
}

/* Wait for the end of a program or erase. The status register is first read after
 * `expect_us` (about 60 % of the typical datasheet time: page program 0.7 ms, 4K/32K/
 * 64K erase 45/120/150 ms, status write 10 ms), serving the link meanwhile, then
 * polled: the chip sees far fewer status reads and the answer is as prompt. */
static void flash_wait(u32 expect_us)
{
    wait_until(now() + TICKS(expect_us));
    while (flash_sr1() & 1) /* a status read takes ~0.5 us: the end is seen at once */
        uart_poll();
}

static void flash_simple(u8 op)
{
    spi_send(&op, 1, 0, 0);
}

static int check_flush(void);

/* issue an erase and return at once (pages owed a read-back are read first); flash_wait()
 * ends it */
static void flash_erase_start(u8 op, u32 addr)
{
    u8 c[4];
    check_flush();
    wd_erased = 1;
    cmd_addr(c, op, addr);
    flash_simple(0x06);
    spi_send(c, 4, 0, 0);
}

static void flash_erase(u8 op, u32 addr)
{
    flash_erase_start(op, addr);
    flash_wait(op == 0xD8 ? 90000 : op == 0x52 ? 72000 : 27000);
}


/* Quad reads are used once the board itself has shown that they return what a
 * standard read returns: the chip's QE bit, the dummy clocks and the byte order of
 * 32-bit frames are then all right. The check needs a page with some variety (a
 * blank page reads the same whichever way it is read), so it runs on the first such
 * page read; until then, and on chips whose QE bit is not known, reads use 0x03. */
static int quad; /* 0 not yet checked, 1 in use, -1 not used */

/* 4 KiB sectors known to read erased: marked where a hash list found a sector blank,
 * cleared when a page of it is programmed (program_start), so a write over them merges
 * without reading them again. A mark made by the unchecked quad blank test (quad == 0,
 * see hash_range) is used only once quad reads have been shown to return what standard
 * reads return (quad != 0): the same read path on the same chip, nothing else changed
 * the flash meanwhile; if that check fails, every mark is dropped. */
static u8 erased_map[(16u << 20) / SECTOR / 8];

static void erased_set(u32 addr, int on)
{
    u32 s = addr / SECTOR;
    if (on)
        erased_map[s / 8] |= (u8)(1u << (s % 8));
    else
        erased_map[s / 8] &= (u8)~(1u << (s % 8));
}

static int erased_known(u32 addr)
{
    u32 s = addr / SECTOR;
    return quad != 0 && (erased_map[s / 8] >> (s % 8) & 1);
}

static void erased_forget(void)
{
    for (u32 i = 0; i < sizeof(erased_map); i++)
        erased_map[i] = 0;
}

static int is_blank(const u8 *p, u32 n)
{
    const u64 *q = (const u64 *)p;
    for (u32 i = 0; i < n / 8; i++)
        if (q[i] != ~0ul)
            return 0;
    return 1;
}

static int varied(const u8 *p, u32 n)
{
    u8 seen[32] = {0};
    u32 kinds = 0;
    for (u32 i = 0; i < n && kinds < 16; i++) {
        u8 bit = (u8)(1u << (p[i] & 7));
        if (!(seen[p[i] >> 3] & bit)) {
            seen[p[i] >> 3] |= bit;
            kinds++;
        }
    }
    return kinds >= 16;
}

static void quad_check(u32 addr, const u8 *want)
{
    u8 got[PAGE] __attribute__((aligned(8)));
    if (is_blank(want, PAGE) || !varied(want, PAGE))
        return;
    spi_read_quad(addr, PAGE);
    spi_take(got, PAGE);
    quad = 1;
    for (u32 i = 0; i < PAGE; i++)
        if (got[i] != want[i])
            quad = -1;
    if (quad < 0)
        erased_forget();
}

/* reads by DMA, up to a sector per transaction; while quad reads are to be checked,
 * on the first varied page read, each whole page read is offered to quad_check */
static void flash_read(u32 addr, u8 *out, u32 n)
{
    u8 c[4];
    while (n) {
        u32 k = n < SECTOR ? n & ~3u : SECTOR;
        if (!k) {
            k = n;
            cmd_addr(c, 0x03, addr);
            spi_recv(c, 4, out, k);
        } else {
            if (quad > 0) /* by DMA: the link is served meanwhile */
                spi_read_quad(addr, k);
            else
                spi_read32((0x03u << 24) | addr, k);
            spi_take(out, k);
            for (u32 pg = 0; !quad && pg + PAGE <= k; pg += PAGE)
                quad_check(addr + pg, out + pg);
        }
        addr += k;
        out += k;
        n -= k;
        uart_poll();
    }
}

/* Read-back in runs: a page programmed (or erased) and done is added to the run of
 * pages owed a read-back, which is read in one transaction (up to a sector, ~170 us at
 * quad rate, the link served meanwhile) when the next page does not extend it: not the
 * next page of the same sector, or not its bytes next in memory. check_flush reads the
 * run before anything could change those pages or their expected bytes: before an
 * erase starts (flash_erase_start), after each unit of a write (write_range: the next
 * merge reuses unit_buf), when background pages move to another sector or end, and
 * before a write's digest and acknowledgement (write_done). Every page is compared
 * as before, with one read transaction for a sector instead of one a page. While quad
 * reads are to be checked, a page is read back at once: its read checks them on the
 * first varied page (flash_read), and programs go quad from the next page on. */
static struct {
    u32 addr, n;
    const u8 *want;
} chk;

/* read back the run owed a read-back (one flash_read: it may check quad reads); 0 (and
 * wd_bad set) if a page differs */
static int check_flush(void)
{
    static u8 back[SECTOR] __attribute__((aligned(8)));
    const u64 *a = (const u64 *)back, *b = (const u64 *)chk.want;
    volatile const u64 *f = (volatile const u64 *)spi_buf;
    u32 n = chk.n, i;
    chk.n = 0; /* before the link polls of the read */
    if (!n)
        return 1;
    if (quad > 0) { /* checked quad reads: the frames compared where they landed */
        spi_read_quad(chk.addr, n);
        for (i = 0; i < n / 8 && swap_halves(f[i]) == b[i]; i++)
            if (i % 128 == 127)
                uart_poll();
    } else {
        flash_read(chk.addr, back, n);
        for (i = 0; i < n / 8 && a[i] == b[i]; i++)
            ;
    }
    if (i < n / 8)
        wd_bad = 1;
    return i == n / 8;
}

/* would the page at addr, expected to hold want, extend the run? */
static int check_joins(u32 addr, const u8 *want)
{
    return chk.n && addr % SECTOR && addr == chk.addr + chk.n && want == chk.want + chk.n;
}

/* the page at addr is done (programmed or erased, not busy) and must hold want */
static void check_page(u32 addr, const u8 *want)
{
    if (!check_joins(addr, want)) {
        check_flush();
        chk.addr = addr;
        chk.want = want;
    }
    chk.n += PAGE;
    if (!quad)
        check_flush();
}

/* issue the program of one whole, page-aligned page: over four lines (0x32) or one (0x02) */
static void program_start(u32 addr, const u8 *p, int wide)
{
    erased_set(addr, 0);
    flash_simple(0x06);
    if (wide)
        spi_write_quad(addr, p);
    else
        spi_write32((0x02u << 24) | addr, p);
}

/* one page on one data line, then read back (on a blank chip the first page of varied
 * data read back this way checks quad reads, see flash_read) */
static void flash_program_std(u32 addr, const u8 *p)
{
    program_start(addr, p, 0);
    flash_wait(400);
    check_page(addr, p);
}

/* Page programs go over four lines once quad reads are in use (the same four wires,
 * the other way). The first such page is read back: if it differs, quad programs are
 * given up and its sector is erased and programmed again on one line. While quad
 * reads are not checked yet (a blank chip has nothing to check them on), the first
 * page of varied data programmed on one line is read back to check them. */
static int quad_prog; /* 0 not yet checked, 1 checked, -1 not used */

static void program_erased(u32 base, const u8 *src, u32 n);

/* the page at base + pg; src holds the new content of the whole unit at base */
static void flash_program(u32 base, const u8 *src, u32 pg)
{
    if (quad <= 0 || quad_prog < 0) {
        flash_program_std(base + pg, src + pg);
        return;
    }
    program_start(base + pg, src + pg, 1);
    flash_wait(400);
    if (quad_prog) {
        check_page(base + pg, src + pg);
        return;
    }
    check_flush(); /* the pages before it count; this one decides */
    int bad = wd_bad;
    check_page(base + pg, src + pg);
    quad_prog = check_flush() ? 1 : -1;
    wd_bad = bad;
    if (quad_prog > 0)
        return;
    u32 sec = pg & ~(SECTOR - 1);
    flash_erase(0x20, base + sec);
    program_erased(base + sec, src + sec, SECTOR);
}

/* program the pages of an erased unit that hold data; the blank ones are read back */
static void program_erased(u32 base, const u8 *src, u32 n)
{
    for (u32 pg = 0; pg < n; pg += PAGE) {
        if (!is_blank(src + pg, PAGE))
            flash_program(base, src, pg);
        else
            check_page(base + pg, src + pg);
    }
}

/* Set the quad-enable bit (SR2 bit 1 on the Winbond and GigaDevice chips these boards
 * carry) as a volatile status write: no wear, no busy time, gone at the next power-up. */
static void quad_enable(void)
{
    u8 c = 0x35, sr2;
    quad = -1;
    if (jedec[0] != 0xEF && jedec[0] != 0xC8)
        return;
    spi_recv(&c, 1, &sr2, 1);
    if (!(sr2 & 2)) {
        u8 w[3] = {0x01, flash_sr1(), (u8)(sr2 | 2)};
        flash_simple(0x50);
        spi_send(w, 3, 0, 0);
        flash_wait(0);
        spi_recv(&c, 1, &sr2, 1);
    }
    quad = sr2 & 2 ? 0 : -1;
}

static void flash_init(void)
{
    static const u8 exit_crm[2] = {0xFF, 0xFF};
    u8 c[5] = {0x4B, 0, 0, 0, 0};
    erased_forget();
    SYSCTL_PERI_RESET |= PERI_SPI3;
    delay_us(10);
    SYSCTL_PERI_RESET &= ~PERI_SPI3;
    SPI_SSIENR = 0;
    for (int i = 0; i < 3; i++)
        spi_regs[i] = ~0u;
    SPI_IMR = 0;
    SPI_DMACR = 0;
    spi_dma_init();
    SPI_SER = 0;
    SPI_BAUDR = 2;
    SPI_ENDIAN = 0;
    spi_send(exit_crm, 2, 0, 0);
    flash_simple(0x66);
    flash_simple(0x99);
    delay_us(50);
    c[0] = 0x9F;
    spi_recv(c, 1, jedec, 3);
    c[0] = 0x4B;
    spi_recv(c, 5, uid, 8);
    flash_ok = !(jedec[0] == 0 || jedec[0] == 0xFF);
    flash_size = jedec[2] >= 16 && jedec[2] <= 24 ? 1u << jedec[2] : 16u << 20;
    u8 sr = flash_sr1();
    if (flash_ok && (sr & 0x1C)) { /* clear block protection */
        u8 w[2] = {0x01, (u8)(sr & ~0x1C)};
        flash_simple(0x06);
        spi_send(w, 2, 0, 0);
        flash_wait(6000);
    }
    if (flash_ok) {
        u8 page[PAGE] __attribute__((aligned(8)));
        quad_enable();
        flash_read(0, page, PAGE); /* a firmware at 0 lets quad reads be checked at once */
    }
}

/* ------------------------------------------------------------ flash jobs -- */


/* ------------------------------------------------- background programming -- */

/* A write frame that needs no erase (a first burn) programs its pages in the
 * background: the next frame's CRC check and decoding run meanwhile, and each of their
 * link polls issues the next page once the flash is done with the last one (read back
 * first, as always). Its acknowledgement goes out when its last page is checked
 * (bg_finish), before anything else is answered; the next frame's own flash work waits
 * for that. Only with checked quad programs, for a frame that is one whole unit
 * (B5/B6 of at most a block, as the host sends them). */
/* typical busy times (us) of a 4 KiB erase, a 64 KiB erase and a page program: the
 * datasheet figures of the 25-series chips these boards carry */
#define T_SECTOR_ERASE 45000u
#define T_BLOCK_ERASE 150000u
#define T_PAGE 700u

struct pending {
    u8 op, st, ext, digest;
    u32 a, n;
    u8 dg[32]; /* write frames: SHA-256 of the data, checked on the flash (see check_page) */
    u32 erased;
};

static struct {
    u32 base, pg, end; /* the unit, the next page and the end (offsets in unit_buf) */
    u64 t0, due;       /* when the page in flight started; when to read its status */
    u64 took;          /* learned page program time (CLINT ticks), see bg_step */
    u64 step;          /* how much earlier than took the next page is looked at */
    u32 hold;          /* pages still looked at after took, not earlier (see bg_step) */
    int looked;        /* the status of the page in flight was read busy */
    int deferred;      /* an acknowledgement is owed (pend) */
    int active;        /* pages left to program or check */
    int busy, allowed, in;
    int may;           /* the frame being handled may be deferred */
    struct pending pend;
} bg;

/* Go on with the background pages at `t` (now(), read by the caller while a page is
 * in flight). The status is first read when the page is expected to be done (the chip's
 * own page time, learned as the pages go), and again every 2 us while it reads busy.
 * A page seen busy, then done at t, took at most t - t0: that is what the next BG_HOLD
 * pages are expected to take. After them, a page done at a first read made on time may
 * have taken less: the next one is looked at `step` earlier, a step that doubles with
 * every such page (0.13, 0.26, 0.5, 1 us... up to 1/32 of the time), so a steady chip
 * is caught busy about once in twenty pages (one status read more, the page seen done
 * at most 2 us late; once in five without the hold: each status read is a transaction
 * an emulator pays for) and a faster one is caught up within twenty pages. Most pages
 * cost one status read. A digest step (about 10 us) is taken only where it ends before
 * the status is due. */
#define BG_HOLD 16u
static void bg_step(u64 t)
{
    if (bg.busy) {
        if (t < bg.due) {
            if (bg.due - t > TICKS(12u))
                digest_step();
            return;
        }
        if (flash_sr1() & 1) {
            bg.looked = 1;
            bg.due = t + TICKS(2u);
            return;
        }
        if (bg.looked) {
            bg.took = t - bg.t0;
            bg.step = 1;
            bg.hold = BG_HOLD;
        } else if (t - bg.due < TICKS(2u)) {
            if (bg.hold) {
                bg.hold--;
            } else {
                bg.took -= bg.step;
                if (bg.step < bg.took / 32)
                    bg.step *= 2;
            }
        }
        check_page(bg.base + bg.pg, unit_buf + bg.pg);
        bg.busy = 0;
        bg.pg += PAGE;
        /* the run ends here unless the next page is programmed next: read it back
         * before the next program makes the chip busy */
        if (bg.pg % SECTOR == 0 || bg.pg >= bg.end || !page_dirty[bg.pg / PAGE])
            check_flush();
    }
    while (bg.pg < bg.end && !page_dirty[bg.pg / PAGE])
        bg.pg += PAGE;
    if (bg.pg < bg.end) {
        program_start(bg.base + bg.pg, unit_buf + bg.pg, 1);
        bg.t0 = now(); /* the program began as the transaction ended, just now */
        /* this page's 256 bytes (and a sector's read-back, with link polls in its DMA
         * wait) took ~10-30 us, up to 9 bytes at 3 Mbaud: the FIFO (16 bytes) is
         * emptied again (bg.in: no recursion), so that the
         * caller's next poll keeps its whole margin (it may decode a whole DMA block,
         * ~25 us: hence t0 before it) */
        uart_poll();
        if (!bg.took) {
            bg.took = TICKS(T_PAGE * 6 / 10);
            bg.step = 1;
        }
        bg.due = bg.t0 + bg.took;
        bg.looked = 0;
        bg.busy = 1;
    } else {
        bg.active = 0;
    }
}

/* may the link poll's hook run? (inline: a poll without background work makes no call) */
static inline int bg_ready(void)
{
    return bg.active && bg.allowed && !bg.in;
}

/* the link poll's hook: background pages while a frame is checked and decoded */
static __attribute__((noinline)) void bg_service(void)
{
    bg.in = 1;
    bg_step(bg.busy ? now() : 0);
    bg.in = 0;
}

/* defer the programming of the unit just merged; 0 if this write must not be */
static int bg_start(u32 base, u32 size, u32 lo, u32 hi)
{
    if (!bg.may || quad <= 0 || quad_prog <= 0 || wd_left != hi - lo)
        return 0;
    bg.may = 0;
    wd_src = unit_buf + (lo - base); /* the frame's bytes, merged: its data is reused */
    bg.base = base;
    bg.pg = 0;
    bg.end = size;
    bg.busy = 0;
    bg.active = bg.deferred = 1;
    return 1;
}

/* let `allowed` background work run while fn is busy elsewhere (CRC, decoding) */
static void bg_allow(int on)
{
    bg.allowed = on && bg.deferred;
}

static void answer(struct pending *p);
static void write_done(struct pending *pend, u8 bad);

/* Nothing else to do: wait for the page in flight as flash_wait does (the link served,
 * the digest advanced meanwhile), then go on with the pages (bg_step). */
static void bg_wait(void)
{
    bg.in = 1; /* the link polls of the wait leave the pages alone (no clock read each) */
    u64 t = bg.busy ? wait_until(bg.due) : 0; /* then the status at once */
    bg_step(t);
    bg.in = 0;
}

/* finish the deferred frame: its pages, its digest, its acknowledgement */
static void bg_finish(void)
{
    if (!bg.deferred)
        return;
    while (bg.active)
        bg_wait();
    bg.deferred = 0;
    write_done(&bg.pend, ST_BAD_CHECK);
    answer(&bg.pend);
    uart_poll(); /* the digest's end and the reply took ~17 us; the next frame's merge follows */
}

/* Merge src (the new bytes of [lo, hi)) into the unit at base, read from the flash
 * page by page; mark pages that change and sectors that need an erase (a bit from 0
 * to 1). A unit the range covers whole stops reading once an erase is certain: its
 * old content is then replaced entirely. Pages outside the range are read only when
 * something is erased (their old bytes are then programmed again). Returns the number
 * of sectors to erase. */
static u32 merge_unit(u32 base, u32 size, u32 lo, u32 hi, const u8 *src, u8 *sec_erase)
{
    int whole = lo == base && hi == base + size;
    u32 n_erase = 0;
    for (u32 pg = 0; pg < size; pg += PAGE) {
        u8 *u = unit_buf + pg;
        u32 sec = pg / SECTOR;
        if (pg % SECTOR == 0)
            sec_erase[sec] = 0;
        page_dirty[pg / PAGE] = 1;
        if (whole && n_erase) {
            for (u32 i = 0; i < PAGE; i++)
                u[i] = src[pg + i];
            if (!sec_erase[sec]) {
                sec_erase[sec] = 1;
                n_erase++;
            }
            uart_poll();
            continue;
        }
        page_dirty[pg / PAGE] = 0;
        if (base + pg + PAGE <= lo || base + pg >= hi)
            continue;
        if (erased_known(base + pg)) { /* nothing to read: a whole new page is copied */
            u64 *w = (u64 *)u;
            const u8 *from = src + (base + pg - lo);
            if (base + pg >= lo && base + pg + PAGE <= hi && !((u64)from & 7)) {
                const u64 *f = (const u64 *)from;
                for (u32 i = 0; i < PAGE / 8; i++)
                    w[i] = f[i];
                page_dirty[pg / PAGE] = !is_blank(u, PAGE);
                uart_poll();
                continue;
            }
            for (u32 i = 0; i < PAGE / 8; i++)
                w[i] = ~0ul;
        } else {
            flash_read(base + pg, u, PAGE);
        }
        u32 a = base + pg > lo ? base + pg : lo;
        u32 b = base + pg + PAGE < hi ? base + pg + PAGE : hi;
        for (u32 x = a; x < b; x++) {
            u8 old = u[x - base - pg], nv = src[x - lo];
            if (old != nv) {
                page_dirty[pg / PAGE] = 1;
                if ((old & nv) != nv && !sec_erase[sec]) {
                    sec_erase[sec] = 1;
                    n_erase++;
                }
                u[x - base - pg] = nv;
            }
        }
    }
    for (u32 pg = 0; n_erase && pg < size; pg += PAGE)
        if (base + pg + PAGE <= lo || base + pg >= hi)
            flash_read(base + pg, unit_buf + pg, PAGE);
    return n_erase;
}

static u32 count_data_pages(const u8 *p, u32 n)
{
    u32 k = 0;
    for (u32 pg = 0; pg < n; pg += PAGE)
        k += !is_blank(p + pg, PAGE);
    return k;
}

/* Write [lo, hi) inside the unit (4 KiB sector or 64 KiB block) at base. Unchanged
 * and blank areas cost a read, not an erase; pages that do not change are not
 * programmed. When some sectors need an erase, the whole block is erased (and its
 * data pages programmed again) if that is quicker than erasing those sectors. */
static int bg_start(u32 base, u32 size, u32 lo, u32 hi);

static void write_unit(u32 base, u32 size, u32 lo, u32 hi, const u8 *src)
{
    u8 sec_erase[BLOCK / SECTOR];
    u32 n_erase = merge_unit(base, size, lo, hi, src, sec_erase);
    if (!n_erase && bg_start(base, size, lo, hi))
        return;
    if (n_erase && size == BLOCK) {
        u32 by_sector = n_erase * T_SECTOR_ERASE, by_block = T_BLOCK_ERASE;
        for (u32 sec = 0; sec < BLOCK / SECTOR; sec++) {
            const u8 *p = unit_buf + sec * SECTOR;
            u32 pages = count_data_pages(p, SECTOR);
            by_block += pages * T_PAGE;
            if (sec_erase[sec])
                by_sector += pages * T_PAGE;
            else
                for (u32 pg = 0; pg < SECTOR; pg += PAGE)
                    by_sector += page_dirty[(sec * SECTOR + pg) / PAGE] * T_PAGE;
        }
        if (by_block <= by_sector) {
            flash_erase(0xD8, base);
            program_erased(base, unit_buf, BLOCK);
            return;
        }
    }
    for (u32 sec = 0; sec < size / SECTOR; sec++) {
        u32 at = sec * SECTOR;
        if (sec_erase[sec]) {
            flash_erase(0x20, base + at);
            program_erased(base + at, unit_buf + at, SECTOR);
            continue;
        }
        for (u32 pg = at; pg < at + SECTOR; pg += PAGE) {
            if (page_dirty[pg / PAGE])
                flash_program(base, unit_buf, pg);
            else
                uart_poll();
        }
    }
}

/* Write n bytes at addr, any alignment: block by block where the range covers at
 * least two sectors of a block, else sector by sector. */
static void write_range(u32 addr, const u8 *src, u32 n)
{
    u32 pos = addr, end = addr + n;
    while (pos < end) {
        u32 base = pos & ~(BLOCK - 1);
        u32 hi = end < base + BLOCK ? end : base + BLOCK;
        u32 size = BLOCK;
        if (hi - pos < 2 * SECTOR) {
            size = SECTOR;
            base = pos & ~(SECTOR - 1);
            hi = end < base + SECTOR ? end : base + SECTOR;
        }
        write_unit(base, size, pos, hi, src + (pos - addr));
        if (!bg.deferred) /* a deferred unit's pages are read back by bg_step */
            check_flush();
        pos = hi;
    }
}

/* does the first page of the block at addr hold anything but 0xFF? */
static int block_has_data(u32 addr)
{
    u8 buf[PAGE] __attribute__((aligned(8)));
    flash_read(addr, buf, PAGE);
    return !is_blank(buf, PAGE);
}

/* erase [addr, addr + n) with the largest units that fit; addr, n 4 KiB aligned */
static void erase_range(u32 addr, u32 n)
{
    u32 end = addr + n;
    while (addr < end) {
        if (addr % BLOCK == 0 && end - addr >= BLOCK) {
            flash_erase(0xD8, addr);
            addr += BLOCK;
        } else if (addr % 32768 == 0 && end - addr >= 32768) {
            flash_erase(0x52, addr);
            addr += 32768;
        } else {
            flash_erase(0x20, addr);
            addr += SECTOR;
        }
    }
}

static void chip_erase(void)
{
    flash_simple(0x06);
    flash_simple(0x60);
    flash_wait(0); /* 40 s typical: just poll */
}

/* SHA-256 of one erased 4 KiB sector, computed on first use: hash lists of blank
 * flash (a first burn) then cost the SPI reads only */
static u8 blank_digest[32];
static int blank_digest_ok;

/* the digest of [addr, addr+n) by the engine: a sector at a time read into buf while
 * the engine takes the last one. 0, or -1 (given up) */
static int shx_range(u32 addr, u32 n, u8 out[32], u8 *buf)
{
    shx_begin(n);
    for (u32 left = n; left;) {
        u32 k = left < SHX_CHUNK ? left : SHX_CHUNK;
        flash_read(addr, buf, k);
        if (shx_put(buf, k, k == left))
            return -1;
        addr += k;
        left -= k;
    }
    return shx_end(out);
}

/* SHA-256 of [addr, addr+n), by the engine if it can (one message of 1 to SHX_MAX
 * bytes), else in software; `also` (if set) is fed the same bytes */
static void hash_range(u32 addr, u32 n, u8 out[32], struct sha256 *also)
{
    u8 buf[SECTOR] __attribute__((aligned(8)));
    struct sha256 s;
    int blank = n == SECTOR && !also;
    sha256_init(&s);
    if (blank) { /* read the sector first (one transaction); hash it only if it holds data */
        /* On a blank chip quad reads cannot be checked before the first write, yet the
         * chip's QE bit is known to be set (quad == 0): the blank test reads over four
         * lines, 4x faster. A sector that does not read erased this way is hashed below
         * from standard reads, so a data sector's digest never rests on unchecked quad
         * reads. (Erased reads the same in any byte order: the words are not swapped.) */
        if (quad >= 0)
            spi_read_quad(addr, SECTOR);
        else
            spi_read32((0x03u << 24) | addr, SECTOR);
        blank = is_blank((const u8 *)spi_buf, SECTOR);
        if (addr % SECTOR == 0)
            erased_set(addr, blank);
        if (blank && blank_digest_ok) {
            for (int i = 0; i < 32; i++)
                out[i] = blank_digest[i];
            return;
        }
    }
    if (!sha_hw || also || !n || n > SHX_MAX || shx_range(addr, n, out, buf)) {
        for (u32 left = n; left;) { /* a sector per read, a page hashed between link polls */
            u32 k = left < SECTOR ? left : SECTOR;
            flash_read(addr, buf, k);
            for (u32 i = 0; i < k; i += PAGE) {
                u32 m = k - i < PAGE ? k - i : PAGE;
                sha256_update(&s, buf + i, m);
                if (also)
                    sha256_update(also, buf + i, m);
                uart_poll();
            }
            addr += k;
            left -= k;
        }
        sha256_final(&s, out);
    }
    if (blank) {
        for (int i = 0; i < 32; i++)
            blank_digest[i] = out[i];
        blank_digest_ok = 1;
    }
}

/* --------------------------------------------------------------- commands -- */

static u32 rd32(const u8 *p)
{
    return p[0] | (p[1] << 8) | (p[2] << 16) | ((u32)p[3] << 24);
}

static int in_flash(u32 addr, u32 n)
{
    return addr <= flash_size && n <= flash_size - addr;
}

static void set_baud(u32 b)
{
    u32 d = uart_divisor(b);
    uart_drain();
    delay_us(200);
    UART_LCR = 0x80;
    UART_RBR = (d >> 4) & 0xFF;
    UART_IER = d >> 12;
    UART_LCR = 0x03;
    UART_DLF = d & 0xF;
    UART_IER = IER_PTIME | IER_ERBFI;
    baud = b;
}

static void reply_range(u8 op, u8 st, u32 addr, u32 n)
{
    reply_begin(op, st);
    reply_u32(addr);
    reply_u32(n);
    reply_end();
}

static void cmd_identify(void)
{
    u32 v[12];
    reply_begin(OP_IDENTIFY, ST_OK);
    v[0] = 0x5950464Bu; /* "KFPY" */
    v[1] = PROTO_VERSION | (FW_VERSION << 16);
    v[2] = CAPS;
    v[3] = jedec[0] | (jedec[1] << 8) | (jedec[2] << 16) | ((u32)(flash_ok | sha_hw << 1) << 24);
    reply_bytes(v, 16);
    reply_bytes(uid, 8);
    v[0] = flash_size;
    v[1] = cpu_hz();
    v[2] = apb0_hz();
    v[3] = spi3_sclk_hz();
    v[4] = baud;
    v[5] = MAX_DATA;
    v[6] = NSLOT | (WRITE_WINDOW << 16);
    v[7] = LINK_BASE;
    v[8] = SRAM_LO;
    v[9] = SRAM_HI;
    reply_bytes(v, 40);
    reply_end();
}

/* Stream [addr, addr+size) in chunks, at most `window` chunks ahead of the host's
 * acknowledged offset; READ_ACK(offset, 0) acknowledges, READ_ACK(offset, 1) asks
 * to resend from offset. The last frame carries the SHA-256 of the region. */
static void cmd_read(u32 addr, u32 size, u32 chunk, u32 window)
{
    struct sha256 s;
    u32 sent = 0, acked = 0, hashed = 0;
    sha256_init(&s);
    while (acked < size) {
        uart_poll();
        struct slot *q = queue_peek();
        if (q) {
            if (q->len < 16 || q->data[0] != OP_READ_ACK)
                return; /* the host moved on: abandon the read */
            q = queue_pop();
            u32 off = rd32(q->data + 8), nak = rd32(q->data + 12);
            int ok = crc32_table(0, q->data + 8, q->len - 8) == rd32(q->data + 4);
            slot_free(q);
            if (ok && off <= size && off >= acked) {
                acked = off;
                if (nak)
                    sent = off;
            }
            continue;
        }
        if (sent < size && sent - acked < window * chunk) {
            u32 k = size - sent < chunk ? size - sent : chunk;
            flash_read(addr + sent, unit_buf, k);
            if (sent == hashed) {
                sha256_update(&s, unit_buf, k);
                hashed += k;
            }
            reply_begin(OP_READ, ST_OK);
            reply_u32(sent);
            reply_bytes(unit_buf, k);
            reply_end();
            sent += k;
        } else {
            sleep_until(NEVER); /* until the host's acknowledgement comes in */
        }
    }
    u8 d[32];
    sha256_final(&s, d);
    reply_begin(OP_READ, ST_OK);
    reply_u32(size);
    reply_bytes(d, 32);
    reply_end();
}

/* digests of consecutive blocks; with `total`, the region's digest follows them */
static void cmd_hash_list(u32 addr, u32 size, u32 block, int total)
{
    struct sha256 all;
    u8 d[32];
    sha256_init(&all);
    reply_begin(OP_HASH_LIST, ST_OK);
    reply_u32(addr);
    reply_u32(block);
    while (size) {
        u32 k = size < block ? size : block;
        hash_range(addr, k, d, total ? &all : 0);
        reply_bytes(d, 32);
        addr += k;
        size -= k;
    }
    if (total) {
        sha256_final(&all, d);
        reply_bytes(d, 32);
    }
    reply_end();
}

static void reboot(void)
{
    uart_drain();
    delay_us(1000);
    SYSCTL_SOFT_RESET = 1;
    for (;;)
        ;
}

/* Handle one frame. Replies that must not hold the slot (write acknowledgements,
 * which let the host send the next frame into it) are returned in *pend. */
/* end a write: its digest for the acknowledgement, or the status of a failed check */
static void write_done(struct pending *pend, u8 bad)
{
    check_flush();
    digest_end(pend->dg);
    pend->digest = pend->ext;
    pend->erased = wd_erased;
    if (wd_bad)
        pend->st = bad;
}

/* Keep the last (up to DICT) bytes of a write frame's data in front of inflate_buf:
 * the dictionary a BC frame may name next (p may be inflate_buf itself). */
static void dict_keep(u32 addr, const u8 *p, u32 n)
{
    u32 k = n < DICT ? n : DICT, i = 0;
    u8 *to = inflate_buf - k;
    const u8 *from = p + n - k;
    if ((((u64)to | (u64)from) & 7) == 0) /* as a decoded frame's whole pages always are */
        for (; i + 8 <= k; i += 8) {
            *(dword *)(void *)(to + i) = *(const dword *)(const void *)(from + i);
            if ((i & 1023) == 1016)
                uart_poll();
        }
    for (; i < k; i++) {
        to[i] = from[i];
        if ((i & 1023) == 1023)
            uart_poll();
    }
    dict_len = k;
    dict_end = addr + n;
}

/* does the board hold the dictionary a BC frame names (u32 raw length, u32 end
 * address, u32 length, u32 CRC-32 of its bytes, then the stream)? B6: no dictionary */
static int dict_check(u8 op, const u8 *d, u32 dn)
{
    if (op != OP_WRITE_DEFLATE_DICT)
        return 1;
    if (dn < 16)
        return 0;
    u32 n = rd32(d + 8);
    return n <= dict_len && rd32(d + 4) == dict_end &&
           crc32_polled(inflate_buf - n, n) == rd32(d + 12);
}

/* decode a B6/BC frame (raw length checked by the caller) into inflate_buf and keep
 * its tail as the next dictionary: ST_OK, ST_NO_DICT or ST_BAD_WRITE */
static u8 decode_frame(u8 op, u32 addr, const u8 *d, u32 dn, u32 *out)
{
    u32 hdr = op == OP_WRITE_DEFLATE_DICT ? 16 : 4;
    if (!dict_check(op, d, dn))
        return ST_NO_DICT;
    if (inflate_raw(d + hdr, dn - hdr, inflate_buf, hdr > 4 ? rd32(d + 8) : 0, BLOCK, out) ||
        *out != rd32(d))
        return ST_BAD_WRITE;
    dict_keep(addr, inflate_buf, *out);
    return ST_OK;
}

static void handle(struct slot *sl, struct pending *pend)
{
    const u8 *f = sl->data;
    u32 n = sl->len;
    u8 op = f[0];
    pend->op = op;
    pend->st = ST_OK;
    pend->ext = 0;
    pend->digest = 0;
    if (n < 16 || f[1]) {
        bg_finish();
        if (op == OP_NOP || op == OP_STATUS) {
            return;
        } else if (op == OP_REBOOT && n >= 13) {
            reply_status(op, ST_OK);
            reboot();
        }
        pend->st = ST_BAD_CRC; /* too short or a bad op: damaged on the way, resend */
        return;
    }
    u32 addr = rd32(f + 8), len = rd32(f + 12);
    const u8 *d = f + 16;
    u32 dn = n - 16;
    /* while the previous frame programs: check this one and decode it if compressed */
    bg_allow(1);
    int crc_ok = op == OP_NOP || crc32_polled(f + 8, n - 8) == rd32(f + 4);
    int pre = -1; /* decoded ahead: the status */
    u32 pre_out = 0;
    if (bg.deferred && crc_ok && (op == OP_WRITE_DEFLATE || op == OP_WRITE_DEFLATE_DICT) &&
        len == dn && dn >= 4 && rd32(d) <= BLOCK && in_flash(addr, rd32(d)))
        pre = decode_frame(op, addr, d, dn, &pre_out);
    bg_allow(0);
    bg_finish();
    if (!crc_ok) {
        pend->st = ST_BAD_CRC;
        return;
    }
    int data_ok = len == dn;
    u32 p0 = dn >= 4 ? rd32(d) : 0, p1 = dn >= 8 ? rd32(d + 4) : 0;
    pend->a = addr;
    pend->n = len;
    switch (op) {
    case OP_NOP:
    case OP_STATUS:
        return;
    case OP_FLASH_INIT:
        flash_init();
        pend->st = flash_ok ? ST_OK : ST_BAD_INIT;
        return;
    case OP_FLASH_WRITE:
    case OP_WRITE:
        pend->ext = op == OP_WRITE;
        if (!data_ok || !in_flash(addr, len)) {
            pend->st = ST_BAD_LEN;
        } else {
            if (op == OP_WRITE)
                dict_keep(addr, d, len);
            digest_begin(d, len);
            write_range(addr, d, len);
            write_done(pend, pend->ext ? ST_BAD_CHECK : ST_BAD_WRITE);
        }
        return;
    case OP_WRITE_DEFLATE:
    case OP_WRITE_DEFLATE_DICT: {
        u32 out = 0;
        pend->ext = 1;
        pend->n = p0;
        if (!data_ok || dn < 4 || p0 > BLOCK || !in_flash(addr, p0)) {
            pend->st = ST_BAD_LEN;
        } else if (pre < 0 && addr % BLOCK == 0 && p0 == BLOCK && dict_check(op, d, dn) &&
                   block_has_data(addr)) {
            /* a whole block over old data: erase it while the frame is decoded */
            flash_erase_start(0xD8, addr);
            u8 st = decode_frame(op, addr, d, dn, &out);
            flash_wait(0);
            if (st != ST_OK) {
                pend->st = st;
            } else {
                digest_begin(inflate_buf, out);
                wd_erased = 1;
                program_erased(addr, inflate_buf, BLOCK);
                write_done(pend, ST_BAD_CHECK);
            }
        } else {
            pend->st = pre >= 0 ? (out = pre_out, (u8)pre) : decode_frame(op, addr, d, dn, &out);
            if (pend->st != ST_OK)
                return;
            digest_begin(inflate_buf, out);
            bg.may = 1;
            write_range(addr, inflate_buf, out);
            bg.may = 0;
            if (bg.deferred) {
                bg.pend.op = op;
                bg.pend.st = pend->st;
                bg.pend.ext = 1;
                bg.pend.a = addr;
                bg.pend.n = p0;
                pend->op = 0; /* answered by bg_finish */
                return;
            }
            write_done(pend, ST_BAD_CHECK);
        }
        return;
    }
    case OP_FLASH_ERASE:
    case OP_ERASE_NB:
        /* kendryte stub: chip erase; sipeed: (addr, len), len 0xFFFFFFEE = all;
         * PyPI 1.1.6 D8: (0, 0) = all, else a 4 KiB aligned range */
        if ((addr == 0 && len == 0) || len == 0xFFFFFFEEu) {
            chip_erase();
        } else {
            u32 a = addr & ~(SECTOR - 1), e = (addr + len + SECTOR - 1) & ~(SECTOR - 1);
            if (!in_flash(a, e - a))
                pend->st = ST_BAD_ERASE;
            else
                erase_range(a, e - a);
        }
        return;
    case OP_ERASE:
        pend->ext = 1;
        pend->n = p0;
        if (!data_ok || dn != 4 || addr % SECTOR || p0 % SECTOR || !in_flash(addr, p0))
            pend->st = ST_BAD_LEN;
        else
            erase_range(addr, p0);
        return;
    case OP_CHIP_ERASE:
        pend->ext = 1;
        chip_erase();
        return;
    case OP_BAUD:
    case OP_SET_BAUD: {
        u32 div = dn == 4 ? uart_divisor(p0) : 0;
        if (!data_ok || div < 16 || div > 0xFFFFF) {
            pend->st = ST_BAD_LEN;
            return;
        }
        if (op == OP_SET_BAUD) {
            reply_begin(op, ST_OK);
            reply_u32(APB0_HZ / div);
            reply_u32(div);
            reply_end();
        } else {
            reply_status(op, ST_OK);
        }
        set_baud(p0);
        pend->op = 0;
        return;
    }
    case OP_REBOOT:
        reply_status(op, ST_OK);
        reboot();
        return;
    case OP_IDENTIFY:
        cmd_identify();
        break;
    case OP_READ:
        if (!data_ok || dn != 12 || !in_flash(addr, p0) || p0 == 0 || p1 == 0 ||
            p1 > BLOCK || rd32(d + 8) == 0) {
            pend->ext = 1;
            pend->st = ST_BAD_LEN;
            return;
        }
        cmd_read(addr, p0, p1, rd32(d + 8));
        break;
    case OP_READ_ACK:
        break; /* stale acknowledgement of a finished read: no reply */
    case OP_HASH:
        pend->ext = 1;
        if (!data_ok || dn != 4 || !in_flash(addr, p0)) {
            pend->st = ST_BAD_LEN;
            return;
        } else {
            u8 dg[32];
            hash_range(addr, p0, dg, 0);
            reply_begin(op, ST_OK);
            reply_bytes(dg, 32);
            reply_end();
        }
        break;
    case OP_HASH_LIST:
        if (!data_ok || dn != 12 || !in_flash(addr, p0) || p1 == 0) {
            pend->ext = 1;
            pend->st = ST_BAD_LEN;
            return;
        }
        cmd_hash_list(addr, p0, p1, rd32(d + 8) & 1);
        break;
    case OP_SRAM_WRITE:
        pend->ext = 1;
        if (!data_ok || addr < SRAM_LO || addr > SRAM_HI || len > SRAM_HI - addr) {
            pend->st = ST_BAD_LEN;
        } else {
            u8 *dst = (u8 *)(u64)addr;
            for (u32 i = 0; i < len; i++) {
                dst[i] = d[i];
                if ((i & 1023) == 1023)
                    uart_poll();
            }
        }
        return;
    case OP_EXEC:
        reply_begin(op, ST_OK);
        reply_end();
        uart_drain();
        DMAC_CHEN = 0x100u << RXD_CH; /* no block takes the started program's bytes */
        UART_IER = IER_PTIME; /* the link as the bootstrap leaves it: polled */
        __asm__ volatile("csrc mie, %0" ::"r"(MIE_MEIE | MIE_MTIE));
        __asm__ volatile("fence.i");
        ((void (*)(u32, u32))(u64)addr)(EXEC_MAGIC, baud);
        return;
    default:
        pend->ext = IS_EXT_OP(op);
        pend->st = ST_BAD_CMD;
        return;
    }
    pend->op = 0; /* already answered */
}

static void answer(struct pending *p)
{
    if (!p->op)
        return;
    if (p->op == OP_WRITE_DEFLATE || p->op == OP_WRITE_DEFLATE_DICT)
        p->op = OP_WRITE; /* every write acknowledgement carries 0xB5 */
    if (p->digest) {
        reply_begin(p->op, p->st);
        reply_u32(p->a);
        reply_u32(p->n);
        reply_bytes(p->dg, 32);
        reply_u32(p->erased);
        reply_end();
    } else if (p->ext) {
        reply_range(p->op, p->st, p->a, p->n);
    } else {
        reply_status(p->op, p->st);
    }
}

int main(u32 magic, u32 boot_baud)
{
    struct pending p;
    clock_init();
    crc_init();
    if (magic == EXEC_MAGIC) {
        baud = boot_baud; /* started by our bootstrap: the link is already up */
    } else {
        uart_init(baud);
    }
    link_wake_init();
    rxd_init();
    sha_hw_init();
    flash_init();
    for (;;) {
        if (!q_count && bg.active) { /* nothing to decode meanwhile: keep programming */
            bg_wait();
            continue;
        }
        if (!q_count) {
            if (bg.deferred)
                bg_finish();
            idle();
            continue;
        }
        struct slot *s = queue_pop();
        handle(s, &p);
        slot_free(s);
        answer(&p);
    }
}
