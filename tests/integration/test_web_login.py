"""`--web-login` protects loadgen's routes: the report, the charts page and its data answer only a logged-in user.

Locust's web login needs a login manager from the locustfile (as Locust's own tests set one up): here a request
loader that accepts a request carrying `X-Test-User: alice` and nobody else. Without it every loadgen route must
send the browser to Locust's login page, with it every route answers; Locust's `/stats/requests` (which carries the
LLM tab's rows) is Locust's own and protected the same way.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from loadgen.locust_plugin.launcher import free_port

from .harness import write_scenario

ROOT = Path(__file__).resolve().parents[2]
# loadgen/locust_plugin/web_ui.py's ROUTES, read from its source: importing it here would import Locust, which
# monkey-patches the test process.
ROUTES = ast.literal_eval(
    next(
        n.value
        for n in ast.parse((ROOT / "loadgen/locust_plugin/web_ui.py").read_text(encoding="utf-8")).body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "ROUTES"
    )
)

LOCUSTFILE = """
from flask_login import UserMixin
from locust import events

from loadgen.locust_plugin.locustfile import StreamingLLMUser  # noqa: F401


class User(UserMixin):
    def get_id(self):
        return "alice"


@events.init.add_listener
def _login(environment, **_):
    environment.web_ui.app.secret_key = "test only"
    environment.web_ui.login_manager.request_loader(
        lambda request: User() if request.headers.get("X-Test-User") == "alice" else None
    )
"""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _status(url: str, user: str | None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"X-Test-User": user} if user else {})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Location", "")


def test_every_loadgen_route_needs_the_login(tmp_path: Path) -> None:
    (tmp_path / "lf.py").write_text(LOCUSTFILE, encoding="utf-8")
    scenario = write_scenario(tmp_path / "s.yaml", {"a": "http://127.0.0.1:9"}, load={"users": 1, "duration": "5s"})
    web = free_port()
    cmd = [sys.executable, "-m", "locust", "-f", str(tmp_path / "lf.py"), "--scenario", str(scenario)]
    cmd += ["--web-login", "--web-host", "127.0.0.1", "--web-port", str(web), "--report-dir", str(tmp_path / "r")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=(tmp_path / "log").open("wb"))
    url = f"http://127.0.0.1:{web}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if _status(url + "/login", None)[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "log").read_text()[-3000:]
            time.sleep(0.3)
        assert "/loadgen/charts" in ROUTES and "/loadgen/report.json" in ROUTES
        for route in (*ROUTES, "/stats/requests"):
            code, where = _status(url + route, None)
            assert code == 302 and "/login" in where, (route, code, where)
            code, body = _status(url + route, "alice")
            assert code == 200 and "Locust auth exception" not in body, (route, code, body[:300])
        assert "<canvas" in _status(url + "/loadgen/charts", "alice")[1]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
