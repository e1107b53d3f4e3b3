"""The K210 KPU layer-argument block (12 x u64 = 96 bytes) and its parameter tables.

Every KPU convolution in every kmodel version (V1, V3, V4, V5) is described by the
same 96-byte ``kpu_layer_argument_t`` that the runtime pushes into the KPU's argument
FIFO. This module decodes it into named fields (bit positions from the public SDK
header, see docs/kmodel.md), re-encodes it (reserved bits preserved), and decodes the
batch-norm and activation tables it refers to. The host runtime uses it for emulation
and ``model info`` for the per-layer table.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

__all__ = [
    "KPU_ARGS_SIZE",
    "KPU_RAM_SIZE",
    "ACT_TABLE_SIZE",
    "POOL_TYPES",
    "KpuLayerArgs",
    "ActivationTable",
    "decode_kpu_args",
    "decode_batchnorm",
    "decode_activation",
    "kpu_row_layout",
    "kpu_map_bytes",
]

KPU_ARGS_SIZE = 96
#: KPU RAM: 2 MiB addressed in 64-byte rows
KPU_RAM_SIZE = 2 * 1024 * 1024
KPU_ROW = 64
ACT_TABLE_SIZE = 144

#: pool_type -> (name, window, stride); output = input // stride
POOL_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("bypass", 1, 1),
    1: ("max_2_s2", 2, 2),
    2: ("mean_2_s2", 2, 2),
    3: ("max_4_s4", 4, 4),
    4: ("mean_4_s4", 4, 4),
    5: ("left_top_2_s2", 2, 2),
    6: ("right_top_2_s2", 2, 2),
    7: ("left_top_4_s4", 4, 4),
    8: ("mean_2_s1", 2, 1),
    9: ("max_2_s1", 2, 1),
}
#: kernel_type -> filter size
KERNEL_SIZES = {0: 1, 1: 3}

# (register index, field name, low bit, high bit (exclusive), signed)
_FIELDS: tuple[tuple[int, str, int, int, bool], ...] = (
    (0, "int_en", 0, 1, False),
    (0, "ram_flag", 1, 2, False),
    (0, "full_add", 2, 3, False),
    (0, "depth_wise_layer", 3, 4, False),
    (1, "image_src_addr", 0, 15, False),
    (1, "image_dst_addr", 32, 47, False),
    (2, "i_ch_num", 0, 10, False),
    (2, "o_ch_num", 32, 42, False),
    (2, "o_ch_num_coef", 48, 58, False),
    (3, "i_row_wid", 0, 10, False),
    (3, "i_col_high", 10, 19, False),
    (3, "o_row_wid", 32, 42, False),
    (3, "o_col_high", 42, 51, False),
    (4, "kernel_type", 0, 3, False),
    (4, "pad_type", 3, 4, False),
    (4, "pool_type", 4, 8, False),
    (4, "first_stride", 8, 9, False),
    (4, "bypass_conv", 9, 10, False),
    (4, "load_para", 10, 11, False),
    (4, "dma_burst_size", 16, 24, False),
    (4, "pad_value", 24, 32, False),
    (4, "bwsx_base_addr", 32, 64, False),
    (5, "load_coor", 0, 1, False),
    (5, "load_time", 1, 7, False),
    (5, "para_size", 15, 32, False),
    (5, "para_start_addr", 32, 64, False),
    (6, "coef_column_offset", 0, 4, False),
    (6, "coef_row_offset", 4, 16, False),
    (7, "channel_switch_addr", 0, 15, False),
    (7, "row_switch_addr", 16, 20, False),
    (7, "coef_size", 20, 28, False),
    (7, "coef_group", 28, 31, False),
    (7, "load_act", 31, 32, False),
    (7, "active_addr", 32, 64, False),
    (8, "wb_channel_switch_addr", 0, 15, False),
    (8, "wb_row_switch_addr", 16, 20, False),
    (8, "wb_group", 20, 23, False),
    (9, "shr_w", 0, 4, False),
    (9, "shr_x", 4, 8, False),
    (9, "arg_w", 8, 32, True),
    (9, "arg_x", 32, 56, True),
    (10, "arg_add", 0, 40, True),
    (11, "send_data_out", 0, 1, False),
    (11, "channel_byte_num", 16, 32, False),
    (11, "dma_total_byte", 32, 64, False),
)


def _get(word: int, lo: int, hi: int, signed: bool) -> int:
    v = (word >> lo) & ((1 << (hi - lo)) - 1)
    if signed and v >> (hi - lo - 1):
        v -= 1 << (hi - lo)
    return v


@dataclass(frozen=True)
class KpuLayerArgs:
    """Decoded ``kpu_layer_argument_t``. Field names follow the SDK header.

    Counts are stored minus one in hardware (``i_ch_num`` = IC - 1 ...); the
    properties (``in_channels``, ``in_shape``...) give the real values. ``raw`` keeps
    the original 96 bytes, including reserved bits.
    """

    int_en: int
    ram_flag: int
    full_add: int
    depth_wise_layer: int
    image_src_addr: int
    image_dst_addr: int
    i_ch_num: int
    o_ch_num: int
    o_ch_num_coef: int
    i_row_wid: int
    i_col_high: int
    o_row_wid: int
    o_col_high: int
    kernel_type: int
    pad_type: int
    pool_type: int
    first_stride: int
    bypass_conv: int
    load_para: int
    dma_burst_size: int
    pad_value: int
    bwsx_base_addr: int
    load_coor: int
    load_time: int
    para_size: int
    para_start_addr: int
    coef_column_offset: int
    coef_row_offset: int
    channel_switch_addr: int
    row_switch_addr: int
    coef_size: int
    coef_group: int
    load_act: int
    active_addr: int
    wb_channel_switch_addr: int
    wb_row_switch_addr: int
    wb_group: int
    shr_w: int
    shr_x: int
    arg_w: int
    arg_x: int
    arg_add: int
    send_data_out: int
    channel_byte_num: int
    dma_total_byte: int
    raw: bytes = field(repr=False, compare=False, default=bytes(KPU_ARGS_SIZE))

    # --- real sizes -------------------------------------------------------------
    @property
    def depthwise(self) -> bool:
        return bool(self.depth_wise_layer)

    @property
    def in_channels(self) -> int:
        return self.i_ch_num + 1

    @property
    def out_channels(self) -> int:
        return self.o_ch_num + 1

    @property
    def in_shape(self) -> tuple[int, int, int]:
        """(C, H, W) read by the layer."""
        return (self.i_ch_num + 1, self.i_col_high + 1, self.i_row_wid + 1)

    @property
    def out_shape(self) -> tuple[int, int, int]:
        """(C, H, W) written by the layer (after pooling)."""
        return (self.o_ch_num + 1, self.o_col_high + 1, self.o_row_wid + 1)

    @property
    def kernel_size(self) -> int | None:
        """1 or 3; None for a kernel_type no compiler writes."""
        return KERNEL_SIZES.get(self.kernel_type)

    @property
    def pool_name(self) -> str:
        return POOL_TYPES.get(self.pool_type, (f"unknown_{self.pool_type}", 0, 0))[0]

    @property
    def weight_count(self) -> int:
        """Number of weights: OC*k*k for depthwise, else IC*OC*k*k."""
        k = self.kernel_size or 0
        per_oc = k * k if self.depthwise else self.in_channels * k * k
        return per_oc * self.out_channels

    @property
    def kpu_in_bytes(self) -> int:
        return kpu_map_bytes(*self.in_shape)

    @property
    def kpu_out_bytes(self) -> int:
        return kpu_map_bytes(*self.out_shape)

    def kpu_ram_ranges(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """((start, size) of the input map, (start, size) of the output map) in bytes."""
        return (
            (self.image_src_addr * KPU_ROW, self.kpu_in_bytes),
            (self.image_dst_addr * KPU_ROW, self.kpu_out_bytes),
        )

    def to_dict(self) -> dict[str, Any]:
        """Named register fields (no raw bytes), JSON-able."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "raw"}

    def encode(self) -> bytes:
        """Re-encode into 96 bytes; bits not covered by a field keep their ``raw`` value."""
        words = list(struct.unpack("<12Q", self.raw))
        for reg, name, lo, hi, _signed in _FIELDS:
            mask = ((1 << (hi - lo)) - 1) << lo
            value = (getattr(self, name) << lo) & mask
            words[reg] = (words[reg] & ~mask) | value
        return struct.pack("<12Q", *words)

    def replace(self, **changes: int) -> KpuLayerArgs:
        """A copy with some fields changed (``raw`` re-encoded to match)."""
        new = replace(self, **changes)  # type: ignore[arg-type]  # int fields only
        return replace(new, raw=new.encode())


def decode_kpu_args(block: bytes | memoryview) -> KpuLayerArgs:
    """Decode a 96-byte layer-argument block (the caller checks the length)."""
    raw = bytes(block[:KPU_ARGS_SIZE])
    if len(raw) != KPU_ARGS_SIZE:
        raise ValueError(f"a KPU layer-argument block is {KPU_ARGS_SIZE} bytes, got {len(raw)}")
    words = struct.unpack("<12Q", raw)
    values = {name: _get(words[reg], lo, hi, s) for reg, name, lo, hi, s in _FIELDS}
    return KpuLayerArgs(**values, raw=raw)


def decode_batchnorm(data: bytes | memoryview) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batch-norm table (one u64 per output channel) -> (norm_mul, norm_add, norm_shift).

    norm_mul: signed 24 bits [0,24); norm_add: signed 32 bits [24,56); norm_shift:
    unsigned 4 bits [56,60). Returned as int64 arrays.
    """
    w = np.frombuffer(data, "<u8", len(data) // 8).astype(np.int64)
    mul = w & 0xFFFFFF
    mul = np.where(mul >= 1 << 23, mul - (1 << 24), mul)
    add = (w >> 24) & 0xFFFFFFFF
    add = np.where(add >= 1 << 31, add - (1 << 32), add)
    shift = (w >> 56) & 0xF
    return mul, add, shift


@dataclass(frozen=True)
class ActivationTable:
    """The 16-segment piecewise-linear activation (144 bytes), as int64 arrays of 16."""

    x_start: np.ndarray  # signed 36 bits
    y_mul: np.ndarray  # signed 16 bits
    shift: np.ndarray  # unsigned 8 bits
    bias: np.ndarray  # u8 add per segment


def decode_activation(data: bytes | memoryview) -> ActivationTable:
    """Decode a 144-byte activation table (the caller checks the length)."""
    raw = bytes(data[:ACT_TABLE_SIZE])
    if len(raw) != ACT_TABLE_SIZE:
        raise ValueError(f"an activation table is {ACT_TABLE_SIZE} bytes, got {len(raw)}")
    w = np.frombuffer(raw, "<u8", 16).astype(np.int64)
    shift = w & 0xFF
    mul = (w >> 8) & 0xFFFF
    mul = np.where(mul >= 1 << 15, mul - (1 << 16), mul)
    xs = (w >> 24) & ((1 << 36) - 1)
    xs = np.where(xs >= 1 << 35, xs - (1 << 36), xs)
    bias = np.frombuffer(raw, "u1", 16, 128).astype(np.int64)
    return ActivationTable(xs, mul, shift, bias)


def kpu_row_layout(width: int) -> tuple[int, int, int]:
    """(groups, row_len, row_pitch) of a KPU feature map of this width (see docs)."""
    if width <= 16:
        return 4, 1, 16
    if width <= 32:
        return 2, 1, 32
    return 1, (width + 63) // 64, 64


def kpu_map_bytes(channels: int, height: int, width: int) -> int:
    """Bytes of KPU RAM a (C, H, W) map occupies (64-byte rows, channels grouped)."""
    groups, row_len, _ = kpu_row_layout(width)
    groups = min(channels, groups) or 1
    return KPU_ROW * row_len * height * (-(-channels // groups))
