"""What a binary is, judged from its bytes: ``image-info`` and the layout checker use it.

Kinds (``ContentInfo.kind``):

* ``boot-image``: a wrapped firmware (flag, length, payload, SHA-256); ``boot`` holds
  the parsed header, ``inner`` what the payload is when it is not encrypted.
* ``kmodel``: a kmodel, plain (for ``kpu.load``) or word-swapped (for
  ``kpu.load_flash``); ``kmodel`` holds the signature from :mod:`kflashpy.model.detect`.
* ``firmware``: raw K210 code (a ``.bin`` before wrapping); recognised by the jump and
  ``0xDEADBEEF`` marker the Kendryte SDK start-up code places in the first bytes.
* ``kfpkg`` / ``zip``: a package (a zip with ``flash-list.json``) or another zip.
* ``elf``: an ELF executable (the ROM needs the ``.bin``, not the ELF).
* ``erased``: only 0xFF bytes (what erased NOR flash reads as); ``empty``: no bytes.
* ``lfs-pointer`` / ``html``: what a failed download leaves in place of the file: a Git
  LFS pointer (a clone without ``git lfs``) or an HTML page (an error page or a GitHub
  "blob" page saved instead of the raw file).
* ``data``: anything else (file systems, fonts, configuration...).
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass
from typing import Any

from ..model.detect import KmodelSignature, detect
from ..target.k210 import FLASH_SECTOR as SECTOR
from .bootimage import OVERHEAD, BootImage, aes_padded_size, probe_boot_image

__all__ = ["SECTOR", "ContentInfo", "align_down", "align_up", "detect_content", "footprint"]

#: first-bytes markers of SDK start-up code: compressed jump (A821) and 0xDEADBEEF halves
_FIRMWARE_MARKERS = (b"\x21\xa8", b"\xef\xbe", b"\xad\xde")
#: the first line of every Git LFS pointer file (git-lfs spec v1)
_LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
_HTML_STARTS = (b"<!doctype html", b"<html", b"<head")


def align_down(n: int, a: int = SECTOR) -> int:
    return n - n % a


def align_up(n: int, a: int = SECTOR) -> int:
    return -(-n // a) * a


def footprint(address: int, size: int) -> tuple[int, int]:
    """The erase sectors ``[start, end)`` that writing ``size`` bytes at ``address`` touches."""
    if size <= 0:
        return address, address
    return align_down(address), align_up(address + size)


@dataclass(frozen=True)
class ContentInfo:
    """What a binary is. ``size`` is the file size in bytes."""

    kind: str
    label: str
    size: int
    boot: BootImage | None = None
    kmodel: KmodelSignature | None = None
    #: for a boot image with a readable payload: what the payload is
    inner: ContentInfo | None = None

    @property
    def is_firmware(self) -> bool:
        """Raw firmware, or a boot image (both are meant for a boot address)."""
        return self.kind in ("firmware", "boot-image")

    def flash_size(self, prefix: bool, aes: bool = False) -> int:
        """Bytes written to flash when burned with or without the boot-image wrapper."""
        if not prefix:
            return self.size
        return (aes_padded_size(self.size) if aes else self.size) + OVERHEAD

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "label": self.label, "size": self.size}
        if self.boot is not None:
            d["boot_image"] = {
                "flag": self.boot.flag,
                "aes": self.boot.aes,
                "dio": self.boot.dio,
                "payload_size": len(self.boot.payload),
                "sha_valid": self.boot.sha_valid,
                "trailing": self.boot.trailing,
            }
        if self.kmodel is not None:
            d["kmodel"] = {
                "version": self.kmodel.version,
                "swapped": self.kmodel.swapped,
                "opaque": self.kmodel.opaque,
            }
        if self.inner is not None:
            d["payload"] = self.inner.to_dict()
        return d


def _zip_kind(data: bytes) -> tuple[str, str]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return "data", "data (damaged zip)"
    if "flash-list.json" in names:
        n = len(names) - 1
        return "kfpkg", f"kfpkg package ({n} file{'' if n == 1 else 's'} besides flash-list.json)"
    return "zip", f"zip archive ({len(names)} members, no flash-list.json at its root)"


def _boot_label(boot: BootImage, inner: ContentInfo | None) -> str:
    parts = ["SHA-256 valid" if boot.sha_valid else "SHA-256 INVALID"]
    parts.append("AES-encrypted" if boot.aes else "not encrypted")
    parts.append("DIO" if boot.dio else "QIO/legacy flag")
    text = f"boot image ({', '.join(parts)})"
    if inner is not None:
        text += f" holding {inner.label}"
    if boot.trailing:
        text += f", {boot.trailing} bytes after it"
    return text


def detect_content(data: bytes, name: str | None = None) -> ContentInfo:
    """Say what ``data`` is. Never raises on arbitrary bytes.

    ``name`` is only used to recognise MaixHub ``.smodel``/``.emodel`` files, whose
    encrypted content has no public signature.
    """
    n = len(data)
    if n == 0:
        return ContentInfo("empty", "empty file", 0)
    if data.count(0xFF) == n:
        return ContentInfo("erased", "erased flash (all bytes 0xFF)", n)
    if data.startswith(_LFS_POINTER):
        return ContentInfo("lfs-pointer", "Git LFS pointer (a text stub, not the file)", n)
    if data[:512].lstrip().lower().startswith(_HTML_STARTS):
        return ContentInfo("html", "HTML page (a web page, not a binary)", n)
    if data[:4] == b"PK\x03\x04":
        kind, label = _zip_kind(data)
        return ContentInfo(kind, label, n)
    if data[:4] == b"\x7fELF":
        return ContentInfo("elf", "ELF executable (burn the .bin made from it)", n)
    sig = detect(data[:64], name)
    if sig is not None:
        return ContentInfo("kmodel", sig.label, n, kmodel=sig)
    boot = probe_boot_image(data)
    if boot is not None and (boot.sha_valid or boot.trailing == 0):
        inner = None if boot.aes else detect_content(boot.payload)
        return ContentInfo("boot-image", _boot_label(boot, inner), n, boot=boot, inner=inner)
    if any(m in data[:6] for m in _FIRMWARE_MARKERS):
        return ContentInfo("firmware", "K210 firmware (raw .bin)", n)
    return ContentInfo("data", "data", n)
