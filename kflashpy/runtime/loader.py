"""Loading a kmodel for the host runtime: the format is told from the bytes and the
matching interpreter (:mod:`.v3`, :mod:`.v4`, :mod:`.v5`) is imported only then."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import FormatError, InputError, NotImplementedOpError
from .model import Model


def load(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview,
    nncase_release: str | None = None,
) -> Model:
    """Parse a kmodel (a path or its bytes) and prepare it for :meth:`Model.run`.

    Accepts the word-swapped form written for ``kpu.load_flash`` too. For a V5 file,
    ``nncase_release`` ("1.0" ... "1.9") names the nncase release that wrote it
    instead of telling it from the code (see docs/runtime.md). Raises
    :class:`~kflashpy.errors.FormatError` for a file that is not a kmodel (or is
    corrupt) and :class:`~kflashpy.errors.NotImplementedOpError` for a version or op
    the host runtime does not run.
    """
    from ..model import detect, swap_words

    if isinstance(source, (bytes, bytearray, memoryview)):
        data, name = bytes(source), "kmodel"
    else:
        path = Path(source)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise InputError(f"{path}: no such file", "check the model path") from None
        except OSError as e:
            raise InputError(f"{path}: cannot read ({e.strerror})", "check permissions") from None
        name = str(path)
    sig = detect(data)
    if sig is None:
        raise FormatError(
            f"{name}: not a kmodel (unknown header)",
            "expected a V3 (u32 3) or V4/V5 ('LDMK') kmodel",
        )
    if sig.opaque:
        raise NotImplementedOpError(
            f"{name}: encrypted MaixHub model ({sig.opaque}); it cannot be run on the host",
            "use the plain .kmodel the model was exported as",
        )
    if sig.swapped:
        data = swap_words(data)
    if sig.version == 3:
        from ..model.v3 import parse_v3
        from .v3 import V3Model

        return V3Model(parse_v3(data, name))
    if sig.version == 4:
        from ..model.v4 import parse_v4
        from .v4 import V4Model

        return V4Model(parse_v4(data, name))
    if sig.version == 5:
        from ..model.v5 import parse_v5
        from .v5 import V5Model

        return V5Model(parse_v5(data, name), nncase_release)
    raise NotImplementedOpError(
        f"{name}: kmodel V{sig.version} is not supported by the host runtime",
        "the runtime runs V3, V4 and V5 (K210) models",
    )
