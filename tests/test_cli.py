"""The CLI as a user runs it: subprocesses, real store file, exit codes, env-var options, a human at a terminal."""

from __future__ import annotations

import json
import subprocess

import pexpect
import pytest

from conftest import MEDPANEL, ROOT


def run(args, env, check=True):
    proc = subprocess.run([MEDPANEL, *args], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"medpanel {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_info_json_reports_store_from_env(cli_env):
    data = json.loads(run(["info", "--json"], cli_env).stdout)
    assert data["store"] == cli_env["MEDPANEL_STORE"]
    assert set(data["providers"]) == {"openai", "local", "scripted", "replay", "human"}
    assert "local" in data["extras"]


def test_chat_scripted_and_cache(cli_env):
    first = json.loads(run(["chat", "scripted:echo", "hello panel", "--json"], cli_env).stdout)
    assert first["text"] == "hello panel" and first["model"] == "scripted:echo"


@pytest.mark.parametrize("args, message", [
    (["chat", "nosuch:model", "hi"], "Unknown model provider"),
    (["board", "/nonexistent/case.yaml"], "does not exist"),
    (["bench", "nodataset", "-m", "scripted:echo"], "Unknown dataset"),
    (["bench", "medqa", "-m", "scripted:echo", "--set", "oops"], "is not KEY=VALUE"),
    (["show", "nope"], "No run matches"),
])
def test_bad_input_exits_2_with_a_fix_and_no_traceback(cli_env, args, message):
    proc = run(args, cli_env, check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_runs_lists_a_run_with_a_long_model_spec_in_a_line_or_two(cli_env, shared_data):
    spec = "scripted:Answer: B. " + "The findings fit this option better than any other one here. " * 4
    run(["bench", "medqa", "-m", spec, "--limit", "1", "--run-id", "long-spec"], cli_env)
    listing = run(["runs"], dict(cli_env, COLUMNS="100")).stdout
    lines = [line.strip() for line in listing.splitlines() if line.strip()]
    assert len(lines) == 3 and lines[0].startswith("run ") and lines[2].startswith("long-spec   done     single"), listing
    assert "…" in listing and run(["runs", "--json"], cli_env).stdout.count("better than any other") == 4  # whole in --json


def test_invalid_case_file_is_named(cli_env, tmp_path):
    bad = tmp_path / "case.yaml"
    bad.write_text("summary: [unclosed\n")
    proc = run(["board", str(bad), "-m", "scripted:echo"], cli_env, check=False)
    assert proc.returncode == 2 and "is not valid YAML" in proc.stderr


def test_bench_runs_show_and_env_options(cli_env, shared_data):
    env = dict(cli_env, MEDPANEL_CONCURRENCY="3", MEDPANEL_LIMIT="6")
    summary = json.loads(run(["bench", "medqa", "-m", "scripted:Answer: B", "--json"], env).stdout)
    assert summary["items"]["done"] == 6 and summary["scores"]["accuracy"]["n"] == 6
    assert summary["calls"]["calls"] == 6
    runs = json.loads(run(["runs", "--json"], env).stdout)
    assert [r["id"] for r in runs] == [summary["run_id"]]
    shown = json.loads(run(["show", summary["run_id"][:10], "--json"], env).stdout)
    assert shown["items"]["done"] == 6
    events = json.loads(run(["show", "last", "--item", "medqa-0", "--json"], env).stdout)
    assert events[0]["text"] == "Answer: B" and events[-1]["kind"] == "decision"


def test_budget_cap_stops_loudly(cli_env, shared_data):
    proc = run(["bench", "medqa", "-m", "scripted:Answer: A", "--limit", "5", "-c", "1", "--max-calls", "2"], cli_env, check=False)
    assert proc.returncode == 3
    assert "Budget cap reached: calls limit 2" in proc.stderr and "--resume" in proc.stderr


def test_human_answers_at_the_terminal(cli_env):
    child = pexpect.spawn(MEDPANEL, ["chat", "human:Physician", "What is the most likely diagnosis?"], env=cli_env, encoding="utf-8", timeout=60, cwd=str(ROOT))
    child.expect("Your turn as Physician")
    child.expect("What is the most likely diagnosis\\?")
    child.expect("> ")
    child.sendline("Community-acquired pneumonia,")
    child.sendline("right lower lobe.")
    child.sendline("")
    child.expect("right lower lobe.")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_a_bad_record_in_a_jsonl_of_cases_names_its_line(cli_env, tmp_path):
    bad = tmp_path / "cases.jsonl"
    bad.write_text('{"id": "ok", "question": "Q?", "options": {"A": "x"}}\n{"id": "bad", "options": "not a mapping"}\n')
    proc = run(["bench", str(bad), "-m", "scripted:Answer: A"], cli_env, check=False)
    assert proc.returncode == 2 and "record 2 is not a valid case" in proc.stderr and "Traceback" not in proc.stderr
