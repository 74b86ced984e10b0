"""A login for Locust's `--web-login`: one user whose name and password come from the environment.

Locust's `--web-login` only turns the login on: without a login manager set up by the locustfile every page answers
"Locust auth exception". With ``LOADGEN_WEB_PASSWORD`` set (the Helm chart fills it from a Secret) loadgen sets one
up: Locust's login page posts to ``/loadgen/login`` and a right user name (``LOADGEN_WEB_USERNAME``, default
`loadgen`) and password put the user in Flask's signed session cookie (its key random per process); a request with
HTTP basic auth for the same user (`curl -u`) is let in too. Both compared in constant time; the session cookie is
SameSite=Lax. Without the password loadgen installs nothing, so a locustfile may install its own login (Locust's
extension point).

What the login guards: every Locust route and loadgen's (web_ui.py wraps them), not `/metrics`, which Prometheus
must read without a form (live_metrics.py; it serves aggregate numbers only).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import logging
import os
import secrets
from typing import Any

from locust import events
from locust.env import Environment

__all__ = ["PASSWORD_ENV", "USERNAME_ENV", "register"]

USERNAME_ENV = "LOADGEN_WEB_USERNAME"
PASSWORD_ENV = "LOADGEN_WEB_PASSWORD"
_SESSION_KEY = "loadgen_user"

log = logging.getLogger("loadgen")


class _User:
    """The one user (what Flask-Login asks of a user object)."""

    is_authenticated = True
    is_active = True
    is_anonymous = False

    def __init__(self, name: str) -> None:
        self.name = name

    def get_id(self) -> str:
        return self.name


def _same(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def _basic(header: str | None) -> tuple[str, str] | None:
    """(user, password) of an `Authorization: Basic …` header, else None."""
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


def _on_init(environment: Environment, **_: Any) -> None:
    web_ui = environment.web_ui
    if web_ui is None or not getattr(environment.parsed_options, "web_login", False):
        return
    password = os.environ.get(PASSWORD_ENV, "")
    if not password:
        log.warning(
            "loadgen: --web-login without %s: loadgen sets up no login, so every page refuses unless the "
            "locustfile sets one up",
            PASSWORD_ENV,
        )
        return
    username = os.environ.get(USERNAME_ENV, "") or "loadgen"
    from flask import Blueprint, redirect, request, session, url_for

    app = web_ui.app
    assert app is not None
    if not app.secret_key:
        app.secret_key = secrets.token_hex(32)  # signs the session cookie; a restarted master logs everyone out
    # The cookie is not sent with another site's POST (a page elsewhere cannot start a swarm in a logged-in browser).
    app.config["SESSION_COOKIE_SAMESITE"] = "Lax"
    manager = web_ui.login_manager

    def _from_request(req: Any) -> _User | None:
        if _same(session.get(_SESSION_KEY), username):
            return _User(username)
        creds = _basic(req.headers.get("Authorization"))
        if creds is not None and _same(creds[0], username) & _same(creds[1], password):
            return _User(username)
        return None

    manager.request_loader(_from_request)
    base = getattr(environment.parsed_options, "web_base_path", "") or ""
    web_ui.auth_args = {"username_password_callback": f"{base}/loadgen/login"}
    bp = Blueprint("loadgen_login", __name__, url_prefix=base)

    @bp.route("/loadgen/login", methods=["POST"])
    def _login() -> Any:
        if _same(request.form.get("username"), username) & _same(request.form.get("password"), password):
            session[_SESSION_KEY] = username
            return redirect(url_for("locust.index"))
        session["auth_error"] = "Invalid username or password"
        return redirect(url_for("locust.login"))

    app.register_blueprint(bp)


def register() -> None:
    """Attach the login's init listener; calling it again attaches nothing twice."""
    with contextlib.suppress(ValueError):  # not attached yet
        events.init.remove_listener(_on_init)
    events.init.add_listener(_on_init)
