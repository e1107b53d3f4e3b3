"""A DEFLATE writer whose Huffman codes the test chooses (RFC 1951, 3.2.2 and 3.2.7).

zlib picks its own code lengths, and on ordinary data they rarely reach the corners of a
table-driven decoder: codes of 15 bits, second-level tables of every depth, a code longer
than the first level for the end of block or a distance. This writer sends dynamic blocks
with exactly the code lengths given (the code length code: 4 bits for each of 0-15), so
a test can build any complete (or deliberately broken) code and have zlib check the
stream it makes.
"""

from __future__ import annotations

import random

#: (base, extra bits) of the length codes 257-285 and the distance codes 0-29
LENGTHS = list(
    zip(
        [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99]
        + [115, 131, 163, 195, 227, 258],
        [0] * 8 + [e for e in range(1, 6) for _ in range(4)] + [0],
        strict=True,
    )
)
DISTANCES = [(1 + i, 0) for i in range(4)] + [
    (1 + (1 << (e + 1)) + j * (1 << e), e) for e in range(1, 14) for j in range(2)
]


class Bits:
    """LSB-first bit writer."""

    def __init__(self) -> None:
        self.value = 0
        self.count = 0

    def put(self, v: int, n: int) -> None:
        self.value |= v << self.count
        self.count += n

    def code(self, code: int, n: int) -> None:
        """A Huffman code: its most significant bit goes first."""
        self.put(int(f"{code:0{n}b}"[::-1], 2) if n else 0, n)

    def bytes(self) -> bytes:
        return self.value.to_bytes((self.count + 7) // 8, "little")


def canonical(lengths: list[int]) -> list[int]:
    """The codes of a canonical Huffman code with these lengths (0: unused)."""
    count = [0] * 16
    for n in lengths:
        if n:
            count[n] += 1
    code, nxt = 0, [0] * 16
    for n in range(1, 16):
        code = (code + count[n - 1]) << 1 if n > 1 else 0
        nxt[n] = code
    out = []
    for n in lengths:
        out.append(nxt[n] if n else 0)
        if n:
            nxt[n] += 1
    return out


def random_complete(rng: random.Random, leaves: int, deep: float = 0.5) -> list[int]:
    """Depths of a random complete binary tree of ``leaves`` leaves, none deeper than 15:
    leaves split at random, the deepest one with probability ``deep`` (long codes)."""
    depths = [0]
    while len(depths) < leaves:
        ok = [i for i, d in enumerate(depths) if d < 15]
        i = max(ok, key=lambda j: depths[j]) if rng.random() < deep else rng.choice(ok)
        d = depths.pop(i)
        depths += [d + 1, d + 1]
    return depths


def lengths_for(rng: random.Random, symbols: list[int], size: int, deep: float) -> list[int]:
    """Code lengths over ``size`` symbols: a random complete code on ``symbols``."""
    depths = random_complete(rng, len(symbols), deep)
    lengths = [0] * size
    for s, d in zip(symbols, depths, strict=True):
        lengths[s] = d
    return lengths


def dynamic_block(
    bits: Bits, lit_len: list[int], dist_len: list[int], symbols: list[tuple], last: bool
) -> None:
    """One dynamic block: ``symbols`` are ("lit", byte) and ("copy", length, distance)
    (the end of block is added); every symbol used must have a code."""
    bits.put(int(last), 1)
    bits.put(2, 2)
    bits.put(len(lit_len) - 257, 5)
    bits.put(len(dist_len) - 1, 5)
    bits.put(19 - 4, 4)
    order = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15]
    for s in order:
        bits.put(4 if s < 16 else 0, 3)
    for n in lit_len + dist_len:  # code length symbol n has the 4-bit code n
        bits.code(n, 4)
    lit_code, dist_code = canonical(lit_len), canonical(dist_len)

    def send(table_len: list[int], table_code: list[int], s: int) -> None:
        assert table_len[s], f"symbol {s} has no code"
        bits.code(table_code[s], table_len[s])

    for sym in symbols:
        if sym[0] == "lit":
            send(lit_len, lit_code, sym[1])
            continue
        _, length, distance = sym
        i, j = length_symbol(length) - 257, distance_symbol(distance)
        send(lit_len, lit_code, 257 + i)
        bits.put(length - LENGTHS[i][0], LENGTHS[i][1])
        send(dist_len, dist_code, j)
        bits.put(distance - DISTANCES[j][0], DISTANCES[j][1])
    send(lit_len, lit_code, 256)


def length_symbol(length: int) -> int:
    """The length code (257-285) of a match length."""
    if length == 258:
        return 285
    return 257 + max(i for i, (b, _e) in enumerate(LENGTHS[:28]) if b <= length)


def distance_symbol(distance: int) -> int:
    return max(j for j, (b, _e) in enumerate(DISTANCES) if b <= distance)
