/* Raw DEFLATE (RFC 1951) decoder for compressed writes. The host compresses each
 * block of up to 64 KiB (zlib, wbits -15) on its own or with a preset dictionary (the
 * tail of the frame before it, see docs/flasher-protocol.md, BC): back references
 * stay inside the output buffer and the `before` bytes of dictionary right in front
 * of it.
 *
 * Every instruction counts (the simulator pays ~12 ns a guest instruction, the board
 * a cycle; docs/flasher-protocol.md, "Compression", has the measured cost), so codes
 * are decoded by table: the next ROOT bits of the stream index a table whose entry
 * holds what the decoder needs (the literal byte, or a length or distance base and its
 * count of extra bits) and the code length to consume; a code longer than ROOT bits
 * leads to a second-level table indexed by the bits after the first ROOT. The tables
 * are built at run time for each block, in .bss. The bit buffer holds up to 64 bits and
 * is refilled an aligned 32-bit word at a time (the K210 core does not take
 * misaligned word loads, and the flasher has no trap handler to emulate them). The
 * receive hook runs every 64 output bytes so the link never overflows.
 * SPDX-License-Identifier: MIT
 */
#include "flasher.h"

/* An entry: bits 0-3 the code length, 4-7 the count of extra bits (of a link: the
 * index bits of its second-level table). Bit 31 marks a literal (or a code length
 * symbol), its byte in bits 8-15: a sign test tells it from the rest, which have flags
 * in bits 8-10 and a value in bits 16-30 (a length or distance base, a link's table
 * offset). A link stands for codes longer than the root: look up the second level. */
#define E_LIT(byte) (1u << 31 | (u32)(byte) << 8)
#define E_VAL(v) ((u32)(v) << 16)
#define E_END (1u << 8)
#define E_BAD (1u << 9) /* no such code, or a symbol the format does not allow */
#define E_LINK (1u << 10)

#define LIT_ROOT 10
#define DIST_ROOT 8
#define CLEN_ROOT 7
/* Second-level tables: a complete code whose codes under one root entry reach k bits
 * further needs a table of 2^k entries, and holds at least k+1 codes of those: 288
 * symbols fill at most 48 tables of 32 entries, 30 distances 3 of 128 and one of 32. */
#define LIT_SIZE ((1u << LIT_ROOT) + 48 * 32)
#define DIST_SIZE ((1u << DIST_ROOT) + 3 * 128 + 32)

static u32 lit_table[LIT_SIZE], dist_table[DIST_SIZE];

static const u16 len_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const u8 len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const u16 dist_base[30] = {1,    2,    3,    4,    5,    7,     9,     13,    17,  25,
                                  33,   49,   65,   97,   129,  193,   257,   385,   513, 769,
                                  1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};

enum kind { LITLEN, DIST, CLEN };

/* what symbol `s` of a `kind` table decodes to, without its code length */
static u32 entry_of(enum kind kind, u32 s)
{
    if (kind == CLEN || (kind == LITLEN && s < 256))
        return E_LIT(s);
    if (kind == LITLEN) {
        if (s == 256)
            return E_END;
        s -= 257;
        if (s >= 29)
            return E_BAD;
        return E_VAL(len_base[s]) | (u32)len_extra[s] << 4;
    }
    if (s >= 30)
        return E_BAD;
    return E_VAL(dist_base[s]) | (s < 4 ? 0 : (s - 2) >> 1) << 4;
}

/* Bits are taken LSB first. Past the end of the input the buffer is filled with zero
 * bytes (counted in `over`); having consumed any of those padding bits is the error,
 * checked at the end of every block (output stays within its bounds meanwhile).
 * `words` is where an aligned word can no longer be loaded whole. */
struct bits {
    const u8 *p, *end, *words;
    u64 buf;
    u32 cnt, over;
};

typedef u32 __attribute__((may_alias)) word;

/* at least 32 bits in the buffer: a whole aligned word when one is there, else byte
 * by byte (up to an aligned word, or at the end and past it) */
static inline void refill(struct bits *b)
{
    if (b->cnt >= 32)
        return;
    if (__builtin_expect(((u64)b->p & 3) == 0 && b->p < b->words, 1)) {
        b->buf |= (u64) * (const word *)(const void *)b->p << b->cnt;
        b->p += 4;
        b->cnt += 32;
        return;
    }
    do {
        if (b->p < b->end)
            b->buf |= (u64)*b->p++ << b->cnt;
        else
            b->over++;
        b->cnt += 8;
    } while (b->cnt < 32);
}

static inline int overrun(const struct bits *b)
{
    return b->cnt < 8 * b->over;
}

/* up to 24 bits */
static u32 getbits(struct bits *b, u32 n)
{
    refill(b);
    u32 v = (u32)b->buf & ((1u << n) - 1);
    b->buf >>= n;
    b->cnt -= n;
    return v;
}

/* The table of the code with `lens[0..n)` at `t`, its first level indexed by `root`
 * bits; -1 for an over-subscribed or incomplete code (one lone code of one bit, as a
 * block with a single distance sends, is allowed: the unused entry is E_BAD). */
static int huff_build(u32 *t, u32 size, u32 root, enum kind kind, const u8 *lens, u32 n)
{
    u16 count[16], offs[16], sym[288];
    for (u32 i = 0; i < 16; i++)
        count[i] = 0;
    for (u32 i = 0; i < n; i++)
        count[lens[i]]++;
    count[0] = 0;
    int left = 1;
    for (u32 i = 1; i < 16; i++) {
        left = (left << 1) - count[i];
        if (left < 0)
            return -1;
    }
    if (left > 0 && !(left == 1 << 14 && count[1] == 1) && left != 1 << 15)
        return -1;
    offs[1] = 0;
    for (u32 i = 1; i < 15; i++)
        offs[i + 1] = offs[i] + count[i];
    for (u32 i = 0; i < n; i++)
        if (lens[i])
            sym[offs[lens[i]]++] = (u16)i;
    /* a complete code fills every entry; only a lone code leaves one unused */
    u32 mask = (1u << root) - 1;
    if (left)
        for (u32 i = 0; i <= mask; i++)
            t[i] = E_BAD;
    /* Codes in canonical order (RFC 1951, 3.2.2), each kept bit-reversed in `rev` (the
     * stream sends its most significant bit first, the buffer is read LSB first): the
     * next code of a length is one more, i.e. a carry from bit len-1 down in `rev`, and
     * a longer code appends zeros, which leaves `rev` as it is. */
    u32 rev = 0, next = mask + 1, prefix = ~0u, sub = 0, k = 0;
    for (u32 len = 1, i = 0; len < 16; len++) {
        for (u32 c = 0; c < count[len]; c++, i++) {
            if ((i & 31) == 31)
                uart_poll();
            u32 e = entry_of(kind, sym[i]) | len;
            if (len <= root) {
                for (u32 x = rev; x <= mask; x += 1u << len)
                    t[x] = e;
            } else {
                if ((rev & mask) != prefix) {
                    /* a new second level: as deep as the codes of this prefix go (the
                     * room left at depth l after the codes of length l still to come) */
                    prefix = rev & mask;
                    u32 l = len;
                    int room = (1 << (len - root)) - (count[len] - c);
                    while (room > 0 && l < 15)
                        room = 2 * room - count[++l];
                    k = l - root;
                    if (next + (1u << k) > size)
                        return -1;
                    sub = next;
                    next += 1u << k;
                    t[prefix] = E_LINK | E_VAL(sub) | k << 4;
                }
                for (u32 x = rev >> root; x < 1u << k; x += 1u << (len - root))
                    t[sub + x] = e;
            }
            u32 bit = 1u << (len - 1);
            while (rev & bit) {
                rev ^= bit;
                bit >>= 1;
            }
            rev |= bit;
        }
    }
    return 0;
}

/* the low n bits of v */
static inline u32 low(u64 v, u32 n)
{
    return (u32)v & ((1u << n) - 1);
}

/* entry e of a table's first level, or where its link leads (not consumed) */
static inline u32 second(const u32 *t, u32 root, u32 e, u64 buf)
{
    if ((int)e >= 0 && (e & E_LINK))
        e = t[(e >> 16) + low(buf >> root, (e >> 4) & 15)];
    return e;
}

/* the entry for the next code of a table (not consumed) */
static inline u32 lookup(const u32 *t, u32 root, u64 buf)
{
    return second(t, root, t[low(buf, root)], buf);
}

#define POLL_BYTES 64 /* output between receive polls: ~1600 instructions, 4 us */

/* The symbols of a block up to its end-of-block code. The loop runs while the output is
 * short of `lim`: the end of the buffer or the next poll, whichever comes first, so a
 * literal needs no check of its own. */
static int inflate_codes(struct bits *b, u8 *out, u32 before, u32 *pos, u32 cap)
{
    /* the bit buffer in locals: the compiler keeps them in registers */
    struct bits s = *b;
    u8 *o = out + *pos, *end = out + cap, *poll = o + POLL_BYTES;
    const u8 *first = out - before;
    for (;;) {
        u8 *lim = poll < end ? poll : end;
        while (o < lim) {
            refill(&s);
            u32 e = lit_table[low(s.buf, LIT_ROOT)], n;
            if (__builtin_expect((int)e < 0, 1)) { /* a literal of up to LIT_ROOT bits */
                n = e & 15;
                s.buf >>= n;
                s.cnt -= n;
                *o++ = (u8)(e >> 8);
                continue;
            }
            e = second(lit_table, LIT_ROOT, e, s.buf);
            n = e & 15;
            s.buf >>= n;
            s.cnt -= n;
            if ((int)e < 0) {
                *o++ = (u8)(e >> 8);
                continue;
            }
            if (e & (E_END | E_BAD)) {
                if (e & E_BAD)
                    return -1;
                goto done;
            }
            /* a length code (at most 15 bits) and its extra bits (5) fit in 32 */
            n = (e >> 4) & 15;
            u32 len = (e >> 16) + low(s.buf, n);
            s.buf >>= n;
            s.cnt -= n;
            refill(&s);
            e = lookup(dist_table, DIST_ROOT, s.buf);
            if (e & E_BAD)
                return -1;
            n = e & 15;
            s.buf >>= n;
            s.cnt -= n;
            n = (e >> 4) & 15;
            u32 back = (e >> 16) + low(s.buf, n);
            s.buf >>= n;
            s.cnt -= n;
            if (back > (u64)(o - first) || len > (u64)(end - o))
                return -1;
            /* two bytes a turn (len >= 3: one or two first leave an even count) */
            const u8 *from = o - back;
            u8 *stop = o + len;
            *o++ = *from++;
            if (!(len & 1))
                *o++ = *from++;
            do {
                o[0] = from[0];
                o[1] = from[1];
                o += 2;
                from += 2;
            } while (o < stop);
        }
        if (o >= poll) {
            uart_poll();
            poll = o + POLL_BYTES;
            continue;
        }
        /* the buffer is full: only the end of the block may follow */
        refill(&s);
        u32 e = lookup(lit_table, LIT_ROOT, s.buf);
        s.buf >>= e & 15;
        s.cnt -= e & 15;
        if ((int)e >= 0 && (e & E_END))
            break;
        return -1;
    }
done:
    *b = s;
    *pos = (u32)(o - out);
    return overrun(b) ? -1 : 0;
}

/* the fixed codes (RFC 1951, 3.2.6): literal/length lengths 8, 9, 7, 8, distances 5
 * (all 32 of them, so the code is complete: 30 and 31 decode to E_BAD). Once a block,
 * as the dynamic header: cold, i.e. built for size (the flasher crosses the wire). */
static int __attribute__((cold)) fixed_tables(u8 *lens)
{
    u32 i = 0;
    for (; i < 144; i++)
        lens[i] = 8;
    for (; i < 256; i++)
        lens[i] = 9;
    for (; i < 280; i++)
        lens[i] = 7;
    for (; i < 288; i++)
        lens[i] = 8;
    for (; i < 320; i++)
        lens[i] = 5;
    return huff_build(lit_table, LIT_SIZE, LIT_ROOT, LITLEN, lens, 288) ||
           huff_build(dist_table, DIST_SIZE, DIST_ROOT, DIST, lens + 288, 32);
}

/* the code lengths of a dynamic block (RFC 1951, 3.2.7) into its tables */
static int __attribute__((cold)) dynamic_tables(struct bits *b, u8 *lens)
{
    static const u8 order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
    u32 nlit = getbits(b, 5) + 257, ndist = getbits(b, 5) + 1, ncode = getbits(b, 4) + 4;
    if (nlit > 286 || ndist > 30)
        return -1;
    for (u32 i = 0; i < 19; i++)
        lens[order[i]] = i < ncode ? (u8)getbits(b, 3) : 0;
    if (huff_build(lit_table, LIT_SIZE, CLEN_ROOT, CLEN, lens, 19))
        return -1;
    for (u32 i = 0, k = 0; i < nlit + ndist; k++) {
        if ((k & 31) == 31)
            uart_poll(); /* up to 316 codes: keep the link served */
        refill(b);
        u32 e = lookup(lit_table, CLEN_ROOT, b->buf);
        if ((int)e >= 0)
            return -1;
        b->buf >>= e & 15;
        b->cnt -= e & 15;
        u32 s = (e >> 8) & 255;
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
            rep = 3 + getbits(b, 2);
        } else if (s == 17) {
            rep = 3 + getbits(b, 3);
        } else {
            rep = 11 + getbits(b, 7);
        }
        if (i + rep > nlit + ndist)
            return -1;
        while (rep--)
            lens[i++] = val;
    }
    return overrun(b) || lens[256] == 0 ||
           huff_build(lit_table, LIT_SIZE, LIT_ROOT, LITLEN, lens, nlit) ||
           huff_build(dist_table, DIST_SIZE, DIST_ROOT, DIST, lens + nlit, ndist);
}

int inflate_raw(const u8 *src, u32 n, u8 *out, u32 before, u32 cap, u32 *out_len)
{
    struct bits b = {src, src + n, n >= 4 ? src + n - 3 : src, 0, 0, 0};
    u8 lens[320];
    u32 o = 0;
    int last;
    do {
        last = (int)getbits(&b, 1);
        u32 type = getbits(&b, 2);
        if (overrun(&b))
            return -1;
        if (type == 0) {
            /* to a byte boundary: whole bytes already buffered go back to the input */
            u32 whole = b.cnt >> 3;
            if (whole < b.over)
                return -1;
            b.p -= whole - b.over;
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
        } else if (type == 3 || (type == 1 ? fixed_tables(lens) : dynamic_tables(&b, lens)) ||
                   inflate_codes(&b, out, before, &o, cap)) {
            return -1;
        }
    } while (!last);
    *out_len = o;
    return 0;
}
