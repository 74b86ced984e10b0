"""loadgen's own login for `--web-login` (locust_plugin/web_login.py), as the Helm chart's ui master runs it: the
user name and password from LOADGEN_WEB_USERNAME / LOADGEN_WEB_PASSWORD. Locust's login form and HTTP basic auth let
the right pair in and nothing else; `/metrics` stays readable without a login, as documented."""

from __future__ import annotations

import base64
import http.cookiejar
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from loadgen.locust_plugin.launcher import LOCUSTFILE, free_port

from .harness import write_scenario

PASSWORD = "pw-Zq8J2vKc1xYt"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _open(
    opener: urllib.request.OpenerDirector, url: str, data: bytes | None = None, auth: tuple[str, str] | None = None
) -> tuple[int, str]:
    headers = {}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    try:
        with opener.open(urllib.request.Request(url, data=data, headers=headers), timeout=10) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Location", "")


def test_the_password_from_the_environment_is_the_only_way_in(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "s.yaml", {"a": "http://127.0.0.1:9"}, load={"users": 1, "duration": "5s"})
    web = free_port()
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(scenario), "--web-login"]
    cmd += ["--web-host", "127.0.0.1", "--web-port", str(web), "--report-dir", str(tmp_path / "r")]
    env = {**os.environ, "LOADGEN_WEB_USERNAME": "ops", "LOADGEN_WEB_PASSWORD": PASSWORD}
    log = tmp_path / "log"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    url = f"http://127.0.0.1:{web}"
    plain = urllib.request.build_opener(_NoRedirect)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if _open(plain, url + "/login")[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)
        for route in ("/", "/stats/requests", "/loadgen/report.json"):
            code, where = _open(plain, url + route)
            assert code == 302 and "/login" in where, (route, code, where)
            assert _open(plain, url + route, auth=("ops", PASSWORD + "x"))[0] == 302
            assert _open(plain, url + route, auth=("root", PASSWORD))[0] == 302
            code, body = _open(plain, url + route, auth=("ops", PASSWORD))
            assert code == 200 and "Locust auth exception" not in body, (route, body[:300])
        # The login form: a wrong password goes back to the login page, the right one in, kept by the session cookie.
        jar = http.cookiejar.CookieJar()
        browser = urllib.request.build_opener(_NoRedirect, urllib.request.HTTPCookieProcessor(jar))
        form = urllib.parse.urlencode({"username": "ops", "password": "guess"}).encode()
        code, where = _open(browser, url + "/loadgen/login", form)
        assert code == 302 and where.endswith("/login")
        assert _open(browser, url + "/loadgen/report.json")[0] == 302
        form = urllib.parse.urlencode({"username": "ops", "password": PASSWORD}).encode()
        code, where = _open(browser, url + "/loadgen/login", form)
        assert code == 302 and not where.endswith("/login"), where
        code, body = _open(browser, url + "/loadgen/report.json")
        assert code == 200 and body.startswith("{"), body[:300]
        # Prometheus reads /metrics without a login (documented; it serves aggregate numbers only).
        code, body = _open(plain, url + "/metrics")
        assert code == 200 and "loadgen_run_info" in body
        assert PASSWORD not in log.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
