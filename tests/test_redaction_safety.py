"""Redaction never corrupts what it does not need to touch: ids in the store, JSON on stdout, odd text."""

from __future__ import annotations

import json
import subprocess

from conftest import MEDPANEL, ROOT


def _env(cli_env, key):
    return cli_env | {"OPENAI_API_KEY": key}


def test_a_placeholder_key_inside_a_run_id_does_not_split_the_run(cli_env, tmp_path):
    # Local servers are often given api_key "ollama" or "not-needed": words that also occur in run ids.
    env = _env(cli_env, "ollama")
    proc = subprocess.run([MEDPANEL, "bench", "examples/prostate", "-p", "board", "-m", "scripted:echo", "--run-id", "board-ollama-1",
                           "--json"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    shown = subprocess.run([MEDPANEL, "show", "board-ollama-1", "--json"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    summary = json.loads(shown.stdout)
    assert summary["items"]["done"] == 1


def test_json_output_stays_valid_when_a_key_starts_like_an_escape(cli_env, tmp_path):
    env = _env(cli_env, "not-needed")
    # "\n" + "ot-needed": serialised, it reads \not-needed; a lone surrogate cannot even be encoded raw.
    for i, reply in enumerate(["line1\not-needed tail", "x\ud800y"]):
        replies = tmp_path / f"r{i}.json"
        replies.write_text(json.dumps([reply]))
        for extra in (["--json"], []):
            proc = subprocess.run([MEDPANEL, "chat", f"scripted:{replies}", "hi", "--no-cache", *extra], env=env, cwd=ROOT,
                                  capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
            if extra:
                text = json.loads(proc.stdout)["text"]  # parses: redaction happened on the data, not across an escape
                assert text == reply
