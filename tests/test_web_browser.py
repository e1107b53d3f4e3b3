"""End-to-end: the web station in a real headless Chromium, driven by Selenium.

Uses the system browser and its driver (Debian: ``apt-get install chromium
chromium-driver``); nothing is downloaded at run time. Skipped, with the reason, when
either is missing. Screenshots are saved as artefacts under ``$KFLASHPY_ARTEFACTS`` (or
pytest's temporary directory) and their paths printed.
"""

from __future__ import annotations

import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest

FIX = Path(__file__).parent / "fixtures" / "kmodels"
YOLO = FIX / "v3" / "yolo_20classes_nncase-v0.1.0-rc5.kmodel"
DOG = FIX / "inputs" / "dog_320x240.bmp"

BROWSER = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
DRIVER = shutil.which("chromedriver")
if BROWSER is None or DRIVER is None:
    pytest.skip(
        "no Chromium and chromedriver on PATH (Debian: apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from kflashpy.web import start  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory) -> Path:
    where = os.environ.get("KFLASHPY_ARTEFACTS")
    d = Path(where) if where else tmp_path_factory.mktemp("web-screenshots")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = BROWSER
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1100"):  # fmt: skip
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=DRIVER))
    drv.set_script_timeout(30)
    yield drv
    drv.quit()


@pytest.fixture
def station():
    st = start()
    yield st
    st.stop()


def shot(browser, artefacts: Path, name: str) -> Path:
    path = artefacts / name
    browser.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def no_script_errors(browser) -> None:
    """The page's console has no errors (a broken script would show here first)."""
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def wait(browser, cond, timeout: float = 30, what: str = ""):
    return WebDriverWait(browser, timeout, poll_frequency=0.2).until(
        lambda d: cond(d), message=what
    )


def open_page(browser, station) -> None:
    browser.get(station.url)
    wait(browser, lambda d: d.find_element(By.ID, "status").text == "ready", what="page ready")


def tab(browser, name: str) -> None:
    browser.find_element(By.ID, f"tab-{name}").click()


def test_plan_collision_fix_and_parallel_burn(browser, station, artefacts, tmp_path) -> None:
    app, model = tmp_path / "app.bin", tmp_path / "model.bin"
    app.write_bytes(os.urandom(64 * 1024))
    model.write_bytes(os.urandom(48 * 1024))
    open_page(browser, station)
    for _ in range(2):
        browser.find_element(By.ID, "add-virtual").click()
    wait(
        browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#ports-table tr[data-port]")) == 2
    )

    tab(browser, "plan")
    browser.find_element(By.ID, "plan-layout").send_keys("MaixPy (standard")
    files = browser.find_element(By.ID, "plan-files")
    files.send_keys(str(app))
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#plan-table tbody tr")) == 1)
    files.send_keys(str(model))
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#plan-table tbody tr")) == 2)
    addresses = browser.find_elements(By.CSS_SELECTOR, "#plan-table input.address")
    for field, value in zip(addresses, ("0x300000", "0x308000"), strict=True):
        field.clear()
        field.send_keys(value)
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#map rect.collision"),
         what="collision on the map")  # fmt: skip
    assert "error" in browser.find_element(By.ID, "verdict").text
    mark = browser.find_element(By.CSS_SELECTOR, "#map rect.collision")
    assert mark.get_attribute("data-start") == str(0x308000)
    bad = browser.find_elements(By.CSS_SELECTOR, '#map g.region[data-status="error"]')
    assert {g.get_attribute("data-name") for g in bad} == {"app.bin", "model.bin"}
    assert browser.find_elements(By.CSS_SELECTOR, '#map g.reserved[data-name="spiffs"]')
    shot(browser, artefacts, "1-plan-collision.png")

    addresses[1].clear()
    addresses[1].send_keys("0x310000")
    wait(browser, lambda d: d.find_element(By.ID, "verdict").text.startswith(("layout ok", "ok,")),
         what="collision fixed")  # fmt: skip
    assert not browser.find_elements(By.CSS_SELECTOR, "#map rect.collision")
    shot(browser, artefacts, "2-plan-fixed.png")

    tab(browser, "burn")
    boxes = browser.find_elements(By.CSS_SELECTOR, ".target-box")
    assert len(boxes) == 2
    for b in boxes:
        b.click()
    # record every progress text the cards show, to prove progress is live, per board
    browser.execute_script(
        "window.__stages = [];"
        "new MutationObserver(() => document.querySelectorAll('.board-card').forEach(c =>"
        "  window.__stages.push(c.querySelector('.board-name').textContent + '|' +"
        "                      c.querySelector('.board-stage').textContent)))"
        ".observe(document.getElementById('board-cards'),"
        "         {subtree: true, childList: true, characterData: true});"
    )
    browser.find_element(By.ID, "burn-btn").click()
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".board-card")) == 2)
    try:  # a picture of the burn under way, when the poll catches it
        wait(browser, lambda d: "write" in d.find_element(By.ID, "board-cards").text, 20)
        shot(browser, artefacts, "3a-burn-in-progress.png")
    except TimeoutException:
        print("the write stage was too quick to photograph")
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".board-card.ok")) == 2
         or d.find_elements(By.CSS_SELECTOR, ".board-card.failed"), timeout=240,
         what="both boards finished")  # fmt: skip
    statuses = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".board-status")]
    shot(browser, artefacts, "3-burn-two-boards.png")
    assert statuses == ["verified ✓", "verified ✓"], statuses
    wait(browser, lambda d: "all boards burned" in d.find_element(By.ID, "status").text)
    stages = browser.execute_script("return window.__stages")
    for name in ("virtual maix-bit #1", "virtual maix-bit #2"):
        partial = [t for t in stages if t.startswith(name + "|write") and not t.endswith("100%")]
        assert partial, f"no live write progress shown for {name}"
    img = station.station.workspace.tmp
    for n in (1, 2):
        flash = (img / f"virtual-{n}.img").read_bytes()
        assert flash[0x300000:0x310000] == app.read_bytes()
        assert flash[0x310000 : 0x310000 + 48 * 1024] == model.read_bytes()
    no_script_errors(browser)


def test_a_stale_plan_check_does_not_overwrite_a_newer_one(browser, station, tmp_path) -> None:
    # two checks in flight, the older one answered last (as under load, when a pause in
    # typing starts a check while the previous one is still on its way): the verdict
    # must be the newer address's, not the stale one's
    app = tmp_path / "app.bin"
    app.write_bytes(os.urandom(16 * 1024))
    open_page(browser, station)
    tab(browser, "plan")
    browser.find_element(By.ID, "plan-files").send_keys(str(app))
    wait(browser, lambda d: d.find_element(By.ID, "verdict").text == "layout ok",
         what="first verdict")  # fmt: skip
    browser.execute_script(
        """
        const realFetch = window.fetch;
        let held = false;
        window.fetch = (url, opts) => {
          const answer = realFetch(url, opts);
          if (url === "/api/plan" && !held) {  // the first check's answer comes 1.5 s late
            held = true;
            return answer.then((r) => new Promise((ok) => setTimeout(() => ok(r), 1500)));
          }
          return answer;
        };
        state.plan[0].address = "0x7FFFF000";  // past the flash's end: an error
        checkPlan();
        state.plan[0].address = "0x310000";
        window.newerDone = checkPlan().then(() => true);
        """
    )
    # the newer check's answer, then time for the stale one to land
    browser.execute_script(
        "return window.newerDone.then(() => new Promise((ok) => setTimeout(ok, 2500)))"
    )
    assert browser.find_element(By.ID, "verdict").text == "layout ok"
    no_script_errors(browser)


def test_yolo_on_the_dog_shows_three_boxes(browser, station, artefacts) -> None:
    open_page(browser, station)
    tab(browser, "models")
    browser.find_element(By.ID, "model-file").send_keys(str(YOLO))
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#model-info table.layers"))
    browser.find_element(By.ID, "image-file").send_keys(str(DOG))
    wait(browser, lambda d: d.find_element(By.ID, "run-btn").is_enabled())
    browser.find_element(By.ID, "run-btn").click()
    wait(browser, lambda d: d.find_elements(By.ID, "boxes-img"), timeout=120, what="boxes")
    found = [e.text.split()[0] for e in browser.find_elements(By.CSS_SELECTOR, "li.detection")]
    browser.execute_script("document.getElementById('boxes-img').scrollIntoView()")
    shot(browser, artefacts, "4-yolo-dog.png")
    assert sorted(found) == ["bicycle", "car", "dog"]
    no_script_errors(browser)


def test_a_page_of_another_origin_is_refused(browser, station, artefacts, tmp_path) -> None:
    """A page on another port posts to the station (it even knows the token): refused."""
    target = f"http://127.0.0.1:{station.port}/api/virtual?token={station.token}"
    (tmp_path / "attack.html").write_text(
        f'<form id="f" method="post" action="{target}"><input name="board" value="maix-bit">'
        "</form><script>document.getElementById('f').submit()</script>"
    )
    (tmp_path / "blank.html").write_text("<p>another site</p>")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(tmp_path), **kw)

        def log_message(self, *args) -> None:
            return None

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://127.0.0.1:{other.server_port}/attack.html")
        wait(browser, lambda d: "refused" in d.find_element(By.TAG_NAME, "body").text)
        shot(browser, artefacts, "5-other-origin-refused.png")
        assert f"127.0.0.1:{other.server_port}" in browser.find_element(By.TAG_NAME, "body").text
        assert station.station.workspace.virtual == {}
        # a script on a page of that site cannot read the station's data either
        browser.get(f"http://127.0.0.1:{other.server_port}/blank.html")
        result = browser.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            f"fetch('http://127.0.0.1:{station.port}/api/meta?token={station.token}')"
            ".then(r => done('read ' + r.status), e => done('blocked: ' + e))"
        )
        assert result.startswith("blocked"), result
    finally:
        other.shutdown()
        other.server_close()
