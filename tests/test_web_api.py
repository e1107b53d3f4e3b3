"""The web station's JSON API through Flask's test client (no server, no browser)."""

from __future__ import annotations

import base64
import io
import json
import os
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image

from kflashpy.image.kfpkg import read_kfpkg
from kflashpy.model.detect import swap_words
from kflashpy.model.seal import unseal_bytes
from kflashpy.web import parse_listen
from kflashpy.web.app import TOKEN_HEADER, Station, create_app
from kflashpy.web.station import Workspace

FIX = Path(__file__).parent / "fixtures" / "kmodels"
YOLO = FIX / "v3" / "yolo_20classes_nncase-v0.1.0-rc5.kmodel"
DOG = FIX / "inputs" / "dog_320x240.bmp"


@pytest.fixture
def station():
    st = Station(workspace=Workspace(max_file=2 * 1024 * 1024, max_total=8 * 1024 * 1024))
    st.allow(["localhost"])  # the test client's Host
    yield st
    st.close()


@pytest.fixture
def client(station):
    c = create_app(station).test_client()
    c.environ_base[f"HTTP_{TOKEN_HEADER.upper().replace('-', '_')}"] = station.token
    return c


def upload(client, name: str, data: bytes) -> dict:
    r = client.post("/api/files", data={"file": (io.BytesIO(data), name)})
    assert r.status_code == 200, r.json
    return r.json


def wait_job(client, job: str, timeout: float = 120) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        snap = client.get(f"/api/jobs/{job}").json
        if snap["finished"]:
            return snap
        time.sleep(0.1)
    raise AssertionError(f"job {job} did not finish")


# --- safety -------------------------------------------------------------------------------


def test_another_origin_is_refused(client, station) -> None:
    r = client.post("/api/virtual", json={"board": "maix-bit"},
                    headers={"Origin": "http://evil.example"})  # fmt: skip
    assert r.status_code == 403 and "evil.example" in r.json["error"]["message"]
    r = client.post("/api/virtual", json={}, headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403
    assert station.workspace.virtual == {}  # nothing happened
    ok = client.post("/api/virtual", json={}, headers={"Origin": "http://localhost"})
    assert ok.status_code == 200


def test_dns_rebinding_host_is_refused(client) -> None:
    r = client.get("/api/meta", headers={"Host": "attacker.example:8000"})
    assert r.status_code == 403


def test_token_is_required(station) -> None:
    bare = create_app(station).test_client()
    assert bare.get("/api/meta").status_code == 401
    assert bare.get("/").status_code == 401
    assert bare.get("/api/meta", headers={TOKEN_HEADER: "guess"}).status_code == 401
    assert bare.get(f"/api/meta?token={station.token}").status_code == 200
    page = bare.get(f"/?token={station.token}")
    assert page.status_code == 200 and b"/static/app.js" in page.data
    assert bare.get("/static/app.js").status_code == 200  # assets are public, data is not


def test_upload_limits_and_names_never_reach_the_disk(client, station) -> None:
    r = client.post("/api/files", data={"file": (io.BytesIO(bytes(3 * 1024 * 1024)), "big.bin")})
    assert r.status_code == 413 and r.json["error"]["kind"] == "too-large"
    for n in range(4):
        upload(client, f"part{n}.bin", bytes(2 * 1024 * 1024 - 1000))
    r = client.post("/api/files", data={"file": (io.BytesIO(bytes(1 << 20)), "more.bin")})
    assert r.status_code == 400 and "already holds" in r.json["error"]["message"]
    f = upload(client, "../../etc/evil.bin", b"\x01\x02")
    assert f["name"] == "evil.bin"
    assert list(station.workspace.tmp.iterdir()) == []  # uploads stay in memory
    d = client.get(f"/api/files/{f['id']}/download")
    assert d.data == b"\x01\x02" and "evil.bin" in d.headers["Content-Disposition"]
    assert client.get("/static/..%2f__init__.py").status_code == 404
    assert client.get("/static/app.py").status_code == 404


def test_listen_parsing() -> None:
    assert parse_listen(None) == ("127.0.0.1", 0)
    assert parse_listen(":8765") == ("127.0.0.1", 8765)
    assert parse_listen("0.0.0.0:80") == ("0.0.0.0", 80)
    assert parse_listen("[::1]:9000") == ("::1", 9000)
    with pytest.raises(Exception, match="bad port"):
        parse_listen("127.0.0.1:http")


def test_boards_lists_detected_ports_with_the_board_guess(client, monkeypatch) -> None:
    from kflashpy.isp import ports

    fake = [
        SimpleNamespace(device="/dev/ttyUSB7", vid=0x1A86, pid=0x7523, location=None,
                        serial_number=None),
        SimpleNamespace(device="/dev/ttyUSB8", vid=0x0403, pid=0x6010, location="1-1:1.1",
                        serial_number="OE1"),
    ]  # fmt: skip
    monkeypatch.setattr(ports.list_ports, "comports", lambda: fake)
    client.post("/api/virtual", json={"board": "maix-go"})
    listed = {p["port"]: p for p in client.get("/api/ports").json["ports"]}
    assert (
        "maix-dock" in listed["/dev/ttyUSB7"]["boards"]
        and "WCH" in listed["/dev/ttyUSB7"]["bridge"]
    )
    assert "maix-go" in listed["/dev/ttyUSB8"]["boards"]
    assert "maix-bit" not in listed["/dev/ttyUSB8"]["boards"]  # its UART is interface 0
    (virtual,) = [p for p in listed.values() if p["virtual"]]
    assert virtual["label"] == "virtual maix-go #1" and virtual["port"].startswith("sim://")


# --- plan ---------------------------------------------------------------------------------


def test_plan_collision_is_flagged_then_fixed(client) -> None:
    a = upload(client, "a.bin", b"\x11" * 20000)
    b = upload(client, "b.bin", b"\x22" * 20000)
    spec = {"layout": "maixpy", "items": [{"file": a["id"], "address": "0x300000"},
                                          {"file": b["id"], "address": "0x302000"}]}  # fmt: skip
    r = client.post("/api/plan", json=spec).json
    assert not r["plan"]["ok"]
    assert [f["code"] for f in r["plan"]["findings"] if f["severity"] == "error"] == ["overlap"]
    svg = ET.fromstring(r["svg"])
    marks = [e for e in svg.iter() if e.get("class") == "collision"]
    assert [(int(m.get("data-start")), m.get("data-severity")) for m in marks] == [
        (0x302000, "error")
    ]
    assert client.post("/api/plan/kfpkg", json=spec).status_code == 400  # refused: errors
    assert client.post("/api/plan/image", json=spec).status_code == 400
    spec["items"][1]["address"] = "0x310000"
    r = client.post("/api/plan", json=spec).json
    assert r["plan"]["ok"] and "collision" not in r["svg"].replace("no collision", "")
    pkg = client.post("/api/plan/kfpkg", json=spec)
    assert pkg.status_code == 200
    entries = read_kfpkg(pkg.data).entries
    assert [(e.address, e.name) for e in entries] == [(0x300000, "a.bin"), (0x310000, "b.bin")]
    image = client.post("/api/plan/image", json=spec)
    assert image.status_code == 200 and len(image.data) == 0x310000 + 20000
    assert image.data[0x300000 : 0x300000 + 20000] == b"\x11" * 20000
    assert image.data[0x310000:] == b"\x22" * 20000
    assert set(image.data[:0x300000]) == set(image.data[0x300000 + 20000 : 0x310000]) == {0xFF}
    # the package goes back into a plan as one upload
    p = upload(client, "plan.kfpkg", pkg.data)
    assert [e["address"] for e in p["entries"]] == [0x300000, 0x310000]
    bad_zip = io.BytesIO()
    with zipfile.ZipFile(bad_zip, "w") as z:
        z.writestr("flash-list.json", "{not json")
    broken = client.post("/api/files", data={"file": (io.BytesIO(bad_zip.getvalue()), "bad.kfpkg")})
    assert broken.status_code == 400 and "flash-list.json" in broken.json["error"]["message"]
    assert client.get("/api/files/f4/download").status_code == 400  # not kept
    again = client.post("/api/plan", json={"items": [{"file": p["id"]}]}).json
    assert [r["name"] for r in again["plan"]["regions"]] == ["plan.kfpkg:a.bin", "plan.kfpkg:b.bin"]


def test_plan_errors_are_json(client) -> None:
    r = client.post("/api/plan", json={"items": [{"file": "f99", "address": "0"}]})
    assert r.status_code == 400 and "f99" in r.json["error"]["message"]
    a = upload(client, "a.bin", b"\x11" * 100)
    r = client.post("/api/plan", json={"items": [{"file": a["id"], "address": "zero"}]})
    assert r.status_code == 400 and "a.bin" in r.json["error"]["message"]
    assert client.post("/api/plan", data="nope").status_code == 400
    r = client.post("/api/plan", json={"items": [{"file": a["id"], "address": 0, "prefix": "yes"}]})
    assert r.status_code == 400 and "prefix" in r.json["error"]["message"]


# --- burn ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_burn_two_virtual_boards_in_parallel_both_verified(client, station) -> None:
    ports = [client.post("/api/virtual", json={"board": "maix-bit"}).json["port"] for _ in "ab"]
    data = os.urandom(96 * 1024)
    f = upload(client, "data.bin", data)
    spec = {"items": [{"file": f["id"], "address": "0x300000"}], "ports": ports}
    r = client.post("/api/burn", json=spec)
    assert r.status_code == 200, r.json
    job = r.json["job"]
    busy = client.post("/api/burn", json=spec)  # one operation per port at a time
    assert busy.status_code == 409 and "already running" in busy.json["error"]["message"]
    stream = client.get(f"/api/jobs/{job}/events")
    events = [
        json.loads(line[len("data: ") :])
        for line in stream.get_data(as_text=True).splitlines()
        if line.startswith("data: ")
    ]
    assert events[-1]["kind"] == "end" and events[-1]["ok"] is True
    for port in ports:
        mine = [e for e in events if e["port"] == port]
        assert any(e["kind"] == "progress" and e["stage"] == "write" for e in mine)
        (done,) = [e for e in mine if e["kind"] == "done"]
        assert done["verify"]["ok"] and done["regions"][0]["verified"] == "sha256"
    snap = wait_job(client, job)
    assert snap["ok"] and set(snap["results"]) == set(ports)
    resumed = client.get(f"/api/jobs/{job}/events", headers={"Last-Event-ID": "3"})
    assert resumed.get_data(as_text=True).startswith("id: 4\n")  # a reconnect resumes
    # both virtual boards really hold the bytes (their flash files are in the temp dir)
    for n in (1, 2):
        img = (station.workspace.tmp / f"virtual-{n}.img").read_bytes()
        assert img[0x300000 : 0x300000 + len(data)] == data
    assert client.get("/api/ports").json["busy"] == []


def test_burn_refuses_errors_and_collision_warnings_like_the_cli(client) -> None:
    port = client.post("/api/virtual", json={}).json["port"]
    a = upload(client, "a.bin", b"\x01" * 100)
    b = upload(client, "b.bin", b"\x02" * 100)
    items = [{"file": a["id"], "address": "0x300000"}, {"file": b["id"], "address": "0x300100"}]
    r = client.post("/api/burn", json={"items": items, "ports": [port]})
    assert r.status_code == 400 and "erase sector" in r.json["error"]["message"]
    items[1]["address"] = "0x300010"  # now bytes overlap: an error even with force
    r = client.post("/api/burn", json={"items": items, "ports": [port], "force": True})
    assert r.status_code == 400 and "overlap" in r.json["error"]["message"]
    assert client.get("/api/ports").json["busy"] == []


def test_burn_refuses_ports_the_station_does_not_list(client) -> None:
    f = upload(client, "data.bin", b"\x01" * 100)
    spec = {"items": [{"file": f["id"], "address": "0x300000"}],
            "ports": ["sim://?board=maix-bit&flash=/tmp/elsewhere.img"]}  # fmt: skip
    r = client.post("/api/burn", json=spec)
    assert r.status_code == 400 and "not a port of this station" in r.json["error"]["message"]


@pytest.mark.slow
def test_cancel_stops_a_burn(client) -> None:
    port = client.post("/api/virtual", json={}).json["port"]
    f = upload(client, "big.bin", os.urandom(1536 * 1024))
    r = client.post("/api/burn", json={"items": [{"file": f["id"], "address": 0}], "ports": [port]})
    job = r.json["job"]
    assert client.post(f"/api/jobs/{job}/cancel").status_code == 200
    snap = wait_job(client, job)
    assert snap["ok"] is False
    assert snap["results"][port]["error"]["kind"] == "interrupted"


# --- models -------------------------------------------------------------------------------


def test_yolo_on_the_dog_gives_three_boxes(client) -> None:
    m = upload(client, YOLO.name, YOLO.read_bytes())
    i = upload(client, DOG.name, DOG.read_bytes())
    r = client.post("/api/model/run", json={"model": m["id"], "image": i["id"]})
    assert r.status_code == 200, r.json
    assert sorted(d["class"] for d in r.json["detections"]) == ["bicycle", "car", "dog"]
    with Image.open(io.BytesIO(base64.b64decode(r.json["boxes_png"]))) as im:
        assert im.size == (320, 240)
        drawn = im.convert("RGB").tobytes()
    with Image.open(DOG) as im:
        assert drawn != im.convert("RGB").tobytes()
    bad = client.post("/api/model/run", json={"model": m["id"], "image": i["id"], "threshold": "x"})
    assert bad.status_code == 400 and "threshold" in bad.json["error"]["message"]


def test_model_info_prep_and_seal(client) -> None:
    data = YOLO.read_bytes()
    m = upload(client, YOLO.name, data)
    info = client.post("/api/model/info", json={"file": m["id"]}).json
    assert info["format"]["version"] == 3 and info["layers"]
    assert {"firmware", "loads", "why"} <= set(info["firmwares"][0])
    prep = client.post("/api/model/prep", json={"file": m["id"], "address": "0x300000"}).json
    swapped = client.get(f"/api/files/{prep['file']}/download").data
    assert swap_words(swapped)[: len(data)] == data and prep["call"].startswith("kpu.load_flash")
    seal = client.post("/api/model/seal", json={"file": m["id"]}).json
    blob = client.get(f"/api/files/{seal['file']}/download").data
    assert unseal_bytes(blob, bytes.fromhex(seal["key_hex"])) == data
    bad = client.post("/api/model/seal", json={"file": m["id"], "key_hex": "xyz"})
    assert bad.status_code == 400
    notmodel = upload(client, "x.bin", b"\x00" * 64)
    r = client.post("/api/model/info", json={"file": notmodel["id"]})
    assert r.status_code == 400 and "not a kmodel" in r.json["error"]["message"]


@pytest.mark.slow
def test_compare_a_burned_model_with_the_host(client) -> None:
    """Burn a firmware and a model to a virtual MaixPy board, then compare it with the host."""
    mnist = FIX / "v3" / "mnist_maixpy-scripts.kmodel"
    port = client.post("/api/virtual", json={}).json["port"]
    fw = upload(client, "firmware.bin", b"\x13\x00\x00\x00" * 1024)  # wrapped at 0: boots
    m = upload(client, mnist.name, mnist.read_bytes())
    items = [{"file": fw["id"], "address": 0}, {"file": m["id"], "address": "0x300000"}]
    job = client.post("/api/burn", json={"items": items, "ports": [port], "verify": False}).json
    assert wait_job(client, job["job"])["ok"]
    body = {"model": m["id"], "port": port, "address": "0x300000"}
    r = client.post("/api/model/compare", json=body)
    assert r.status_code == 200, r.json
    assert r.json["passed"] and r.json["outputs"][0]["mismatches"] == 0
    wrong = client.post("/api/model/compare", json={**body, "address": "0x310000"})
    assert wrong.status_code == 400 and "does not hold the model" in wrong.json["error"]["message"]


@pytest.mark.slow
def test_closing_the_station_stops_its_burns(client, station) -> None:
    port = client.post("/api/virtual", json={}).json["port"]
    f = upload(client, "big.bin", os.urandom(1536 * 1024))
    r = client.post("/api/burn", json={"items": [{"file": f["id"], "address": 0}], "ports": [port]})
    job = station.jobs.get(r.json["job"])
    station.close()  # what Ctrl-C on `kflashpy gui` does
    assert job.finished and not job.thread.is_alive()
    assert job.results[port]["error"]["kind"] == "interrupted"
