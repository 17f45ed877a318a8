"""No configured API key is ever printed, stored or reported, even when a server echoes it (issue 9)."""

from __future__ import annotations

import json
import subprocess
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from conftest import MEDPANEL, ROOT
from medpanel.errors import ModelCallError
from medpanel.redact import REDACTED, add_secret_env, redact, redact_data
from medpanel.testing.mock_server import MockConfig, MockServer

KEY = "sk-leak/ABC+def=123456789"  # '/', '+' and '=' make its URL-encoded forms differ from it


def _forms(key: str) -> set[str]:
    return {key, quote(key, safe=""), quote_plus(key), quote(key)}


def test_keys_named_by_the_environment_are_redacted_in_every_form(monkeypatch):
    monkeypatch.setenv("SOME_PROVIDER_API_KEY", KEY)
    text = f"401: Bearer {KEY}; url ?api_key={quote(KEY, safe='')}&k={quote_plus(KEY)}"
    shown = redact(text)
    assert not any(form in shown for form in _forms(KEY)), shown
    assert shown == f"401: Bearer {REDACTED}; url ?api_key={REDACTED}&k={REDACTED}"
    assert redact_data({"error": [KEY, 3], KEY: None}) == {"error": [REDACTED, 3], REDACTED: None}


def test_a_spec_s_key_env_is_a_secret_and_errors_are_redacted_when_formed(monkeypatch):
    monkeypatch.setenv("MY_SERVER_TOKEN", "tok-987654321")  # no _API_KEY suffix: only key_env names it
    assert "tok-987654321" in redact("x tok-987654321")
    add_secret_env("MY_SERVER_TOKEN")
    error = ModelCallError("openai:m: the server refused the API key (HTTP 401): bad key tok-987654321", "Use tok-987654321 elsewhere.")
    assert "tok-987654321" not in error.problem + error.fix + str(error)
    assert REDACTED in error.problem and REDACTED in error.fix


def test_short_placeholders_are_not_secrets(monkeypatch):
    monkeypatch.setenv("LOCAL_API_KEY", "none")
    assert redact("none of these") == "none of these"


SECRET = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters="[]"), min_size=6, max_size=40)


@example("", "\x85" * 6, "")  # a key of Unicode spaces only: str.strip() once made it vanish from the secrets
@given(st.text(max_size=60), SECRET, st.text(max_size=60))
def test_no_form_of_a_key_survives_redaction(before, key, after):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HYPOTHESIS_API_KEY", key)
        for form in _forms(key):
            shown = redact(before + form + after + form)
            assert not any(f in shown for f in _forms(key)), (key, shown)


# ---------------------------------------------------------------- end to end: a server that echoes the Authorization header

@pytest.fixture
def leaky_server():
    with MockServer(MockConfig(echo_auth_status=401)) as server:
        yield server


def test_an_echoed_key_appears_in_no_output_store_or_report(cli_env, tmp_path, leaky_server):
    env = dict(cli_env, LEAKY_TOKEN=KEY, COLUMNS="1000")  # named only by the spec's key_env
    spec = f"openai:mock@{leaky_server.base_url}?key_env=LEAKY_TOKEN"
    outputs = []

    def medpanel(*args, code=None):
        proc = subprocess.run([MEDPANEL, *args], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert "Traceback" not in proc.stdout + proc.stderr
        if code is not None:
            assert proc.returncode == code, proc.stdout + proc.stderr
        outputs.append(proc.stdout + proc.stderr)
        return proc

    # The server really does echo it: the request carried the key, the error body holds it.
    medpanel("chat", spec, "hi", code=1)
    assert leaky_server.stats()["requests"] >= 1
    assert REDACTED in outputs[-1] and "HTTP 401" in outputs[-1], outputs[-1]
    medpanel("chat", spec, "hi", "--json", code=1)
    medpanel("bench", "examples/prostate", "--protocol", "specialist", "--models", spec, "--json")
    run_id = json.loads(medpanel("show", "last", "--json").stdout)["run_id"]
    medpanel("show", run_id)
    medpanel("runs")
    medpanel("board", "examples/prostate", "-m", spec)
    medpanel("report", run_id, "--out", str(tmp_path / "report"), "--no-plot")
    failed = json.loads(medpanel("show", run_id, "--json").stdout)
    assert failed["items"]["failed"] >= 1 and REDACTED in json.dumps(failed)

    for text in outputs:
        assert not any(form in text for form in _forms(KEY)), text
    store_bytes = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("cli.db"))
    report_bytes = b"".join(p.read_bytes() for p in (tmp_path / "report").iterdir())
    assert b"[redacted]" in store_bytes and b"[redacted]" in report_bytes
    for blob in (store_bytes, report_bytes):
        assert not any(form.encode() in blob for form in _forms(KEY))
