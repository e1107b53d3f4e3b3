/* Raw DEFLATE (RFC 1951) decoder for compressed writes. The host compresses each
 * block of up to 64 KiB (zlib, wbits -15) on its own or with a preset dictionary (the
 * tail of the frame before it, see docs/flasher-protocol.md, BC): back references
 * stay inside the output buffer and the `before` bytes of dictionary right in front
 * of it. Codes of up to FAST_BITS bits (nearly all of them in
 * practice) are decoded with one table lookup; longer ones bit by bit from the
 * canonical code counts. The receive hook runs every few symbols so the link never
 * overflows.
 * SPDX-License-Identifier: MIT
 */
#include "flasher.h"

#define FAST_BITS 9
#define FAST_SIZE (1u << FAST_BITS)

/* Bits are taken LSB first. Past the end of the input the buffer is filled with zero
 * bytes (counted in `over`) so a lookup can peek FAST_BITS ahead; consuming any of
 * those padding bits is the error. */
struct bits {
    const u8 *p, *end;
    u32 buf, cnt, over;
    int err;
};

struct huff {
    u16 count[16];        /* codes of each length */
    u16 sym[288];         /* symbols ordered by code */
    u16 fast[FAST_SIZE];  /* next FAST_BITS input bits -> length << 9 | symbol; 0: longer */
};

static void fill(struct bits *b, u32 n)
{
    while (b->cnt < n) {
        u32 c = 0;
        if (b->p < b->end)
            c = *b->p++;
        else
            b->over++;
        b->buf |= c << b->cnt;
        b->cnt += 8;
    }
}

static void consume(struct bits *b, u32 n)
{
    b->buf >>= n;
    b->cnt -= n;
    if (b->cnt < 8 * b->over)
        b->err = 1;
}

static u32 getbits(struct bits *b, u32 n)
{
    fill(b, n);
    u32 v = b->buf & ((1u << n) - 1);
    consume(b, n);
    return v;
}

/* 0 on success; incomplete codes are allowed (single-code distance trees) */
static int huff_build(struct huff *h, const u8 *lens, u32 n)
{
    u16 offs[16];
    for (int i = 0; i < 16; i++)
        h->count[i] = 0;
    for (u32 i = 0; i < n; i++)
        h->count[lens[i]]++;
    h->count[0] = 0;
    int left = 1;
    for (int i = 1; i < 16; i++) {
        left = (left << 1) - h->count[i];
        if (left < 0)
            return -1;
    }
    offs[1] = 0;
    for (int i = 1; i < 15; i++)
        offs[i + 1] = offs[i] + h->count[i];
    for (u32 i = 0; i < n; i++)
        if (lens[i])
            h->sym[offs[lens[i]]++] = (u16)i;
    /* short codes into the lookup table: canonical code values in order, stored
     * bit-reversed (the stream sends a code's most significant bit first) and
     * repeated for every value of the bits that follow it */
    for (u32 i = 0; i < FAST_SIZE; i++)
        h->fast[i] = 0;
    u32 code = 0, index = 0;
    for (u32 len = 1; len <= FAST_BITS; len++) {
        for (u32 k = 0; k < h->count[len]; k++, code++) {
            if ((k & 31) == 0)
                uart_poll(); /* a whole table takes ~15k instructions */
            u32 rev = 0;
            for (u32 j = 0; j < len; j++)
                rev |= ((code >> j) & 1) << (len - 1 - j);
            for (u32 x = rev; x < FAST_SIZE; x += 1u << len)
                h->fast[x] = (u16)(len << 9 | h->sym[index + k]);
        }
        index += h->count[len];
        code <<= 1;
    }
    return 0;
}

static int huff_decode(struct bits *b, const struct huff *h)
{
    fill(b, FAST_BITS);
    u32 e = h->fast[b->buf & (FAST_SIZE - 1)];
    if (e) {
        consume(b, e >> 9);
        return (int)(e & 511);
    }
    int code = 0, first = 0, index = 0;
    for (int len = 1; len < 16; len++) {
        code |= (int)getbits(b, 1);
        int count = h->count[len];
        if (code - first < count)
            return h->sym[index + code - first];
        index += count;
        first = (first + count) << 1;
        code <<= 1;
    }
    b->err = 1;
    return 0;
}

static const u16 len_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const u8 len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const u16 dist_base[30] = {1,    2,    3,    4,    5,    7,     9,     13,    17,  25,
                                  33,   49,   65,   97,   129,  193,   257,   385,   513, 769,
                                  1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};

static int inflate_codes(struct bits *b, const struct huff *lit, const struct huff *dist, u8 *out,
                         u32 before, u32 *pos, u32 cap)
{
    u32 o = *pos, n = 0, polled = o;
    for (;;) {
        /* every 16 symbols, or sooner after long matches (16 of 258 bytes take 40 us) */
        if (++n == 16 || o - polled >= 1024) {
            uart_poll();
            n = 0;
            polled = o;
        }
        int s = huff_decode(b, lit);
        if (b->err)
            return -1;
        if (s < 256) {
            if (o >= cap)
                return -1;
            out[o++] = (u8)s;
        } else if (s == 256) {
            *pos = o;
            return 0;
        } else {
            s -= 257;
            if (s >= 29)
                return -1;
            u32 len = len_base[s] + getbits(b, len_extra[s]);
            int d = huff_decode(b, dist);
            if (d >= 30 || b->err)
                return -1;
            u32 extra = d < 4 ? 0 : (u32)(d - 2) >> 1;
            u32 back = dist_base[d] + getbits(b, extra);
            if (back > o + before || len > cap - o)
                return -1;
            const u8 *from = out + o - back;
            for (u32 i = 0; i < len; i++)
                out[o++] = from[i];
        }
    }
}

static struct huff lit_tree, dist_tree;

int inflate_raw(const u8 *src, u32 n, u8 *out, u32 before, u32 cap, u32 *out_len)
{
    static const u8 order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
    struct bits b = {src, src + n, 0, 0, 0, 0};
    u8 lens[320];
    u32 o = 0;
    int last;
    do {
        last = (int)getbits(&b, 1);
        u32 type = getbits(&b, 2);
        if (type == 0) {
            /* to a byte boundary: whole bytes already buffered go back to the input */
            b.p -= (b.cnt >> 3) - b.over;
            b.buf = b.cnt = b.over = 0;
            if (b.end - b.p < 4)
                return -1;
            u32 len = b.p[0] | (b.p[1] << 8), nlen = b.p[2] | (b.p[3] << 8);
            b.p += 4;
            if ((len ^ 0xFFFF) != nlen || len > (u32)(b.end - b.p) || len > cap - o)
                return -1;
            for (u32 i = 0; i < len; i++) {
                out[o++] = *b.p++;
                if ((i & 1023) == 1023)
                    uart_poll();
            }
        } else if (type == 1) {
            u32 i = 0;
            for (; i < 144; i++)
                lens[i] = 8;
            for (; i < 256; i++)
                lens[i] = 9;
            for (; i < 280; i++)
                lens[i] = 7;
            for (; i < 288; i++)
                lens[i] = 8;
            for (; i < 318; i++)
                lens[i] = 5;
            huff_build(&lit_tree, lens, 288);
            huff_build(&dist_tree, lens + 288, 30);
            if (inflate_codes(&b, &lit_tree, &dist_tree, out, before, &o, cap))
                return -1;
        } else if (type == 2) {
            u32 nlit = getbits(&b, 5) + 257, ndist = getbits(&b, 5) + 1, ncode = getbits(&b, 4) + 4;
            if (nlit > 286 || ndist > 30)
                return -1;
            for (u32 i = 0; i < 19; i++)
                lens[order[i]] = i < ncode ? (u8)getbits(&b, 3) : 0;
            if (huff_build(&lit_tree, lens, 19))
                return -1;
            u32 i = 0;
            while (i < nlit + ndist) {
                if ((i & 15) == 0)
                    uart_poll(); /* up to 316 bit-by-bit decodes: keep the link served */
                int s = huff_decode(&b, &lit_tree);
                if (b.err)
                    return -1;
                if (s < 16) {
                    lens[i++] = (u8)s;
                    continue;
                }
                u32 rep;
                u8 val = 0;
                if (s == 16) {
                    if (i == 0)
                        return -1;
                    val = lens[i - 1];
                    rep = 3 + getbits(&b, 2);
                } else if (s == 17) {
                    rep = 3 + getbits(&b, 3);
                } else {
                    rep = 11 + getbits(&b, 7);
                }
                if (i + rep > nlit + ndist)
                    return -1;
                while (rep--)
                    lens[i++] = val;
            }
            if (lens[256] == 0 || huff_build(&lit_tree, lens, nlit) ||
                huff_build(&dist_tree, lens + nlit, ndist))
                return -1;
            if (inflate_codes(&b, &lit_tree, &dist_tree, out, before, &o, cap))
                return -1;
        } else {
            return -1;
        }
        if (b.err)
            return -1;
    } while (!last);
    *out_len = o;
    return 0;
}
