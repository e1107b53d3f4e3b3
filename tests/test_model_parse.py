"""kmodel V3/V4/V5 parsers: fixtures, strictness, tolerance, fuzzing."""

from __future__ import annotations

import contextlib
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.paths import KMODELS as FIXTURES

from kflashpy.errors import FormatError, KflashError
from kflashpy.model import parse, parse_v3, parse_v4, parse_v5, swap_words
from kflashpy.model.kpu_args import decode_activation, decode_batchnorm, decode_kpu_args
from kflashpy.model.v3 import KModelV3
from kflashpy.model.v4 import KModelV4
from kflashpy.model.v5 import KModelV5

V3_IRIS = FIXTURES / "v3/iris_nncase-v0.1.0-rc5.kmodel"
V3_MNIST = FIXTURES / "v3/mnist_maixpy-scripts.kmodel"
V3_YOLO = FIXTURES / "v3/yolo_20classes_nncase-v0.1.0-rc5.kmodel"
V4_IRIS = FIXTURES / "v4/iris_nncase-v0.2.0-beta4.kmodel"
V4_SLIM = FIXTURES / "v4/slim-320_nncase-v0.2.0-beta4.kmodel"
V5_TINY1 = FIXTURES / "generated_v5/tiny1_k210.kmodel"
V5_TINY2 = FIXTURES / "generated_v5/tiny2_k210.kmodel"
V5_IRIS = FIXTURES / "generated_v5/iris_k210.kmodel"
ALL = sorted(FIXTURES.glob("*/*.kmodel"))


def test_fixture_set_present():
    assert len(ALL) >= 9


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_fixture_parses(path):
    data = path.read_bytes()
    m = parse(data, path.name)
    assert isinstance(m, KModelV3 | KModelV4 | KModelV5)
    assert m.model_size >= len(data) - 7 or isinstance(m, KModelV5)
    # the swapped form parses to the same structure when allowed
    ragged = len(data) % 4
    m2 = parse(swap_words(data + bytes(-ragged % 4)), path.name, allow_swapped=True)
    assert type(m2) is type(m) and m2.model_size == m.model_size


def test_v3_iris_fc():
    m = parse_v3(V3_IRIS.read_bytes(), "iris")
    assert (m.main_mem_usage, m.header_end, m.model_size) == (56, 52, 440)
    assert [op.name for op in m.layers] == ["FULLY_CONNECTED"] * 2
    fc = m.layers[0]
    assert (fc.in_channels, fc.out_channels, fc.act) == (4, 10, 1)
    assert fc.arrays["weights"].count == 40 and fc.arrays["bias"].count == 10
    last = m.layers[1]
    assert (last.body_size, last.available) == (160, 156)  # 4 bytes of padding missing
    assert m.inputs[0].shape == (1, 4) and m.outputs[0].size == 12
    w = np.frombuffer(m.data, "<f4", fc.arrays["weights"].count, fc.arrays["weights"].offset)
    assert np.isfinite(w).all()


def test_v3_mnist_layers_and_conv_fields():
    m = parse_v3(V3_MNIST.read_bytes(), "mnist")
    names = [op.name for op in m.layers]
    assert names == [
        "K210_CONV", "K210_CONV", "DEQUANTIZE", "TENSORFLOW_FLATTEN", "FULLY_CONNECTED",
        "QUANTIZE", "K210_ADD_PADDING", "K210_CONV", "K210_REMOVE_PADDING", "DEQUANTIZE",
        "SOFTMAX",
    ]  # fmt: skip
    c0 = m.layers[0].kpu
    assert c0.in_shape == (1, 28, 28) and c0.out_shape == (16, 14, 14)
    assert c0.kernel_size == 3 and c0.pool_name == "max_2_s2" and not c0.depthwise
    assert (c0.shr_x, c0.arg_x) == (15, -3932160)
    assert m.layers[3].shape == (7, 7, 32)
    assert m.layers[1].flags == 1  # main-memory output
    assert m.inputs[0].shape == (1, 1, 28, 28) and m.inputs[0].dtype == "uint8"


def test_v3_yolo_depthwise_and_tables():
    m = parse_v3(V3_YOLO.read_bytes(), "yolo")
    convs = [op for op in m.layers if op.kpu]
    assert len(convs) == 16
    assert convs[1].kpu.depthwise and convs[1].kpu.weight_count == 16 * 9
    assert {c.kpu.pool_type for c in convs} == {0, 1, 9}
    mul, add, shift = decode_batchnorm(m.view(convs[0].arrays["bn"]))
    assert len(mul) == 16 and (shift >= 0).all() and (shift < 16).all()
    act = decode_activation(m.view(convs[0].arrays["act"]))
    assert act.x_start[0] == -(1 << 35)
    assert m.layers[-1].name == "CHANNELWISE_DEQUANTIZE" and m.layers[-1].channels == 125
    assert m.max_body == 532992


def test_v4_nodes():
    m = parse_v4(V4_SLIM.read_bytes(), "slim")
    assert len(m.nodes) == 73 and m.target_name == "k210"
    assert m.header_end == 688 and m.max_body == 68096
    assert m.input_tensors()[0].shape == (1, 3, 240, 320)
    assert m.inputs[0].memory == "kpu"
    conv = m.nodes[0]
    assert conv.name == "kpu_conv2d" and conv.kpu.pool_name == "left_top_2_s2"
    assert conv.kpu.pad_value == 128 and conv.kpu.arg_add == 173952
    for node in m.nodes:
        for span in node.arrays.values():
            assert node.offset <= span.offset and span.end <= node.offset + node.available
    concat = m.nodes[45]
    assert concat.input_count == 4 and concat.dims == [3600, 600, 160, 60]
    qb = m.nodes[49]
    assert qb.name == "quantized_binary" and qb.output_shift == 32
    iris = parse_v4(V4_IRIS.read_bytes(), "iris")
    assert [n.name for n in iris.nodes] == ["transpose", "matmul", "transpose", "matmul"]
    assert iris.nodes[1].arrays["bias"].count == 10 and iris.constants.size == 280


def test_v5_modules_and_k210_ops():
    m = parse_v5(V5_TINY2.read_bytes(), "tiny2")
    assert [mod.type for mod in m.modules] == ["stackvm", "k210"]
    k210 = m.modules[1]
    ops = k210.functions[0].ops
    assert [op.name for op in ops] == ["kpu_upload"] + ["kpu_conv2d"] * 3 + ["kpu_download"]
    assert ops[2].kpu.depthwise and ops[3].kpu.pool_name == "left_top_2_s2"
    assert ops[1].arrays["act"].size == 144
    assert k210.mempool(64) == 2 * 1024 * 1024
    assert m.input_tensors()[0].shape == (1, 3, 32, 32)
    iris = parse_v5(V5_IRIS.read_bytes(), "iris")
    assert [mod.type for mod in iris.modules] == ["stackvm"]
    assert iris.modules[0].functions[0].ops is None


def test_kpu_args_roundtrip_and_replace():
    m = parse_v5(V5_TINY1.read_bytes(), "tiny1")
    args = m.modules[1].functions[0].ops[1].kpu
    assert decode_kpu_args(args.encode()) == args and args.encode() == args.raw
    moved = args.replace(image_dst_addr=1234, arg_x=-5)
    again = decode_kpu_args(moved.raw)
    assert again.image_dst_addr == 1234 and again.arg_x == -5
    assert again.in_shape == args.in_shape
    assert set(args.to_dict()) >= {"arg_add", "pool_type", "dma_total_byte"}
    with pytest.raises(ValueError):
        decode_kpu_args(b"\0" * 95)


def test_tolerated_and_refused_truncation():
    data = V3_IRIS.read_bytes()  # the last body's 4 padding bytes are not in the file
    assert parse_v3(data + bytes(4), "iris").layers[1].available == 160
    with pytest.raises(FormatError, match=r"layer 1 \(FULLY_CONNECTED\) bias at 0x1a8"):
        parse_v3(data[:-1], "iris")
    longer = bytearray(data + bytes(4))
    struct.pack_into("<I", longer, 48, 160 + 7)  # last body 7 bytes past EOF: tolerated
    parse_v3(bytes(longer), "iris")
    struct.pack_into("<I", longer, 48, 160 + 8)  # 8 bytes: refused
    with pytest.raises(FormatError, match="declares 168 bytes"):
        parse_v3(bytes(longer), "iris")
    slim = V4_SLIM.read_bytes()
    with pytest.raises(FormatError, match="node 72"):
        parse_v4(slim[:-20], "slim")


def test_hostile_counts_fail_fast():
    data = bytearray(V3_YOLO.read_bytes()[:4096])
    struct.pack_into("<I", data, 12, 0xFFFFFFFF)  # layers_length
    with pytest.raises(FormatError, match="layers_length"):
        parse_v3(bytes(data), "yolo")
    v4 = bytearray(V4_IRIS.read_bytes())
    struct.pack_into("<I", v4, 16, 0x7FFFFFFF)  # constants
    with pytest.raises(FormatError, match="constants"):
        parse_v4(bytes(v4), "iris")


def test_refusals():
    with pytest.raises(FormatError, match="not a kmodel"):
        parse(b"hello world, not a model")
    with pytest.raises(FormatError, match="MaixHub"):
        parse(V3_IRIS.read_bytes(), "iris.smodel")
    with pytest.raises(FormatError, match="word-swapped"):
        parse(swap_words(V4_IRIS.read_bytes()), "iris")
    with pytest.raises(FormatError, match="V1"):
        parse(struct.pack("<5I", 1, 1, 1, 0, 48) + bytes(64))
    with pytest.raises(FormatError, match="not a K210"):
        parse(b"LDMK" + struct.pack("<7I", 6, 32, 0, 0, 0, 0, 0))
    v3 = bytearray(V3_IRIS.read_bytes())
    struct.pack_into("<I", v3, 36, 77)  # layer type
    with pytest.raises(FormatError, match="unknown V3 layer type 77"):
        parse_v3(bytes(v3))
    v4 = bytearray(V4_IRIS.read_bytes())
    struct.pack_into("<I", v4, 368, 0x3000)
    with pytest.raises(FormatError, match="unknown V4 node opcode 0x3000"):
        parse_v4(bytes(v4))


# --- fuzzing: only KflashError may escape ----------------------------------------

SEEDS = [V3_IRIS.read_bytes(), V3_MNIST.read_bytes()[:8192] + bytes(0), V4_IRIS.read_bytes(),
         V4_SLIM.read_bytes()[:12000], V5_TINY1.read_bytes(), V5_IRIS.read_bytes()]  # fmt: skip


def _try(data: bytes) -> None:
    with contextlib.suppress(KflashError):
        parse(data, "fuzz")


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.sampled_from(SEEDS), st.integers(0, 20000))
def test_fuzz_truncation(seed, cut):
    _try(seed[: cut % (len(seed) + 1)])


@FUZZ
@given(st.sampled_from(SEEDS), st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)),
                                        min_size=1, max_size=8))  # fmt: skip
def test_fuzz_byte_flips(seed, flips):
    data = bytearray(seed)
    for pos, val in flips:
        data[pos % len(data)] = val
    _try(bytes(data))


@FUZZ
@given(
    st.sampled_from(SEEDS),
    st.integers(0, 2048),
    st.sampled_from([0, 1, 7, 0xFFFF, 1 << 20, 0x7FFFFFFF, 0xFFFFFFFF]),
)
def test_fuzz_counts(seed, word, value):
    data = bytearray(seed)
    pos = (word * 4) % (len(data) - 3)
    pos -= pos % 4
    struct.pack_into("<I", data, pos, value)
    _try(bytes(data))
