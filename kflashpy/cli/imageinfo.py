"""``image-info``, ``wrap``, ``unwrap``: look inside binaries and make boot images."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import InputError
from ..keys import DEFAULT_KEY_ENV, load_key
from ..units import fmt_addr, fmt_size
from .session import Session

if TYPE_CHECKING:  # the library is imported by the commands, not at start-up
    from ..image.content import ContentInfo


def key_options(f):
    """--key-file / --key-env / --key-hex (the key itself is never printed)."""
    f = click.option(
        "--key-hex",
        metavar="HEX",
        help="Key as 32 hex digits (visible in `ps`; prefer the others).",
    )(f)
    f = click.option(
        "--key-env",
        metavar="VAR",
        help=f"Read the key (32 hex digits) from environment variable VAR, e.g. {DEFAULT_KEY_ENV}.",
    )(f)
    f = click.option(
        "--key-file",
        type=click.Path(dir_okay=False),
        help="Read the 16-byte AES key from a file (raw bytes or 32 hex digits).",
    )(f)
    return f


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}", "check the path") from None


def _describe(info: ContentInfo) -> list[tuple[str, str]]:
    from ..image.bootimage import OVERHEAD
    from ..image.content import SECTOR, align_up

    rows = [("kind", info.kind), ("what", info.label), ("size", fmt_size(info.size))]
    if info.boot is not None:
        b = info.boot
        rows += [
            (
                "flag",
                f"0x{b.flag:02X} (AES {'on' if b.aes else 'off'}, DIO {'on' if b.dio else 'off'})",
            ),
            ("payload", fmt_size(len(b.payload))),
            ("sha-256", "valid" if b.sha_valid else "INVALID (the ROM would refuse to boot it)"),
        ]
        written = b.size
    elif info.kind == "firmware":
        written = info.flash_size(prefix=True)
        rows.append(("when burned", f"wrapped: {fmt_size(written)} (+{OVERHEAD} B header and SHA)"))
    else:
        written = info.size
    if info.kmodel is not None:
        k = info.kmodel
        use = "kpu.load_flash" if k.swapped else "kpu.load"
        if k.opaque:
            use = "kpu.load(path) on the keyed board only"
        elif k.version > 5:
            use = f"nothing on a K210 (V{k.version} is a later nncase format)"
        rows.append(("loads with", use))
    rows.append(("flash footprint", f"{fmt_size(align_up(written, SECTOR))} (whole 4 KiB sectors)"))
    return rows


@click.command("image-info")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.pass_obj
def image_info_cmd(s: Session, files: tuple[str, ...]) -> None:
    """Say what each FILE is: raw firmware, boot image, kmodel, kfpkg, erased flash...

    Boot images are checked (SHA-256, AES and DIO bits); kmodels are named by version
    and form (plain for kpu.load, word-swapped for kpu.load_flash). The footprint is
    what the file occupies in flash once burned, in whole 4 KiB erase sectors.
    """
    from ..image.api import check_layout, image_info
    from ..image.content import SECTOR, align_up
    from ..image.plan import plan_footprint

    results = []
    for n, path in enumerate(files):
        info = image_info(path)
        d = info.to_dict()
        d["file"] = path
        rows = _describe(info)
        if info.kind == "kfpkg":
            plan = check_layout([path], board=s.board)
            d["members"] = [r.to_dict() for r in plan.writes]
            d["footprint"] = plan_footprint(plan)
            rows[-1] = ("flash footprint", f"{fmt_size(d['footprint'])} (its files, whole sectors)")
        else:
            d["footprint"] = align_up(
                info.boot.size if info.boot else info.flash_size(info.kind == "firmware"), SECTOR
            )
        if info.kmodel is not None and not info.kmodel.opaque:
            d["firmwares"] = _loading_firmwares(_read(path), path)
            rows.insert(-1, ("loaded by", ", ".join(d["firmwares"]) or "no known firmware"))
        results.append(d)
        if n:
            s.out()
        s.out(s.style(path, bold=True))
        for key, value in rows:  # long values wrap under themselves, within 80 columns
            s.out(
                textwrap.fill(
                    f"  {key + ':':17}{value}",
                    80,
                    subsequent_indent=" " * 19,
                    break_on_hyphens=False,
                )
            )
        if info.kind == "kfpkg":
            s.table(
                ["  address", "size", "file", "written as"],
                [
                    [f"  {fmt_addr(r.address)}", fmt_size(r.size), Path(r.item.name).name,
                     "boot image" if r.prefix else "raw"]
                    for r in plan.writes
                ],
            )  # fmt: skip
    s.result = {"files": results}


def _loading_firmwares(data: bytes, name: str) -> list[str]:
    """The firmwares `model info` says load this model (one verdict for both commands)."""
    from ..model.info import model_info

    try:
        verdicts = model_info(data, name)["firmwares"]
    except InputError:
        return []  # a damaged model: `model info` names the problem
    return [v["firmware"] for v in verdicts if v["loads"] == "yes"]


#: content kinds the ROM cannot run, and what to do instead of wrapping them
_NOT_FIRMWARE = {
    "kmodel": "kmodels are burned raw at their own address (kflashpy burn ADDR model.kmodel)",
    "kfpkg": "a package is burned as it is (kflashpy burn app.kfpkg)",
    "zip": "unzip it and wrap the firmware .bin inside",
    "elf": "the ROM runs a flat binary: riscv64-unknown-elf-objcopy -O binary app.elf app.bin",
    "erased": "the file is all 0xFF bytes; give the firmware .bin your build produced",
}


@click.command("wrap")
@click.argument("firmware", type=click.Path(dir_okay=False))
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="Boot image to write."
)
@click.option(
    "--io-mode",
    type=click.Choice(["dio", "qio"]),
    default="dio",
    show_default=True,
    help="Flag bit1: dio sets it (kflash.py 1.1.6 default), qio clears it (older tools).",
)
@key_options
@click.pass_obj
def wrap_cmd(s: Session, firmware, output, io_mode, key_file, key_env, key_hex) -> None:
    """Wrap a raw FIRMWARE .bin into the boot image the K210 ROM loads from address 0.

    With a key the payload is AES-128-CBC encrypted for a chip whose OTP holds that key
    (it will not start on any other chip).
    """
    from ..fileio import write_atomic
    from ..image.api import image_info
    from ..image.bootimage import wrap_boot_image

    key = load_key(hex_text=key_hex, file=key_file, env=key_env)
    data = _read(firmware)
    if not data:
        raise InputError(
            f"{firmware} is empty (0 bytes)", "give the firmware .bin your build produced"
        )
    info = image_info(data)
    if info.kind == "boot-image":
        raise InputError(
            f"{firmware} is already a boot image", "wrapping it twice makes it unbootable"
        )
    if info.kind in _NOT_FIRMWARE:
        raise InputError(f"{firmware}: {info.label}, not a firmware .bin", _NOT_FIRMWARE[info.kind])
    image = wrap_boot_image(data, key=key, dio=io_mode == "dio")
    write_atomic(output, image)
    if key is not None:
        s.warn("the image is AES-encrypted: it boots only on a chip whose OTP holds this key")
    s.out(f"{output}: boot image of {fmt_size(len(image))} ({fmt_size(len(data))} firmware)")
    s.result = {
        "output": output,
        "size": len(image),
        "payload_size": len(data),
        "encrypted": key is not None,
        "dio": io_mode == "dio",
    }


@click.command("unwrap")
@click.argument("image", type=click.Path(dir_okay=False))
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="Raw firmware to write."
)
@click.option("--no-check", is_flag=True, help="Extract even when the SHA-256 does not match.")
@key_options
@click.pass_obj
def unwrap_cmd(s: Session, image, output, no_check, key_file, key_env, key_hex) -> None:
    """Extract the firmware from a boot IMAGE (decrypting it when a key is given)."""
    from ..fileio import write_atomic
    from ..image.bootimage import parse_boot_image, unwrap_boot_image

    data = _read(image)
    parsed = parse_boot_image(data, image)
    key = load_key(hex_text=key_hex, file=key_file, env=key_env)
    payload = unwrap_boot_image(data, key=key, name=image, check_sha=not no_check)
    write_atomic(output, payload)
    if parsed.aes:
        s.warn(
            "decrypted with the key given: a wrong key cannot be detected (the firmware would "
            "be garbage); the size includes the zero padding to 16-byte blocks"
        )
    s.out(f"{output}: {fmt_size(len(payload))} firmware")
    s.result = {
        "output": output,
        "size": len(payload),
        "sha_valid": parsed.sha_valid,
        "aes": parsed.aes,
    }


def register(group: click.Group) -> None:
    group.add_command(image_info_cmd)
    group.add_command(wrap_cmd)
    group.add_command(unwrap_cmd)
