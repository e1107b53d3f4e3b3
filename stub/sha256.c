/* SHA-256 (FIPS 180-4), written for the flasher: the digest of a flash region is
 * computed on the board so verification costs a few bytes on the wire.
 * SPDX-License-Identifier: MIT
 */
#include "flasher.h"

static const u32 K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* The sigma functions on a 64-bit register holding x twice: each 32-bit rotation is
 * then one shift (RV64IMAC has no rotate instruction), two instructions fewer each */
static inline u32 bsig(u32 x, int a, int b, int c)
{
    u64 y = (u64)x | ((u64)x << 32);
    return (u32)((y >> a) ^ (y >> b) ^ (y >> c));
}
#define BSIG0(x) bsig(x, 2, 13, 22)
#define BSIG1(x) bsig(x, 6, 11, 25)
static inline u32 ssig(u32 x, int a, int b, int c)
{
    u64 y = (u64)x | ((u64)x << 32);
    return (u32)((y >> a) ^ (y >> b)) ^ (x >> c);
}
#define SSIG0(x) ssig(x, 7, 18, 3)
#define SSIG1(x) ssig(x, 17, 19, 10)
/* One round with the eight working variables renamed instead of moved: eight rounds
 * in a row bring every name back to its place, so the loop body runs eight rounds.
 * Ch and Maj in their reduced forms (one operation fewer each). */
#define ROUND(a, b, c, d, e, f, g, h, i)                                                       \
    do {                                                                                       \
        u32 t1 = h + BSIG1(e) + (g ^ (e & (f ^ g))) + K[i] + w[i];                             \
        d += t1;                                                                               \
        h = t1 + BSIG0(a) + ((a & b) | (c & (a | b)));                                         \
    } while (0)

static void sha_block(struct sha256 *s, const u8 *p)
{
    u32 w[64];
    for (int i = 0; i < 16; i++)
        w[i] = ((u32)p[4 * i] << 24) | ((u32)p[4 * i + 1] << 16) | ((u32)p[4 * i + 2] << 8) |
               p[4 * i + 3];
    for (int i = 16; i < 64; i++)
        w[i] = w[i - 16] + SSIG0(w[i - 15]) + w[i - 7] + SSIG1(w[i - 2]);
    u32 a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
    u32 e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
    for (int i = 0; i < 64; i += 8) {
        ROUND(a, b, c, d, e, f, g, h, i);
        ROUND(h, a, b, c, d, e, f, g, i + 1);
        ROUND(g, h, a, b, c, d, e, f, i + 2);
        ROUND(f, g, h, a, b, c, d, e, i + 3);
        ROUND(e, f, g, h, a, b, c, d, i + 4);
        ROUND(d, e, f, g, h, a, b, c, i + 5);
        ROUND(c, d, e, f, g, h, a, b, i + 6);
        ROUND(b, c, d, e, f, g, h, a, i + 7);
    }
    s->h[0] += a;
    s->h[1] += b;
    s->h[2] += c;
    s->h[3] += d;
    s->h[4] += e;
    s->h[5] += f;
    s->h[6] += g;
    s->h[7] += h;
}

void sha256_init(struct sha256 *s)
{
    static const u32 iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                              0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    for (int i = 0; i < 8; i++)
        s->h[i] = iv[i];
    s->total = 0;
}

void sha256_update(struct sha256 *s, const u8 *p, u32 n)
{
    u32 used = (u32)(s->total & 63);
    s->total += n;
    while (n) {
        if (used == 0 && n >= 64) {
            sha_block(s, p);
            p += 64;
            n -= 64;
            continue;
        }
        u32 k = 64 - used < n ? 64 - used : n;
        for (u32 i = 0; i < k; i++)
            s->buf[used + i] = p[i];
        used += k;
        p += k;
        n -= k;
        if (used == 64) {
            sha_block(s, s->buf);
            used = 0;
        }
    }
}

void sha256_final(struct sha256 *s, u8 out[32])
{
    u64 bits = s->total * 8;
    u8 pad = 0x80, zero = 0, len[8];
    sha256_update(s, &pad, 1);
    while ((s->total & 63) != 56)
        sha256_update(s, &zero, 1);
    for (int i = 0; i < 8; i++)
        len[i] = (u8)(bits >> (56 - 8 * i));
    sha256_update(s, len, 8);
    for (int i = 0; i < 32; i++)
        out[i] = (u8)(s->h[i / 4] >> (24 - 8 * (i % 4)));
}
