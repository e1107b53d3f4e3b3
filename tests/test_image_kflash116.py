"""kflashpy against kflash.py 1.1.6's own code (run from the installed ``kflash`` module).

* Boot images, plain and AES-encrypted, must be byte-identical to what kflash.py writes.
* kfpkgs written by kflashpy must load in kflash.py's regex-based loader, and both tools
  must put the same bytes at the same addresses.
* Real manifests from public packages must read the same in both tools.
"""

from __future__ import annotations

import io
import zipfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.kflash116 import kflash_firmware_image, kflash_load_kfpkg

from kflashpy.image.bootimage import wrap_boot_image
from kflashpy.image.kfpkg import KfpkgEntry, read_kfpkg, write_kfpkg
from kflashpy.image.plan import items_from_kfpkg, plan_flash

FIRMWARE = b"\x21\xa8\xef\xbe\xad\xde" + bytes(range(256)) * 7


@pytest.mark.parametrize("size", [1, 15, 16, 17, 4096, 10_001])
@pytest.mark.parametrize("io_mode", ["dio", "qio"])
def test_plain_boot_image_identical(size, io_mode):
    fw = (FIRMWARE * (size // len(FIRMWARE) + 1))[:size]
    assert wrap_boot_image(fw, dio=io_mode == "dio") == kflash_firmware_image(fw, None, io_mode)


@settings(max_examples=15, deadline=None)
@given(fw=st.binary(min_size=1, max_size=300), key=st.binary(min_size=16, max_size=16))
def test_aes_boot_image_identical(fw, key):
    # kflash.py's AES is pure Python: keep the payloads small
    assert wrap_boot_image(fw, key=key) == kflash_firmware_image(fw, key, "dio")
    assert wrap_boot_image(fw, key=key, dio=False) == kflash_firmware_image(fw, key, "qio")


def _flash_map(writes):
    return {addr: data for addr, data in writes}


def test_kflashpy_package_loads_in_kflash(tmp_path):
    model = bytes([3, 0, 0, 0]) + bytes(range(200))
    out = write_kfpkg(
        tmp_path / "app.kfpkg",
        [
            KfpkgEntry(0, "maixpy.bin", True, FIRMWARE),
            KfpkgEntry(0x300000, "model.kmodel", False, model),
            KfpkgEntry(0xA00000, "font.bin", False, b"\x55" * 5000),
        ],
    )
    theirs = kflash_load_kfpkg(str(out))
    plan = plan_flash(items_from_kfpkg(read_kfpkg(out)))
    ours = [(r.address, r.write) for r in plan.writes]
    assert theirs == ours
    assert theirs[0] == (0, wrap_boot_image(FIRMWARE))


def _zip(manifest: str, files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("flash-list.json", manifest)
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


# Manifests of real packages, verbatim, with small synthetic payloads in place of the
# binaries (which are not redistributable here). Sources:
REAL_MANIFESTS = {
    # kendryte/kendryte-standalone-demo face_detect_kmodel_flash/kfpkg/flash-list.json
    # (commit b956d9e): hex-literal address, invalid JSON
    "kendryte-face_detect_kmodel_flash": (
        '{\n  "version": "0.1.0",\n  "files": [\n    {\n      "address": 0,\n'
        '      "bin": "face_detect_kmodel_flash.bin",\n      "sha256Prefix": true\n    },\n'
        '    {\n      "address": 0x00A00000,\n      "bin": "aug.kmodel",\n'
        '      "sha256Prefix": false\n    }\n  ]\n}',
        {0: "face_detect_kmodel_flash.bin", 0xA00000: "aug.kmodel"},
    ),
    # kendryte/kendryte-standalone-demo kpu/kfpkg/flash-list.json (commit 30ec3b5)
    "kendryte-kpu": (
        '{\n  "version": "0.1.0",\n  "files": [\n    {\n      "address": 0,\n'
        '      "bin": "kpu.bin",\n      "sha256Prefix": true\n    },\n    {\n'
        '      "address": 0x00C00000,\n      "bin": "yolo.kmodel",\n'
        '      "sha256Prefix": false\n    }\n  ]\n}',
        {0: "kpu.bin", 0xC00000: "yolo.kmodel"},
    ),
    # paoloviviani/maixduino-basic-vision flash-list.json (commit 7f681c0): MaixPy
    # minimum firmware + face model at 0x300000
    "maixduino-basic-vision": (
        '{\n    "version": "0.1.0",\n    "files": [\n      {\n        "address": 0,\n'
        '        "bin": "maixpy_v0.6.2_41_g02d12688e_minimum_with_ide_support.bin",\n'
        '        "sha256Prefix": true\n      },\n      {\n        "address": 0x300000,\n'
        '        "bin": "facedetect.kmodel",\n        "sha256Prefix": false\n      }\n'
        "    ]\n  }",
        {
            0: "maixpy_v0.6.2_41_g02d12688e_minimum_with_ide_support.bin",
            0x300000: "facedetect.kmodel",
        },
    ),
    # penguinencounter/HuskyMod flash-list.json (commit 92f0347): a name in a folder
    "huskymod": (
        '{\n    "version": "0.1.0",\n    "files": [{\n            "address": 0,\n'
        '            "bin": "build/HuskyMod.bin",\n            "sha256Prefix": true\n'
        "        }\n    ]\n}",
        {0: "build/HuskyMod.bin"},
    ),
    # loboris/Kboot build/BUILD.sh (commit d3df2c1) writes this manifest: version 0.1.1,
    # two boot images and one file listed twice
    "kboot": (
        '{\n    "version": "0.1.1",\n    "files": [\n        {\n            "address": 0,\n'
        '            "bin": "bootloader_lo.bin",\n            "sha256Prefix": true\n        },\n'
        '        {\n            "address": 4096,\n            "bin": "bootloader_hi.bin",\n'
        '            "sha256Prefix": true\n        },\n        {\n            "address": 16384,\n'
        '            "bin": "config.bin",\n            "sha256Prefix": false\n        },\n'
        '        {\n            "address": 20480,\n            "bin": "config.bin",\n'
        '            "sha256Prefix": false\n        }\n    ]\n}',
        {
            0: "bootloader_lo.bin",
            4096: "bootloader_hi.bin",
            16384: "config.bin",
            20480: "config.bin",
        },
    ),
    # sipeed/MaixPy-v1_scripts machine_vision/models/face_model_at_0x300000.kfpkg, as
    # unzipped (docs/formats.md): decimal address
    "maixpy-face_model_at_0x300000": (
        '{\n    "version": "0.1.0",\n    "files": [\n        {\n            "address": 3145728,\n'
        '            "bin": "facedetect.kmodel",\n            "sha256Prefix": false\n        }\n'
        "    ]\n}",
        {0x300000: "facedetect.kmodel"},
    ),
}


@pytest.mark.parametrize("name", sorted(REAL_MANIFESTS))
def test_real_manifests_read_like_kflash(tmp_path, name):
    manifest, layout = REAL_MANIFESTS[name]
    payloads = {n: FIRMWARE[: 100 + i * 7] for i, n in enumerate(sorted(set(layout.values())))}
    path = tmp_path / f"{name}.kfpkg"
    path.write_bytes(_zip(manifest, payloads))
    pkg = read_kfpkg(path)
    assert [(e.address, e.name) for e in pkg.entries] == list(layout.items())
    assert pkg.version in ("0.1.0", "0.1.1")
    plan = plan_flash(items_from_kfpkg(pkg))
    assert kflash_load_kfpkg(str(path)) == [(r.address, r.write) for r in plan.writes]
