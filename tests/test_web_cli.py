"""``kflashpy gui`` as a user starts it: a process printing the URL that serves the page."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request

from kflashpy.cli import main


def test_gui_serves_on_localhost_with_a_token() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kflashpy", "gui", "--no-browser"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stderr.readline()
        m = re.search(r"(http://127\.0\.0\.1:(\d+))/\?token=(\S+)", line)
        assert m, line
        base, token = m.group(1), m.group(3)
        with urllib.request.urlopen(f"{base}/?token={token}", timeout=30) as r:
            assert b"kflashpy web station" in r.read()
        req = urllib.request.Request(f"{base}/api/meta", headers={"X-Kflashpy-Token": token})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert any(b["id"] == "maix-bit" for b in json.load(r)["boards"])
        try:
            urllib.request.urlopen(f"{base}/api/meta", timeout=30)
            raise AssertionError("served without the token")
        except urllib.error.HTTPError as e:
            assert e.code == 401
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the station stops and cleans up
        assert proc.wait(30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def test_gui_bad_listen_is_a_usage_error(capsys) -> None:
    assert main(["gui", "--no-browser", "--listen", "127.0.0.1:notaport"]) == 2
    assert "--listen" in capsys.readouterr().err
