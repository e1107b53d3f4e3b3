"""``kflashpy model ...``: describe, prepare for load_flash, seal and unseal kmodels."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..errors import InputError, UsageError
from ..model.stackvm import RELEASES
from ..units import fmt_size
from .session import Session, short_label
from .types import ADDRESS


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}", "check the path") from None


#: the layer table's columns: (header, cell from a layer's info); the default view keeps
#: to 80 columns, -v shows all
_LAYER_COLUMNS: list[tuple[str, Callable[[dict], Any]]] = [
    ("  #", lambda row: f"  {row['index']}"),
    ("op", lambda row: row["op"]),
    ("device", lambda row: row.get("device", "")),
    ("in", lambda row: _shape(row.get("in_shape"))),
    ("out", lambda row: _shape(row.get("out_shape"))),
    ("kernel", lambda row: row.get("kernel", "")),
    ("pool", lambda row: row.get("pool", "")),
    ("act", lambda row: row.get("activation", "") or row.get("detail", "")),
    ("body", lambda row: row.get("body_size", "")),
    ("ram end", lambda row: row.get("kpu_ram_end", "")),  # KPU RAM used up to
]
_LAYER_COLUMNS_80 = [c for c in _LAYER_COLUMNS if c[0] not in ("device", "act", "body")]


def _shape(shape: Any) -> str:
    return "x".join(str(d) for d in shape) if shape else "-"


@click.group("model")
def model_group() -> None:
    """kmodel files: info, prep-flash (kpu.load_flash), seal/unseal, keygen."""


# --- info -------------------------------------------------------------------------------


def _render_info(s: Session, r: dict[str, Any]) -> None:
    fmt = r["format"]
    if fmt.get("opaque"):
        s.out(
            f"{short_label(r['file'])}: MaixHub .{fmt['kind']} (encrypted, opaque), {fmt_size(r['size'])}"
        )
    else:
        extra = " (load_flash word-swapped)" if fmt["swapped"] else ""
        s.out(f"{short_label(r['file'])}: kmodel V{fmt['version']}{extra}, {fmt_size(r['size'])}")
        s.out(f"  producer: {fmt['producer']}")
        if "layers" not in r:  # recognised but not parsed (V1, later versions)
            _render_verdicts(s, r)
            return
        for key in ("target", "weights_bits", "modules", "nncase_release"):
            if key in fmt:
                value = fmt[key]
                value = ", ".join(value) if isinstance(value, list) else value
                s.out(f"  {key.replace('_', ' ')}: {value}")
        for kind in ("inputs", "outputs"):
            s.out(f"{kind}:")
            s.table(
                ["  name", "shape", "type", "memory", "start", "bytes"],
                [[f"  {t['name']}", _shape(t["shape"]), t["dtype"], t["memory"], t["start"],
                  t["size"]] for t in r[kind]],
            )  # fmt: skip
        s.out("layers:" if s.verbose else "layers: (-v adds device, activation, body size)")
        columns = _LAYER_COLUMNS if s.verbose else _LAYER_COLUMNS_80
        s.table(
            [name for name, _ in columns],
            [[cell(row) for _, cell in columns] for row in r["layers"]],
        )
        m = r["memory"]
        s.out("memory:")
        s.out(f"  main memory        {fmt_size(m['main_mem'])}")
        s.out(f"  KPU RAM peak       {fmt_size(m['kpu_ram_peak'])} of {fmt_size(m['kpu_ram_limit'])}")  # fmt: skip
        s.out(f"  model size         {fmt_size(m['model_size'])} (file {fmt_size(m['file_size'])})")  # fmt: skip
        s.out(f"  header end         {m['header_end']} B")
        s.out(f"  largest body       {fmt_size(m['largest_body'])}")
        s.out(f"  RAM kpu.load       ~{fmt_size(m['kpu_load'])}")
        if "load_flash_single" in m:
            s.out(f"  RAM load_flash     ~{fmt_size(m['load_flash_single'])} single buffer,")
            s.out(f"                     ~{fmt_size(m['load_flash_dual'])} dual buffer")
    _render_verdicts(s, r)


def _render_verdicts(s: Session, r: dict[str, Any]) -> None:
    s.out("firmwares:")
    s.table(
        ["  firmware", "loads", "why"],
        [[f"  {v['firmware']}", v["loads"], v["why"]] for v in r["firmwares"]],
    )
    for note in r.get("notes", []):
        s.out(f"note: {note}")


@model_group.command("info")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option(
    "--nncase-release",
    type=click.Choice(RELEASES),
    help="V5: the nncase 1.x release that wrote FILE (default: told from its code).",
)
@click.pass_obj
def info_cmd(s: Session, file: str, nncase_release: str | None) -> None:
    """Version, inputs/outputs, per-layer table, memory needs and per-firmware verdicts.

    Works on plain and load_flash word-swapped files; MaixHub .smodel/.emodel files
    are recognised and reported as opaque. --json gives every field.
    """
    from ..model.info import model_info

    report = model_info(_read(file), file, nncase_release=nncase_release)
    s.result = report
    _render_info(s, report)


# --- prep-flash ----------------------------------------------------------------------------


@model_group.command("prep-flash")
@click.argument("input_file", metavar="IN", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="File to write.")  # fmt: skip
@click.option("--unswap", is_flag=True, help="The input is already swapped: write the plain file.")
@click.option("--force", is_flag=True, help="Swap even if the input already looks swapped.")
@click.option("-a", "--address", type=ADDRESS, default="0x600000", show_default=True,
              help="Flash address you will burn it at (for the printed MaixPy call).")  # fmt: skip
@click.option("--spi-speed", type=int, default=60_000_000, show_default=True,
              help="SPI clock in Hz for the printed call (at most 80 MHz).")  # fmt: skip
@click.option("--firmware", "firmware_name", metavar="LAYOUT", default="maixpy", show_default=True,
              help="Firmware layout whose typical free heap decides single/dual buffer.")  # fmt: skip
@click.pass_obj
def prep_flash_cmd(
    s: Session, input_file, output, unswap, force, address, spi_speed, firmware_name
) -> None:
    """Word-swap a V3/V4 kmodel for kpu.load_flash, after checking it is safe.

    Refuses V5 (no MaixPy loader), MaixHub models (opaque), headers longer than
    4096 bytes and bodies at offsets that are not multiples of 4, and an input that
    is already swapped (unless --force; --unswap gives the plain file back).
    Burn the output raw (no sha256 prefix) and load it with the printed call.
    """
    from ..fileio import write_atomic
    from ..model.prep import MAX_SPI_SPEED, prep_flash
    from ..target.boards import DEFAULT_FLASH_SIZE, get_firmware

    if not 0 < spi_speed <= MAX_SPI_SPEED:
        raise UsageError(
            f"--spi-speed {spi_speed}: must be 1..{MAX_SPI_SPEED} Hz",
            "MaixPy's default is 60000000 (60 MHz)",
        )
    if address <= 0:
        raise UsageError(
            "--address must be > 0 (kpu.load_flash refuses address 0)",
            "address 0 holds the firmware; give where you burn the model, e.g. 0x600000",
        )
    fw = get_firmware(firmware_name)  # before writing: a failed command writes nothing
    prep = prep_flash(_read(input_file), input_file, unswap_input=unswap, force=force)
    if prep.direction != "unswap" and address + len(prep.data) > DEFAULT_FLASH_SIZE:
        raise UsageError(
            f"--address 0x{address:x}: the {len(prep.data):,}-byte model would end at "
            f"0x{address + len(prep.data):x}, past the 16 MiB flash of K210 boards",
            f"give an address at or below 0x{(DEFAULT_FLASH_SIZE - len(prep.data)) & ~0xFFF:x}",
        )
    write_atomic(output, prep.data)
    for w in prep.warnings:
        s.warn(w)
    if address % 4096 and prep.direction != "unswap":
        s.warn(
            f"0x{address:x} is not 4 KiB aligned: burning there shares an erase sector with the "
            f"data before it (kflash_gui and kflash.py refuse it); use 0x{address & ~0xFFF:x}"
        )
    result: dict[str, Any] = {"input": input_file, "output": output, **prep.to_dict()}
    if prep.direction == "unswap":
        s.result = result
        s.out(f"wrote {output}: plain kmodel V{prep.version} ({fmt_size(len(prep.data))})")
        return
    heap = fw.typical_free_heap
    dual = heap is None or prep.ram["load_flash_dual"] <= heap
    call = prep.call(address, dual, spi_speed)
    result.update(address=address, dual_buffer=dual, call=call, firmware=fw.id)
    s.result = result
    s.out(f"wrote {output}: kmodel V{prep.version}, word-swapped for kpu.load_flash "
          f"({fmt_size(len(prep.data))})")  # fmt: skip
    s.out(f"burn it raw (no sha256 prefix) at 0x{address:x}, then on the board:")
    s.out(f"  task = {call}")
    need = prep.ram["load_flash_dual" if dual else "load_flash_single"]
    s.out(f"RAM needed: ~{fmt_size(need)} ({'dual' if dual else 'single'} buffer; "
          f"single ~{fmt_size(prep.ram['load_flash_single'])}, "
          f"dual ~{fmt_size(prep.ram['load_flash_dual'])}, "
          f"kpu.load ~{fmt_size(prep.ram['kpu_load'])})")  # fmt: skip
    if heap is not None and prep.ram["load_flash_single"] > heap:
        s.warn(f"even single buffer needs more than the ~{fmt_size(heap)} typical free heap "
               f"of {fw.id}")  # fmt: skip


# --- seal / unseal / keygen ----------------------------------------------------------------


def _key_options(f):
    f = click.option("--key-hex", metavar="HEX",
                     help="Key as 64 hex digits (visible to other users in `ps`; avoid).")(f)  # fmt: skip
    f = click.option("--key-env", metavar="NAME",
                     help="Environment variable holding the key (default KFLASHPY_SEAL_KEY).")(f)  # fmt: skip
    f = click.option("--key-file", type=click.Path(dir_okay=False),
                     help="File with the 32-byte key (raw or 64 hex digits).")(f)  # fmt: skip
    return f


def _key(key_file, key_env, key_hex) -> bytes:
    from ..model.seal import DEFAULT_KEY_ENV, load_seal_key

    if key_file is None and key_env is None and key_hex is None and DEFAULT_KEY_ENV in os.environ:
        key_env = DEFAULT_KEY_ENV
    return load_seal_key(hex_text=key_hex, file=key_file, env=key_env)


@model_group.command("seal")
@click.argument("input_file", metavar="IN", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Sealed file to write.")  # fmt: skip
@_key_options
@click.pass_obj
def seal_cmd(s: Session, input_file, output, key_file, key_env, key_hex) -> None:
    """Encrypt and authenticate a file (kmodel, MaixHub model, kfpkg...) with a 256-bit key.

    AES-256-CBC + HMAC-SHA-256 (encrypt-then-MAC, keys derived per file); format in
    docs/sealed-model.md. Unseal with `kflashpy model unseal` or, on a MaixPy board,
    with the kseal.py helper shipped in kflashpy/model/board/.
    """
    from ..fileio import write_atomic
    from ..model.seal import read_header, seal_bytes

    key = _key(key_file, key_env, key_hex)
    blob = seal_bytes(_read(input_file), key, name=input_file)
    write_atomic(output, blob)
    head = read_header(blob, output)
    s.result = {"input": input_file, "output": output, "size": len(blob), **head.to_dict()}
    s.out(f"sealed {input_file} ({head.content}, {fmt_size(head.plaintext_size)}) -> {output} "
          f"({fmt_size(len(blob))}), key id {head.key_id.hex()}")  # fmt: skip


@model_group.command("unseal")
@click.argument("input_file", metavar="IN", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Plain file to write.")  # fmt: skip
@_key_options
@click.pass_obj
def unseal_cmd(s: Session, input_file, output, key_file, key_env, key_hex) -> None:
    """Verify and decrypt a sealed file; any modified byte, truncation or wrong key is refused."""
    from ..fileio import write_atomic
    from ..model.seal import read_header, unseal_bytes

    key = _key(key_file, key_env, key_hex)
    blob = _read(input_file)
    plain = unseal_bytes(blob, key, input_file)
    write_atomic(output, plain)
    head = read_header(blob, input_file)
    s.result = {"input": input_file, "output": output, **head.to_dict()}
    s.out(f"verified and decrypted {input_file} -> {output} ({head.content}, "
          f"{fmt_size(len(plain))})")  # fmt: skip


@model_group.command("keygen")
@click.argument("key_file", metavar="KEYFILE", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite an existing key file.")
@click.pass_obj
def keygen_cmd(s: Session, key_file, force) -> None:
    """Create a random 256-bit seal key (64 hex digits, file mode 0600). Prints only its id."""
    from ..fileio import write_atomic
    from ..model.seal import key_id, new_key

    path = Path(key_file)
    if path.exists() and not force:
        raise UsageError(f"{key_file} exists", "use --force to replace it (the old key is lost)")
    key = new_key()
    write_atomic(path, key.hex().encode() + b"\n", mode=0o600)
    s.result = {"key_file": key_file, "key_id": key_id(key).hex()}
    s.out(f"wrote a new seal key to {key_file} (key id {key_id(key).hex()}); keep it secret")


def register(group: click.Group) -> None:
    group.add_command(model_group)
