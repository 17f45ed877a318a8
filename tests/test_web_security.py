"""The web app's guard rails, over real HTTP on loopback: a token off loopback, escaped case text, bounded and
type-checked uploads, no API key in any page. Fakes are the package's scripted model."""

from __future__ import annotations

import html
import socket
import time
from pathlib import Path

import httpx

from medpanel.web import auth
from medpanel.web.app import create_app
from medpanel.web.config import WebConfig, is_loopback
from web_support import browser_page, serving

ROOT = Path(__file__).resolve().parents[1]
PNG = (ROOT / "examples" / "prostate" / "slides").glob("*.png")

SCRIPT_CASE = """id: injected
summary: "A 50-year-old woman. <script>alert('case')</script> <img src=x onerror=alert('img')>"
slides:
  - image: slides/slide.png
    caption: "Axial CT <script>alert('caption')</script>"
"""


def test_loopback_is_told_apart_from_every_other_bind():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("example.org") and not is_loopback("")
    assert WebConfig(host="0.0.0.0").with_token().token  # off loopback a token is made when none is given
    assert WebConfig(host="127.0.0.1").with_token().token is None


def test_off_loopback_every_route_but_health_needs_the_token(tmp_path):
    app = create_app(WebConfig(store_path=tmp_path / "w.db", host="0.0.0.0", token="the-admin-token"))
    app.state.store.add_user("Dr Ito", "clinician", auth.token_hash("ito-token"))
    with serving(app, host="0.0.0.0") as base, httpx.Client(base_url=base, timeout=30) as client:
        assert client.get("/health").status_code == 200
        for path in ("/", "/runs", "/deliberations", "/ratings", "/static/app.css", "/static/htmx.min.js", "/deliberations/x/stream"):
            refused = client.get(path)
            assert refused.status_code == 401 and "access token" in refused.text, path
        assert client.post("/deliberations", data={"folder": "x"}).status_code == 401
        browser_like = client.get("/runs", headers={"Accept": "text/html"})
        assert browser_like.status_code == 303 and browser_like.headers["location"] == "/login?next=/runs"
        assert client.get("/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/runs", headers={"Authorization": "Bearer the-admin-token"}).status_code == 200
        assert client.get("/runs", headers={"Authorization": "Bearer ito-token"}).status_code == 200  # a user's own token
        # The sign-in form sets an HttpOnly, SameSite=Strict cookie and goes only to a path on this server.
        signed = client.post("/login", data={"token": "ito-token", "next": "//evil.example/"})
        assert signed.status_code == 303 and signed.headers["location"] == "/"
        cookie = signed.headers["set-cookie"]
        assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
        assert client.post("/login", data={"token": "nope"}).status_code == 401
        # A link with ?token= moves it into the cookie and out of the address bar.
        linked = httpx.get(base + "/runs?token=ito-token", follow_redirects=False)
        assert linked.status_code == 303 and "token" not in linked.headers["location"]
        assert app.state.store.remove_user("Dr Ito")
        assert httpx.get(base + "/runs", headers={"Authorization": "Bearer ito-token"}).status_code == 401


def test_on_loopback_without_a_token_the_local_person_is_admin(tmp_path):
    with serving(create_app(WebConfig(store_path=tmp_path / "w.db"))) as base:
        page = httpx.get(base + "/runs")
        assert page.status_code == 200
        assert "script-src 'self'" in page.headers["content-security-policy"]  # no inline script can run
        assert page.headers["x-frame-options"] == "DENY"


def upload(client: httpx.Client, case: tuple[str, bytes], slides: list[tuple[str, bytes]], **form) -> httpx.Response:
    files = [("case_file", (case[0], case[1], "application/octet-stream"))] + [("slides", (n, b, "application/octet-stream")) for n, b in slides]
    return client.post("/deliberations", data={"protocol": "board-live", "models": "scripted:echo", **form}, files=files,
                       headers={"Accept": "text/html"})


def test_uploads_are_bounded_and_type_checked(tmp_path):
    png = next(iter(PNG)).read_bytes()
    app = create_app(WebConfig(store_path=tmp_path / "w.db", max_upload_bytes=len(png) + 1000, uploads_dir=tmp_path / "uploads",
                               allowed_models=("scripted:echo",)))
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        too_big = upload(client, ("case.yaml", SCRIPT_CASE.encode()), [("slide.png", png + b"\0" * 5000)])
        assert too_big.status_code == 400 and "over the" in html.unescape(too_big.text) and "upload limit" in too_big.text
        not_image = upload(client, ("case.yaml", SCRIPT_CASE.encode()), [("slide.png", b"#!/bin/sh\necho not a picture\n")])
        assert not_image.status_code == 400 and "is not an image" in not_image.text
        not_case = upload(client, ("case.exe", b"MZ\x90\x00"), [])
        assert not_case.status_code == 400 and "not a case file" in not_case.text
        binary = upload(client, ("case.yaml", b"\xff\xfe\x00s\x00u"), [])
        assert binary.status_code == 400 and "not UTF-8" in html.unescape(binary.text)
        escape = upload(client, ("case.yaml", b"id: x\nsummary: s\nslides:\n  - image: ../../../etc/passwd\n"), [])
        assert escape.status_code == 400 and "outside" in html.unescape(escape.text).lower()
        without_case = client.post("/deliberations", data={"protocol": "board"}, files=[("slides", ("s.png", png, "image/png"))],
                                   headers={"Accept": "text/html"})
        assert without_case.status_code == 400 and "without a case file" in without_case.text
        assert not any((tmp_path / "uploads").glob("*/case.yaml"))  # nothing refused was kept
        # A body announced as 1 GB is refused from its headers, before it is read.
        with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=10) as raw:
            raw.sendall(b"POST /deliberations HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n"
                        b"Content-Length: 1000000000\r\n\r\n--b\r\n")
            received = b""
            while b"in all" not in received and (chunk := raw.recv(65536)):  # until the message, or the server closes
                received += chunk
            answer = received.decode("utf-8", "replace")
        assert answer.startswith("HTTP/1.1 413") and "in all" in answer


def test_a_chunked_upload_is_cut_off_at_the_limit(tmp_path):
    """A chunked body has no Content-Length to check: it is counted as it arrives and refused past the limit,
    before it is all read (or spooled to disk)."""
    app = create_app(WebConfig(store_path=tmp_path / "w.db", max_request_bytes=100_000))
    with serving(app) as base:
        with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=10) as raw:
            raw.sendall(b"POST /deliberations HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                        b"Content-Type: multipart/form-data; boundary=b\r\n\r\n")
            part = b'--b\r\nContent-Disposition: form-data; name="slides"; filename="big.png"\r\nContent-Type: image/png\r\n\r\n'
            raw.sendall(b"%x\r\n%s\r\n" % (len(part), part))  # a well-formed file part, then its endless content
            chunk = b"x" * 16_384
            received = b""
            try:
                for _ in range(64):  # 1 MB offered; the server answers after ~100 kB
                    raw.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    raw.settimeout(0.05)
                    try:
                        received += raw.recv(65536)
                    except socket.timeout:
                        pass
                    if received:
                        break
            except (BrokenPipeError, ConnectionResetError):
                pass
            raw.settimeout(10)
            while b"in all" not in received and (more := raw.recv(65536)):
                received += more
        assert received.startswith(b"HTTP/1.1 413") and b"in all" in received


def test_a_form_from_another_site_is_refused(tmp_path):
    """On loopback nobody signs in, so another site's page must not drive the app: a cross-site form post and a
    Host that is not this machine (DNS rebinding) are refused; the app's own forms pass."""
    app = create_app(WebConfig(store_path=tmp_path / "w.db", cases_dir=ROOT / "examples"))
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        cross = client.post("/deliberations", data={"folder": "prostate"}, headers={"Sec-Fetch-Site": "cross-site"})
        assert cross.status_code == 403 and "another site" in cross.text
        old_browser = client.post("/deliberations", data={"folder": "prostate"}, headers={"Origin": "http://evil.example"})
        assert old_browser.status_code == 403
        rebound = client.get("/runs", headers={"Host": "attacker.example:8000"})
        assert rebound.status_code == 403 and "loopback only" in rebound.text
        assert client.get("/runs", headers={"Host": "localhost:8000"}).status_code == 200
        same = client.post("/deliberations", data={"folder": "prostate", "protocol": "board", "models": "local"},
                           headers={"Sec-Fetch-Site": "same-origin", "Origin": base})
        assert same.status_code == 303


def test_the_start_page_offers_only_the_servers_models(tmp_path):
    """A spec names a server (which would be sent the API key), a key's variable or a file: a page never picks one."""
    app = create_app(WebConfig(store_path=tmp_path / "w.db", cases_dir=ROOT / "examples", allowed_models=("scripted:echo",)))
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        for spec in ("openai:gpt-4o@http://127.0.0.1:9/v1", "local?path=/etc/passwd", "scripted:/etc/passwd.yaml", "human", "replay:/etc"):
            refused = client.post("/deliberations", data={"folder": "prostate", "protocol": "board", "models": spec})
            assert refused.status_code == 400 and "not offered by this server" in refused.json()["error"], spec
        seat = client.post("/deliberations", data={"folder": "prostate", "protocol": "board-live", "models": "local",
                                                   "seat_models": "Radiologist=openai:x@http://127.0.0.1:9/v1"})
        assert seat.status_code == 400 and "not offered" in seat.json()["error"]
        assert client.post("/deliberations", data={"folder": "prostate", "protocol": "board", "models": "scripted:echo"}).status_code == 303
    from medpanel.web import auth as web_auth

    rater_app = create_app(WebConfig(store_path=tmp_path / "r.db", cases_dir=ROOT / "examples", token="t"))
    rater_app.state.store.add_user("Dr Rao", "rater", web_auth.token_hash("rao"))
    with serving(rater_app) as base:
        refused = httpx.post(base + "/deliberations", data={"folder": "prostate"}, headers={"Authorization": "Bearer rao"})
        assert refused.status_code == 403 and "only a clinician or an admin" in refused.json()["error"]


def test_a_script_in_a_case_renders_as_text(tmp_path):
    png = next(iter(PNG)).read_bytes()
    app = create_app(WebConfig(store_path=tmp_path / "w.db", uploads_dir=tmp_path / "uploads", allowed_models=("scripted:echo",)))
    with serving(app) as base:
        with httpx.Client(base_url=base, timeout=30) as client:
            started = upload(client, ("case.yaml", SCRIPT_CASE.encode()), [("slide.png", png)], protocol="board", models="scripted:echo")
            assert started.status_code == 303, started.text
            where = started.headers["location"]
            page = client.get(where).text
            for _ in range(100):
                if 'data-status="done"' in page or 'data-status="failed"' in page:
                    break
                time.sleep(0.1)
                page = client.get(where).text
            assert "<script>alert" not in page and "<img src=x" not in page
            assert "&lt;script&gt;alert(&#39;case&#39;)&lt;/script&gt;" in page
        with browser_page() as tab:
            dialogs: list = []
            tab.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            tab.goto(base + where)
            tab.click(".case-card summary")
            assert "<script>alert('case')</script>" in tab.inner_text(".case-card")
            assert "<script>alert('caption')</script>" in tab.inner_text(".slides figcaption")
            tab.wait_for_timeout(300)
            assert dialogs == []


def test_api_keys_never_reach_the_page(tmp_path, monkeypatch):
    secret = "sk-test-never-shown-9f8e7d6c"
    monkeypatch.setenv("MEDPANEL_TEST_API_KEY", secret)
    model = "openai:gpt-4o-mini@http://127.0.0.1:9/v1?key_env=MEDPANEL_TEST_API_KEY"  # nothing listens on port 9
    app = create_app(WebConfig(store_path=tmp_path / "w.db", cases_dir=ROOT / "examples", timeout_s=5, allowed_models=(model,)))
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        started = client.post("/deliberations", data={"folder": "prostate", "protocol": "board", "models": model})
        where = started.headers["location"]
        for _ in range(200):
            page = client.get(where).text
            if 'data-status="failed"' in page or 'data-status="done"' in page:
                break
            time.sleep(0.1)
        shown = page + client.get("/deliberations").text + client.get(where + "/stream").text
    assert 'data-status="failed"' in page and "127.0.0.1:9" in page  # it did reach for the server, and says so
    assert secret not in shown


def test_users_cli_keeps_only_a_hash_and_refuses_bad_input(cli_env, tmp_path):
    import subprocess

    from conftest import MEDPANEL

    def medpanel(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([MEDPANEL, *args], env=cli_env, capture_output=True, text=True, timeout=120)

    added = medpanel("users", "add", "Dr Ada Lee", "--role", "rater", "--json")
    assert added.returncode == 0, added.stderr
    token = __import__("json").loads(added.stdout)["token"]
    assert len(token) >= 30
    from medpanel.runs.store import Store

    # only the hash is kept (read before a connection is open: closing another handle on an SQLite file drops its locks)
    for file in Path(cli_env["MEDPANEL_STORE"]).parent.glob("cli.db*"):  # the database and any WAL beside it
        assert token.encode() not in file.read_bytes()
    store = Store(cli_env["MEDPANEL_STORE"])
    assert store.user_by_token_hash(auth.token_hash(token)) == {"name": "Dr Ada Lee", "role": "rater"}
    assert medpanel("users", "list").stdout.split() == ["Dr", "Ada", "Lee", "rater"]
    for args, message in ((("users", "add", "x<y"), "not a usable user name"), (("users", "add", "Admin"), "is reserved"), (("users", "add", "ok", "--role", "boss"), "Unknown role"),
                          (("users", "remove", "nobody"), "no user 'nobody'"),
                          (("serve", "--on-timeout", "later"), "not one of stop, pass"),
                          (("serve", "--board", str(tmp_path / "missing")), "does not exist"),
                          (("serve", "--cases", str(tmp_path / "missing")), "is not a folder")):
        refused = medpanel(*args)
        assert refused.returncode == 2 and message in refused.stderr and "Traceback" not in refused.stderr, (args, refused.stderr)
    removed = medpanel("users", "remove", "Dr Ada Lee")
    assert removed.returncode == 0
    assert store.user_by_token_hash(auth.token_hash(token)) is None


def test_runs_stay_hidden_from_the_people_rating_them_blind(tmp_path):
    """A rater never sees a run (its models would unblind the answers); a clinician named in an unfinished
    session does not see that session's runs; the unblinded ratings in a report are for admins only."""
    from test_rating import CASES, two_runs

    from medpanel.rating import sessions

    app = create_app(WebConfig(store_path=tmp_path / "w.db", token="admin-token"))
    store = app.state.store
    a, b = two_runs(store)
    session = sessions.create_session(store, [a, b], rubric="otb-audit", raters=["Dr Rater", "Dr Named"], seed=3, cases=CASES)
    for name, role in (("Dr Rater", "rater"), ("Dr Named", "clinician"), ("Dr Other", "clinician")):
        store.add_user(name, role, auth.token_hash(name.replace(" ", "-")))
    with serving(app) as base:
        def get(who: str, path: str) -> httpx.Response:
            return httpx.get(base + path, headers={"Authorization": f"Bearer {who}"}, timeout=30)

        for path in ("/runs", f"/runs/{a}", f"/runs/{a}/items/q1", f"/runs/{a}/report", "/runs/last", "/deliberations"):
            refused = get("Dr-Rater", path)
            assert refused.status_code == 403 and ("Hidden while you rate" in refused.text or "rate blind" in refused.text), path
            assert "sys-alpha" not in refused.text.lower()
        listing = get("Dr-Named", "/runs")
        assert listing.status_code == 200 and a not in listing.text and b not in listing.text  # the list, without them
        assert get("Dr-Named", f"/runs/{a}").status_code == 403
        assert get("Dr-Named", f"/runs/{a[:-1]}/report").status_code == 403  # a prefix does not get round it
        other = get("Dr-Other", f"/runs/{a}/report")
        assert other.status_code == 200 and "mp-ratings" not in other.text  # sees the run, not the people's ratings
        assert a in get("Dr-Other", "/runs").text
        assert "mp-ratings" in get("admin-token", f"/runs/{a}/report").text
    assert not sessions.progress(store, session)["complete"]  # what hid the runs from Dr Named: the session is open
