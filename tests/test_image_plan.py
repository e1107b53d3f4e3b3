import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.paths import KMODELS

from kflashpy.errors import InputError, LayoutError
from kflashpy.image.bootimage import wrap_boot_image
from kflashpy.image.plan import FlashItem, find_overlaps, plan_flash
from kflashpy.model.detect import swap_words

FW = b"\x21\xa8\xef\xbe\xad\xde"


def firmware(size: int) -> bytes:
    return FW + bytes(size - len(FW))


def v3() -> bytes:
    return (KMODELS / "v3" / "iris_nncase-v0.1.0-rc5.kmodel").read_bytes()


def v4() -> bytes:
    return (KMODELS / "v4" / "iris_nncase-v0.2.0-beta4.kmodel").read_bytes()


def v5() -> bytes:
    return (KMODELS / "generated_v5" / "iris_k210.kmodel").read_bytes()


def codes(plan, severity=None):
    return sorted(f.code for f in plan.findings if severity in (None, f.severity))


def test_firmware_1_5_mib_collides_with_model_at_0x180000():
    plan = plan_flash(
        [
            FlashItem(0, firmware(1536 * 1024), "maixpy.bin"),
            FlashItem(0x180000, v4(), "model.kmodel"),
        ]
    )
    (err,) = plan.errors
    assert err.code == "overlap"
    # both files, both ranges and the 37 bytes of boot-image overhead
    assert "maixpy.bin (0x00000000-0x00180024)" in err.message
    assert "model.kmodel (0x00180000-" in err.message and "37 B" in err.message
    with pytest.raises(LayoutError, match="overlap"):
        plan.raise_on_errors()
    plan.raise_on_errors(force=True)


def test_clean_maixpy_layout_has_room_and_regions():
    plan = plan_flash(
        [FlashItem(0, firmware(1_493_375), "maixpy.bin"), FlashItem(0x300000, v4(), "m.kmodel")],
        layout="maixpy",
    )
    assert plan.ok and codes(plan) == ["headroom"]
    fw, model = sorted(plan.regions, key=lambda r: r.address)
    assert fw.prefix and fw.size == 1_493_375 + 37 and fw.write == wrap_boot_image(fw.item.data)
    assert fw.footprint == (0, 0x16D000)
    assert not model.prefix and model.content.kmodel.version == 4


def test_headroom_warns_under_threshold():
    plan = plan_flash([FlashItem(0, firmware(0x17F000), "fw.bin"), FlashItem(0x180000, v3(), "m")])
    (f,) = [f for f in plan.findings if f.code == "headroom"]
    assert f.severity == "warning" and "4,059 B" in f.message


def test_shared_sector_unaligned_and_past_end():
    plan = plan_flash(
        [
            FlashItem(0x300000, b"a" * 100, "a.bin"),
            FlashItem(0x300800, b"b" * 100, "b.bin"),
            FlashItem(0xFFF000, b"c" * 8192, "c.bin"),
        ],
        board="maix-bit",
    )
    assert codes(plan) == ["past-end", "shared-sector", "unaligned"]
    shared = next(f for f in plan.findings if f.code == "shared-sector")
    assert "a.bin" in shared.message and "b.bin" in shared.message


def test_spiffs_is_reserved_but_can_be_replaced():
    plan = plan_flash([FlashItem(0xD10000, b"x" * 10, "cfg.bin")], layout="maixpy")
    assert "reserved" in codes(plan, "error")
    plan = plan_flash([FlashItem(0xD00000, b"x" * 4096, "spiffs.img")], layout="maixpy")
    assert plan.ok and "replaces" in codes(plan)


def test_kmodel_version_against_firmware():
    items = [FlashItem(0x300000, v4(), "v4.kmodel"), FlashItem(0x400000, v5(), "v5.kmodel")]
    assert codes(plan_flash(items, layout="maixpy"), "error") == ["kmodel-version"]  # V5 only
    assert codes(plan_flash(items, layout="maixpy-minimum"), "error") == ["kmodel-version"] * 2
    assert plan_flash([FlashItem(0x300000, v3(), "v3.kmodel")], layout="minimum").ok


def test_declared_loader_must_match_the_model_form():
    plain, swapped = v4(), swap_words(v4())
    bad = [
        FlashItem(0x300000, swapped, "be.kmodel", loader="kpu.load"),
        FlashItem(0x400000, plain, "le.kmodel", loader="load_flash"),
    ]
    assert codes(plan_flash(bad, layout="maixpy"), "error") == ["kmodel-loader"] * 2
    good = [
        FlashItem(0x300000, plain, "le.kmodel", loader="kpu.load"),
        FlashItem(0x400000, swapped, "be.kmodel", loader="load_flash"),
    ]
    assert plan_flash(good, layout="maixpy").ok
    assert "kmodel-loader" in codes(plan_flash(good[1:], layout="kboot"), "error")
    with pytest.raises(InputError):
        plan_flash([FlashItem(0, plain, "x", loader="nonsense")])


def test_content_mistakes():
    plan = plan_flash(
        [
            FlashItem(0x300000, v3(), "wrapped.kmodel", prefix=True),
            FlashItem(0, wrap_boot_image(firmware(100)), "fw.img", prefix=True),
            FlashItem(0x500000, b"\x7fELF" + bytes(60), "app.elf"),
            FlashItem(0x600000, b"", "empty.bin"),
        ]
    )
    assert codes(plan, "error") == ["double-wrap", "elf", "empty", "kmodel-prefixed"]
    raw = plan_flash([FlashItem(0, firmware(100), "fw.bin", prefix=False)])
    assert codes(raw, "error") == ["unbootable"]


def test_wrapped_image_written_as_is_and_bad_sha_refused():
    img = wrap_boot_image(firmware(1000))
    plan = plan_flash([FlashItem(0, img, "fw.img")])
    assert plan.ok and plan.writes[0].write == img and not plan.writes[0].prefix
    broken = bytearray(img)
    broken[100] ^= 0xFF
    assert "bad-sha" in codes(plan_flash([FlashItem(0, bytes(broken), "fw.img")]), "error")


def test_resident_firmware_from_file_and_typical_size():
    model = FlashItem(0x180000, v4(), "m.kmodel")
    plan = plan_flash([model], firmware=FlashItem(0, firmware(0x190000), "maixpy.bin"))
    assert codes(plan, "error") == ["overlap"] and len(plan.writes) == 1
    plan = plan_flash([model], layout="maixpy")
    assert codes(plan) == ["typical-firmware"]


def test_aes_item_is_padded_and_warned():
    plan = plan_flash([FlashItem(0, firmware(100), "fw.bin", key=bytes(16))])
    assert plan.writes[0].size == 112 + 37 and "aes" in codes(plan, "warning")


def test_swap_keys_applied():
    plan = plan_flash([FlashItem(0x300000, b"\x01\x02\x03\x04\x05", "d", swap=True)])
    assert plan.writes[0].write == b"\x04\x03\x02\x01\x00\x00\x00\x05"
    plan = plan_flash([FlashItem(0x300000, b"\x01\x02\x03\x04", "d", reverse4=True)])
    assert len(plan.writes[0].write) == 64 and plan.writes[0].write[:4] == b"\x04\x03\x02\x01"


def brute_force_overlaps(spans):
    owners: dict[int, list[int]] = {}
    for i, (s, e) in enumerate(spans):
        for b in range(s, e):
            owners.setdefault(b, []).append(i)
    shared: dict[tuple[int, int], int] = {}
    for ids in owners.values():
        for x in range(len(ids)):
            for y in range(x + 1, len(ids)):
                key = (ids[x], ids[y])
                shared[key] = shared.get(key, 0) + 1
    return shared


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 80)), max_size=10))
def test_overlap_groups_name_every_clash_in_linear_size(raw):
    spans = [(s, s + n) for s, n in raw]
    pairs = brute_force_overlaps(spans)
    groups = find_overlaps(spans)
    for ids, s, e in groups:  # every member holds the whole shared range
        assert s < e and len(ids) >= 2
        assert all(spans[i][0] <= s and e <= spans[i][1] for i in ids)
    named = {i for ids, _, _ in groups for i in ids}
    assert named == {i for pair in pairs for i in pair}
    assert len(groups) < max(2, len(spans))
    for sp in {sp for sp in spans if spans.count(sp) > 1 and sp[1] > sp[0]}:
        same = tuple(i for i, x in enumerate(spans) if x == sp)  # one group, however many
        assert (same, *sp) in groups


def test_many_files_at_one_address_are_one_finding():
    data = b"\x11" * 5000
    plan = plan_flash([FlashItem(0x300000, data, "m.bin")] * 3000)
    overlaps = [f for f in plan.findings if f.code == "overlap"]
    assert len(overlaps) == 1 and len(overlaps[0].subjects) == 3000
    assert "listed 3000 times" in overlaps[0].message
    assert len({id(r.write) for r in plan.regions}) == 1  # one copy of the bytes


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(1, 3)), min_size=1, max_size=6))
def test_plan_names_every_overlapping_item(raw):
    items = [
        FlashItem((a + 1) * 256, b"\x11" * (n * 200), f"f{i}.bin") for i, (a, n) in enumerate(raw)
    ]
    plan = plan_flash(items)
    pairs = brute_force_overlaps([(it.address, it.address + len(it.data)) for it in items])
    found = [f for f in plan.findings if f.code == "overlap"]
    assert {x for f in found for x in f.subjects} == {f"f{i}.bin" for p in pairs for i in p}
    assert len(found) <= max(0, len(items) - 1)


def test_public_api_on_files(tmp_path):
    import kflashpy
    from kflashpy.image.kfpkg import read_kfpkg

    (tmp_path / "fw.bin").write_bytes(firmware(5000))
    (tmp_path / "m.kmodel").write_bytes(v3())
    specs = [(0, tmp_path / "fw.bin"), (0x300000, tmp_path / "m.kmodel")]
    plan = kflashpy.check_layout(specs, layout="maixpy-minimum")
    assert plan.ok and [r.address for r in plan.writes] == [0, 0x300000]
    out = tmp_path / "a.kfpkg"
    kflashpy.pack(out, specs)
    assert [(e.address, e.sha256_prefix) for e in read_kfpkg(out).entries] == [
        (0, True),
        (0x300000, False),
    ]
    assert kflashpy.check_layout([out]).ok
    assert kflashpy.image_info(out).kind == "kfpkg"
    with pytest.raises(AttributeError):
        kflashpy.no_such_name  # noqa: B018
