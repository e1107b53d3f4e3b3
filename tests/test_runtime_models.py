"""The host runtime on the real and generated fixtures (kmodels V3, V4, V5)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from kflashpy.errors import FormatError, InputError, NotImplementedOpError, UsageError
from kflashpy.runtime import inputs, kpu, load, yolo

FIX = Path(__file__).resolve().parent / "fixtures" / "kmodels"
V5 = FIX / "generated_v5"
IRIS_INPUT = np.array([[5.1, 3.8, 1.9, 0.4]], dtype=np.float32)
#: board result of the nncase iris example (the iris example of nncase, see tests/fixtures/kmodels/README.md)
IRIS_BOARD = np.array([16.077795, 5.607656, -2.071745], dtype=np.float32)


@pytest.mark.parametrize(
    "path",
    [
        "v3/iris_nncase-v0.1.0-rc5.kmodel",
        "v4/iris_nncase-v0.2.0-beta4.kmodel",
        "generated_v5/iris_k210.kmodel",
    ],
)
def test_iris_matches_board_result(path: str) -> None:
    model = load(FIX / path)
    (y,) = model.run([IRIS_INPUT.reshape(model.inputs[0].shape)])
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.reshape(-1), IRIS_BOARD, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", ["tiny1", "tiny2", "tiny3"])
def test_v5_bit_exact_with_nncase_simulator(name: str) -> None:
    model = load(V5 / f"{name}_k210.kmodel")
    x = np.load(V5 / f"{name}_input_u8.npy")
    (y,), steps = model.run_layers([x])
    kpu_out = [s.array for s in steps if s.name == "k210.kpu_download"][-1]
    expect_u8 = np.load(V5 / f"{name}_output_u8_derived.npy")
    np.testing.assert_array_equal(kpu_out.reshape(expect_u8.shape), expect_u8)
    expect = np.load(V5 / f"{name}_output_sim_f32.npy")
    assert y.shape == expect.shape and y.dtype == np.float32
    # dequantize is q*scale + bias in float32: exact, so every bit must match
    np.testing.assert_array_equal(y.view(np.uint32), expect.view(np.uint32))


@pytest.mark.parametrize("name", ["tiny1", "tiny2", "tiny3"])
def test_v5_vectors_do_not_depend_on_tie_rules(name: str) -> None:
    """The fixtures README says these vectors do not decide the tie-breaking rules."""
    model = load(V5 / f"{name}_k210.kmodel")
    x = np.load(V5 / f"{name}_input_u8.npy")
    (a,) = model.run([x])
    (b,) = model.run([x], segment=">=", rounding="sdk")
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["tiny1", "tiny2", "tiny3"])
def test_v5_reused_kpu_ram_is_zero_again_after_each_run(name: str) -> None:
    """V5 models keep their KPU RAM between runs: every byte a run touched is cleared."""
    model = load(V5 / f"{name}_k210.kmodel")
    x = np.load(V5 / f"{name}_input_u8.npy")
    other = 255 - x
    (a,), (b,), (c,) = model.run([x]), model.run([other]), model.run([x])
    assert len(model._rams) == 1 and not model._rams[0].data.any()
    np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(b, load(V5 / f"{name}_k210.kmodel").run([other])[0])
    assert not np.array_equal(a, b)


@pytest.fixture(scope="module")
def yolo_run():
    model = load(FIX / "v3/yolo_20classes_nncase-v0.1.0-rc5.kmodel")
    x = inputs.from_image(FIX / "inputs/dog_320x240.bmp", model.inputs[0].shape)
    return model, x, model.run([x])[0]


def test_yolo_v3_finds_dog_bicycle_car(yolo_run) -> None:
    model, _x, y = yolo_run
    assert model.inputs[0].shape == (1, 3, 240, 320) and model.inputs[0].dtype == np.uint8
    assert y.shape == (1, 125, 7, 10) and y.dtype == np.float32
    boxes = yolo.decode_region(y, yolo.VOC_ANCHORS, threshold=0.5, nms=0.2)
    found = sorted(yolo.VOC_CLASSES[b.cls] for b in boxes)
    assert found == ["bicycle", "car", "dog"]


def test_fast_path_equals_direct_path_on_yolo(yolo_run) -> None:
    """The fused threshold / pool-first path gives the same bytes as steps 1-4 literally."""
    model, x, _y = yolo_run
    fmap = x[0]
    rules = kpu.TieRules()
    for layer in list(model._convs.values())[:6]:
        fast = kpu.run_conv(layer, fmap, rules, fused=True)
        slow = kpu.run_conv(layer, fmap, rules, fused=False)
        np.testing.assert_array_equal(fast, slow)
        fmap = fast


@pytest.mark.parametrize(
    "path", ["v3/mnist_maixpy-scripts.kmodel", "v4/slim-320_nncase-v0.2.0-beta4.kmodel"]
)
def test_other_fixtures_run_with_finite_outputs(path: str) -> None:
    model = load(FIX / path)
    rng = np.random.default_rng(0)
    xs = [rng.integers(0, 256, s.shape).astype(s.dtype) for s in model.inputs]
    outs = model.run(xs)
    assert len(outs) == len(model.outputs)
    for spec, y in zip(model.outputs, outs, strict=True):
        assert y.shape == spec.shape and y.dtype == spec.dtype
        assert np.isfinite(y).all()


def test_mnist_softmax_sums_to_one() -> None:
    model = load(FIX / "v3/mnist_maixpy-scripts.kmodel")
    x = np.zeros(model.inputs[0].shape, np.uint8)
    x[..., 6:22, 13:15] = 255  # a crude "1"
    (y,) = model.run([x])
    assert y.shape == (1, 10)
    assert abs(float(y.sum()) - 1.0) < 1e-5


def test_run_layers_dumps_every_v3_layer() -> None:
    data = (FIX / "v3/yolo_20classes_nncase-v0.1.0-rc5.kmodel").read_bytes()
    model = load(data)
    x = np.zeros(model.inputs[0].shape, np.uint8)
    _outs, layers = model.run_layers([x])
    assert [lay.name for lay in layers][:2] == ["K210_CONV", "K210_CONV"]
    assert layers[0].array.shape == (16, 120, 160) and layers[0].array.dtype == np.uint8
    assert len(layers) == len(model.parsed.layers)


def _v3_with_layer(layer_type: int) -> bytes:
    """A FULLY_CONNECTED 1->1 layer followed by a layer of the given type."""
    fc = struct.pack("<6I", 0, 0, 8, 1, 1, 0) + struct.pack("<2f", 1.0, 0.0)
    other = struct.pack("<4I", 0, 8, 16, 1)
    head = struct.pack("<7I", 3, 1, 0, 2, 0, 32, 1) + struct.pack("<2I", 16, 4)
    head += struct.pack("<2I", 18, len(fc)) + struct.pack("<2I", layer_type, len(other))
    return head + fc + other


def test_unimplemented_layer_fails_loudly_with_its_name() -> None:
    model = load(_v3_with_layer(7))  # KL_MAX_POOL2D: not in the SDK runtime either
    with pytest.raises(NotImplementedOpError, match="MAX_POOL2D"):
        model.run([np.ones((1, 1), np.float32)])


def test_bad_inputs_and_options_are_named() -> None:
    model = load(FIX / "v3/iris_nncase-v0.1.0-rc5.kmodel")
    with pytest.raises(InputError, match="1 input"):
        model.run([])
    with pytest.raises(InputError, match="elements"):
        model.run([np.zeros(5, np.float32)])
    with pytest.raises(UsageError, match="bogus"):
        model.run([IRIS_INPUT], bogus=1)
    with pytest.raises(InputError, match="segment"):
        model.run([IRIS_INPUT], segment="<")
    with pytest.raises(FormatError, match="not a kmodel"):
        load(b"\x00" * 64)


def _mr(mem: int, dtype: int, start: int, size: int) -> bytes:
    return struct.pack("<4I", mem, dtype, start, size)


def _v4(nodes: list[tuple[int, bytes]], n_in: int, out: bytes, main: int) -> bytes:
    """A V4 kmodel: one main-memory float32 input of n_in elements at 0, one output."""
    head = struct.pack("<10I", 0x4B4D444C, 4, 0, 1, 0, main, len(nodes), 1, 1, 0)
    head += _mr(1, 0, 0, 4 * n_in) + struct.pack("<4i", 1, 1, 1, n_in) + out
    bodies = [body + bytes(-len(body) % 8) for _op, body in nodes]
    head += b"".join(
        struct.pack("<2I", op, len(b)) for (op, _), b in zip(nodes, bodies, strict=True)
    )
    return head + b"".join(bodies)


def test_v4_quantize_pairs_quirk_and_board_dequantize() -> None:
    q = _mr(1, 0, 0, 20) + _mr(1, 1, 32, 5) + struct.pack("<if", 0, 1.0)
    dq = _mr(1, 1, 32, 5) + _mr(1, 0, 40, 20) + struct.pack("<if", 1, 2.0)
    model = load(_v4([(0x06, q), (0x03, dq)], 5, _mr(1, 0, 40, 20), 64))
    x = np.array([[[[0.5, 1.5, 2.5, 3.5, 2.5]]]], np.float32)
    (y,), steps = model.run_layers([x])
    # pairs round half to even (fcvt rne); the odd last element uses roundf (half away)
    assert list(steps[0].array.reshape(-1)) == [0, 2, 2, 4, 3]
    np.testing.assert_array_equal(y.reshape(-1), (np.array([0, 2, 2, 4, 3]) - 1) * 0.5)


def test_v4_nnil_unary_method_vm() -> None:
    code = bytes([0x03, 0x06]) + struct.pack("<f", 2.0) + bytes([0x42, 0x05, 0x41, 0x04, 0x06])
    code += struct.pack("<f", 3.0) + bytes([0x80, 0xA0])  # clamp(x*2 - 1, 0, 3)
    body = _mr(1, 0, 0, 16) + _mr(1, 0, 16, 16) + code
    model = load(_v4([(0x14, body)], 4, _mr(1, 0, 16, 16), 32))
    (y,) = model.run([np.array([[[[-1.0, 0.75, 1.5, 9.0]]]], np.float32)])
    np.testing.assert_array_equal(y.reshape(-1), [0.0, 0.5, 2.0, 3.0])


def test_load_flash_word_swapped_model_runs() -> None:
    from kflashpy.model import swap_words

    data = (FIX / "v3/iris_nncase-v0.1.0-rc5.kmodel").read_bytes()
    data += bytes(-len(data) % 4)
    (y,) = load(swap_words(data)).run([IRIS_INPUT])
    np.testing.assert_allclose(y.reshape(-1), IRIS_BOARD, rtol=2e-6, atol=2e-6)


def test_runs_cap_blas_threads_and_restore_them(yolo_run, monkeypatch) -> None:
    """Multi-threaded BLAS spins on busy cores: big models run with one BLAS thread,
    and the caller's setting is back afterwards."""
    from threadpoolctl import ThreadpoolController

    blas = ThreadpoolController().select(user_api="blas")
    if not blas.lib_controllers:
        pytest.skip("NumPy reports no BLAS library")
    seen = []
    real = kpu._matmul

    def spy(layer, cols):
        seen.append(blas.info()[0]["num_threads"])
        return real(layer, cols)

    monkeypatch.setattr(kpu, "_matmul", spy)
    model, x, y = yolo_run
    with blas.limit(limits=2):
        before = blas.info()[0]["num_threads"]
        (again,) = model.run([x])
        assert blas.info()[0]["num_threads"] == before
    assert seen and set(seen) == {1}
    np.testing.assert_array_equal(again, y)
