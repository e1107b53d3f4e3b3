"""Host reference runtime latency, and a comparison with the nncase 1.9 K210 simulator.

Usage::

    python benchmarks/bench_runtime.py [--repeat 20] [--no-nncase] [--threads N]

Part 1 times ``Model.run`` on the 20-class YOLO V3 fixture (3x240x320, target: under
20 ms of CPU per frame on a 2-core machine) and the slim-320 V4 fixture: median and best
wall-clock milliseconds, and median CPU milliseconds of this process (robust against
other load on a shared machine).

Part 2 compares with the official nncase 1.9 simulator on the same V5 models. nncase
1.x wheels exist only up to CPython 3.10, so the script creates a CPython 3.10 virtual
environment (in ~/.cache/kflashpy/bench-nncase19, reused afterwards) with ``uv`` or a
``python3.10`` found on PATH / through pyenv, installs ``nncase==1.9.0.20230322`` and
``numpy<2`` with pip, and times ``nncase.Simulator.run`` there. When no CPython 3.10
can be found or the install fails, it says so and skips part 2.

``--threads N`` sets the BLAS thread variables before NumPy loads. Without it BLAS keeps
its default, but runs of models with a big KPU layer still use one BLAS thread: the
runtime caps it around each run (``kflashpy.runtime.model.single_thread_blas``).

Prints plain tables; nothing is asserted (performance targets are not tests).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIX = HERE.parent / "tests" / "fixtures" / "kmodels"
NNCASE = "nncase==1.9.0.20230322"
#: only used inside the venv, to author the YOLO-sized V5 benchmark model
ONNX = "onnx==1.14.1"
VENV = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kflashpy" / "bench-nncase19"
)
V5_MODELS = ["tiny1", "tiny2", "tiny3", "iris"]
BIG = VENV / "yolo_like_k210.kmodel"

#: runs inside the venv: two small float models whose CPU ops land in the stackvm module
#: (matmul, binary, unary, softmax, reduce_window2d, resize, reduce), to check those ops
#: against the simulator; writes NAME.kmodel and NAME.in.npy into argv[1]
OPS_SCRIPT = r"""
import sys
import numpy as np, onnx, nncase
from onnx import helper, TensorProto, numpy_helper
rng = np.random.default_rng(0)
def build(nodes, inits, in_shape, out_shape):
    g = helper.make_graph(nodes, "ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    m.ir_version = 7
    return onnx.shape_inference.infer_shapes(m), in_shape
const = lambda name, a: numpy_helper.from_array(np.asarray(a, np.float32), name)
cases = {
    "ops-mlp": build([
        helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "B"], ["a"]),
        helper.make_node("Mul", ["a", "C"], ["b"]), helper.make_node("Sigmoid", ["b"], ["s"]),
        helper.make_node("Sub", ["s", "b"], ["d"]), helper.make_node("Softmax", ["d"], ["y"], axis=1),
    ], [const("W", rng.standard_normal((16, 8))), const("B", rng.standard_normal(8)),
        const("C", rng.standard_normal((1, 8)))], [1, 16], [1, 8]),
    "ops-spatial": build([
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["x"], ["q"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Add", ["p", "q"], ["r"]),
        helper.make_node("Resize", ["r", "", "sc"], ["u"], mode="nearest"),
        helper.make_node("Transpose", ["u"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Abs", ["t"], ["ab"]), helper.make_node("Exp", ["ab"], ["e"]),
        helper.make_node("ReduceMean", ["e"], ["y"], axes=[3], keepdims=1),
    ], [const("sc", [1, 1, 2, 2])], [1, 4, 8, 8], [1, 8, 8, 1]),
}
for name, (model, shape) in cases.items():
    co = nncase.CompileOptions()
    co.target = "k210"
    c = nncase.Compiler(co)
    c.import_onnx(model.SerializeToString(), nncase.ImportOptions())
    c.compile()
    open(f"{sys.argv[1]}/{name}.kmodel", "wb").write(c.gencode_tobytes())
    np.save(f"{sys.argv[1]}/{name}.in.npy", rng.standard_normal(shape).astype(np.float32))
"""

#: runs inside the venv: a YOLO-sized random-weight CNN (3x240x320 -> 125x7x10; depthwise
#: and 1x1 KPU convs, max pools) compiled for the K210 with nncase 1.9 (uint8, PTQ)
GEN_SCRIPT = r"""
import sys
import numpy as np, onnx, nncase
from onnx import helper, TensorProto, numpy_helper
rng = np.random.default_rng(0)
H, W = 240, 320
nodes, inits = [], []
def conv(x, cin, cout, k, name, relu=True, group=1):
    w = (rng.standard_normal((cout, cin // group, k, k)) * (2.0 / (cin // group * k * k)) ** 0.5)
    b = rng.standard_normal(cout) * 0.1
    inits.append(numpy_helper.from_array(w.astype(np.float32), name + "_w"))
    inits.append(numpy_helper.from_array(b.astype(np.float32), name + "_b"))
    nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [name + "_y"],
                                  kernel_shape=[k, k], pads=[k // 2] * 4, group=group))
    if not relu:
        return name + "_y"
    nodes.append(helper.make_node("Relu", [name + "_y"], [name + "_r"]))
    return name + "_r"
def pool(x, name):
    nodes.append(helper.make_node("MaxPool", [x], [name], kernel_shape=[2, 2], strides=[2, 2]))
    return name
x = pool(conv("input", 3, 16, 3, "c1"), "p1")
for i, (cin, cout) in enumerate([(16, 32), (32, 64), (64, 128), (128, 256)]):
    x = pool(conv(conv(x, cin, cin, 3, f"dw{i}", group=cin), cin, cout, 1, f"pw{i}"), f"pool{i}")
x = conv(conv(x, 256, 256, 3, "d5", group=256), 256, 512, 1, "c5")
x = conv(x, 512, 125, 1, "head", relu=False)
graph = helper.make_graph(
    nodes, "bench", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, H, W])],
    [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 125, H // 32, W // 32])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
model.ir_version = 7
model = onnx.shape_inference.infer_shapes(model)
co = nncase.CompileOptions()
co.target = "k210"; co.quant_type = "uint8"; co.w_quant_type = "uint8"
co.preprocess = True; co.input_type = "uint8"; co.input_range = [0, 1]
co.input_shape = [1, 3, H, W]; co.input_layout = "NCHW"; co.model_layout = "NCHW"
co.mean = [0, 0, 0]; co.std = [1, 1, 1]; co.swapRB = False; co.letterbox_value = 0.0
compiler = nncase.Compiler(co)
compiler.import_onnx(model.SerializeToString(), nncase.ImportOptions())
ptq = nncase.PTQTensorOptions()
ptq.samples_count = 2
ptq.set_tensor_data(rng.random((2, 3, H, W)).astype(np.float32).tobytes())
compiler.use_ptq(ptq)
compiler.compile()
open(sys.argv[1], "wb").write(compiler.gencode_tobytes())
"""

#: runs inside the CPython 3.10 venv: times nncase.Simulator on each model, prints JSON
SIM_SCRIPT = r"""
import json, sys, time
import numpy as np
import nncase
repeat, out_dir = int(sys.argv[1]), sys.argv[2]
out = {}
for pair in sys.argv[3:]:
    name, path, inp = pair.split("|")
    x = np.load(inp)
    sim = nncase.Simulator()
    sim.load_model(open(path, "rb").read())
    times = []
    for _ in range(repeat + 1):
        sim.set_input_tensor(0, nncase.RuntimeTensor.from_numpy(x))
        t = time.perf_counter()
        sim.run()
        times.append(time.perf_counter() - t)
    np.save(f"{out_dir}/{name}.sim.npy", sim.get_output_tensor(0).to_numpy())
    out[name] = [t * 1e3 for t in times[1:]]
print(json.dumps(out))
"""


def _time(fn, repeat: int) -> dict[str, float]:
    fn()  # warm-up (thresholds, caches)
    wall, cpu = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - w) * 1e3)
        cpu.append((time.process_time() - c) * 1e3)
    return {"median": statistics.median(wall), "best": min(wall), "cpu": statistics.median(cpu)}


def bench_host(repeat: int) -> None:
    from kflashpy import runtime
    from kflashpy.runtime import inputs

    rows = []
    for label, path in [
        ("YOLO V3 20-class 3x240x320", "v3/yolo_20classes_nncase-v0.1.0-rc5.kmodel"),
        ("slim-320 V4 3x240x320", "v4/slim-320_nncase-v0.2.0-beta4.kmodel"),
    ]:
        model = runtime.load(FIX / path)
        x = inputs.from_image(FIX / "inputs/dog_320x240.bmp", model.inputs[0].shape)
        t = _time(lambda m=model, x=x: m.run([x]), repeat)
        rows.append((label, t))
    print(f"host runtime, {repeat} runs each (ms per frame; cpu = this process's CPU time)")
    print(f"{'model':32} {'median':>8} {'best':>8} {'cpu':>8}")
    for label, t in rows:
        print(f"{label:32} {t['median']:8.1f} {t['best']:8.1f} {t['cpu']:8.1f}")
    print("target: YOLO V3 under 20 ms of CPU per frame on this 2-core machine")


def find_python310() -> str | None:
    """A CPython 3.10 interpreter: uv, python3.10 on PATH, or a pyenv install."""
    uv = shutil.which("uv")
    if uv:
        r = subprocess.run([uv, "python", "find", "3.10"], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip()
    exe = shutil.which("python3.10")
    if exe and subprocess.run([exe, "-c", "import venv"], capture_output=True).returncode == 0:
        return exe
    pyenv = shutil.which("pyenv")
    if pyenv:
        r = subprocess.run([pyenv, "prefix", "3.10"], capture_output=True, text=True)
        cand = Path(r.stdout.strip() or "/nonexistent") / "bin" / "python3.10"
        if r.returncode == 0 and cand.exists():
            return str(cand)
    return None


def ensure_venv() -> Path | None:
    py = VENV / "bin" / "python"
    if (
        py.exists()
        and subprocess.run([py, "-c", "import nncase, onnx"], capture_output=True).returncode == 0
    ):
        return py
    base = find_python310()
    if base is None:
        print("nncase comparison skipped: no CPython 3.10 found (uv, python3.10 or pyenv);")
        print(f"  nncase 1.x wheels exist only up to CPython 3.10 ({NNCASE})")
        return None
    print(f"creating {VENV} with {base} and installing {NNCASE} ...", flush=True)
    VENV.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        [base, "-m", "venv", str(VENV)],
        [py, "-m", "pip", "install", "-q", NNCASE, "numpy<2", ONNX],
    ]
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"nncase comparison skipped: {' '.join(map(str, cmd))} failed:")
            print("  " + (r.stderr.strip().splitlines() or ["(no output)"])[-1])
            return None
    return py


def _v5_cases(py: Path) -> list[tuple[str, Path, Path]]:
    """(name, kmodel, input .npy): the fixtures, float-op models and the YOLO-sized one."""
    import numpy as np

    work = VENV / "work"
    work.mkdir(parents=True, exist_ok=True)
    cases = []
    for name in V5_MODELS:
        inp = work / f"{name}.in.npy"
        if name == "iris":
            np.save(inp, np.array([[5.1, 3.8, 1.9, 0.4]], np.float32))
            cases.append((name, FIX / "generated_v5" / "iris_k210.kmodel", inp))
        else:
            np.save(inp, np.load(FIX / "generated_v5" / f"{name}_input_u8.npy"))
            cases.append((name, FIX / "generated_v5" / f"{name}_k210.kmodel", inp))
    if not BIG.exists():
        r = subprocess.run([py, "-c", GEN_SCRIPT, str(BIG)], capture_output=True, text=True)
        if r.returncode != 0 or not BIG.exists():
            print(
                "could not compile the YOLO-sized V5 model with nncase: "
                + (r.stderr.strip().splitlines() or ["?"])[-1]
            )
            return cases
    ops = [work / f"{n}.kmodel" for n in ("ops-mlp", "ops-spatial")]
    if not all(p.exists() for p in ops):
        subprocess.run([py, "-c", OPS_SCRIPT, str(work)], capture_output=True, text=True)
    cases += [(p.stem, p, p.with_suffix(".in.npy")) for p in ops if p.exists()]
    inp = work / "yolo_like.in.npy"
    np.save(inp, np.random.default_rng(1).integers(0, 256, (1, 3, 240, 320)).astype(np.uint8))
    cases.append(("yolo-like 3x240x320", BIG, inp))
    return cases


def bench_vs_nncase(repeat: int) -> None:
    import numpy as np

    from kflashpy import runtime

    py = ensure_venv()
    if py is None:
        return
    cases = _v5_cases(py)
    work = VENV / "work"
    pairs = [f"{i}|{path}|{inp}" for i, (_n, path, inp) in enumerate(cases)]
    r = subprocess.run(
        [py, "-c", SIM_SCRIPT, str(repeat), str(work), *pairs], capture_output=True, text=True
    )
    if r.returncode != 0:
        print("nncase simulator run failed: " + (r.stderr.strip().splitlines() or ["?"])[-1])
        return
    sim = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"\nV5 models: kflashpy runtime vs nncase 1.9 simulator ({repeat} runs, median wall ms)")
    print(f"{'model':22} {'kflashpy':>10} {'nncase':>10} {'ratio':>8} {'output':>10}")
    for i, (name, path, inp) in enumerate(cases):
        x = np.load(inp)
        model = runtime.load(path)
        ours = _time(lambda m=model, x=x: m.run([x]), repeat)["median"]
        theirs = statistics.median(sim[str(i)])
        (y,) = model.run([x])
        ref = np.load(work / f"{i}.sim.npy")
        if y.shape == ref.shape and np.array_equal(y.view(np.uint32), ref.view(np.uint32)):
            same = "bit-exact"
        else:
            same = f"diff {float(np.abs(y - ref.reshape(y.shape)).max()):.0e}"
        print(f"{name:22} {ours:10.2f} {theirs:10.2f} {theirs / ours:7.2f}x {same:>10}")
    print("ratio > 1: kflashpy is faster")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--no-nncase", action="store_true", help="skip the nncase 1.9 comparison")
    ap.add_argument("--threads", type=int, help="BLAS threads (set before NumPy loads)")
    args = ap.parse_args()
    if args.threads:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)
    if not FIX.is_dir():
        sys.exit(f"fixtures not found at {FIX}")
    bench_host(args.repeat)
    if not args.no_nncase:
        bench_vs_nncase(args.repeat)


if __name__ == "__main__":
    main()
