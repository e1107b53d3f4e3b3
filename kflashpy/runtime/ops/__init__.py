"""CPU kernels shared by the V3, V4 and V5 interpreters (NumPy, vectorised).

Each kernel follows the runtime that executes it on the board or in the simulator
(docs/runtime.md, docs/kmodel.md). Where that runtime has a quirk, the kernel reproduces
it and its docstring names it ("board quirk: ...").
"""
