"""The demo is the README's first command: it must run the whole workflow for real."""

import json

import numpy as np

from kflashpy import runtime
from kflashpy.cli import main
from kflashpy.demo import demo_firmware, demo_model
from kflashpy.model.detect import detect


def test_demo_model_is_a_v4_kmodel_computing_its_linear_map():
    data = demo_model()
    assert detect(data).version == 4
    x = np.array([5.1, 3.8, 1.9, 0.4], np.float32)
    (y,) = runtime.load(data).run([x.reshape(1, 1, 1, 4)])
    w = np.frombuffer(data[-(80 + 8 + 48) : -(80 + 8)], np.float32).reshape(4, 3)
    np.testing.assert_allclose(y.reshape(-1), x @ w + np.array([0.2, -0.1, 0.05]), rtol=1e-6)


def test_demo_firmware_is_deterministic_and_firmware_like():
    import zlib

    a, b = demo_firmware(), demo_firmware()
    assert a == b
    assert 0.5 < len(zlib.compress(a, 9)) / len(a) < 0.8


def test_demo_runs_end_to_end_on_the_virtual_board(tmp_path, capsys):
    rc = main(["--json", "demo", "--workdir", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0, doc["error"]
    steps = {s["name"]: s for s in doc["result"]["steps"]}
    assert list(steps) == ["check-layout", "pack", "burn", "reflash", "host-run", "compare"]
    burn, reflash = steps["burn"]["details"], steps["reflash"]["details"]
    assert burn["verification"] == "sha256"
    assert {r["status"] for r in burn["regions"]} == {"written"}
    assert {r["status"] for r in reflash["regions"]} == {"skipped"}
    flash = (tmp_path / "board.img").read_bytes()
    model = demo_model()
    assert flash[0x300000 : 0x300000 + len(model)] == model
    assert steps["compare"]["details"]["passed"] is True
