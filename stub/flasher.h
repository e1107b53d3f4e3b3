/* Flasher-internal interfaces (beyond the shared hw.h).
 * SPDX-License-Identifier: MIT
 */
#ifndef KFPY_FLASHER_H
#define KFPY_FLASHER_H
#include "hw.h"

struct sha256 {
    u32 h[8];
    u64 total;
    u8 buf[64];
};
void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const u8 *p, u32 n);
void sha256_final(struct sha256 *s, u8 out[32]);

/* 0 on success, -1 on a malformed stream or an output larger than cap; back
 * references may reach `before` bytes in front of out (a preset dictionary) */
int inflate_raw(const u8 *src, u32 n, u8 *out, u32 before, u32 cap, u32 *out_len);

#endif
