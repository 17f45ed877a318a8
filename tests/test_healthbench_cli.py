"""HealthBench end to end: `medpanel bench healthbench:FILE --protocol longform --models A,B,C --set judge=J`
against the mock OpenAI-compatible server over loopback HTTP, stored in a real SQLite store, then
`medpanel show --by theme`. The mock's grader call marks as met the criteria tests/test_healthbench.py's
MET lists, so every score is the hand-worked one there."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import MEDPANEL
from medpanel.runs.store import Store
from medpanel.testing import MockConfig, MockServer
from medpanel.testing.mock_replies import fake_from_schema, first_user, requested_schema, user_texts
from test_healthbench import DATASET, FIXTURE, MET

CONSOLIDATION = "Call emergency services now [Panelist 1, Panelist 3]. Do not wait for it to pass [Panelist 2]."


def reply(body: dict) -> str:
    """The mock's answers: a grade by the criterion's text, a fake of any other schema, else the consolidation."""
    structured, schema = requested_schema(body)
    if structured and schema and "criteria_met" in schema.get("properties", {}):
        criterion = user_texts(body)[0].rpartition(":\n")[2]
        return json.dumps({"explanation": "Mock grade.", "criteria_met": criterion.startswith(MET)})
    if structured:
        return json.dumps(fake_from_schema(schema, first_user(body)))
    return CONSOLIDATION


@pytest.fixture(scope="module")
def server():
    with MockServer(MockConfig(reply=reply)) as srv:
        yield srv


def medpanel(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([MEDPANEL, *args], env=env, capture_output=True, text=True, timeout=300)


def test_longform_panel_on_healthbench_end_to_end(server, cli_env):
    seats = ",".join(f"openai:{name}@{server.base_url}" for name in ("a", "b", "c"))
    proc = medpanel(["bench", DATASET, "--protocol", "longform", "--models", seats, "--set", f"judge=openai:j@{server.base_url}",
                     "--set", "max_rounds=1", "--run-id", "hb", "--json"], cli_env)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["items"]["done"] == 4 and summary["roles"]["judge"] == f"openai:j@{server.base_url}"
    scores = summary["scores"]
    assert scores["healthbench"]["mean"] == pytest.approx(7 / 96) and scores["healthbench"]["kind"] == "mean clipped to 0-1"
    assert scores["healthbench.level:cluster"]["mean"] == pytest.approx(0.5)
    assert "consensus" in scores and "seats_credited" in scores  # the panel's own measures beside the grade

    store = Store(cli_env["MEDPANEL_STORE"], create=False)
    events = store.events("hb", "hb-stroke-01")
    grades = [e for e in events if e["role"] == "healthbench_criterion"]
    assert [e["data"]["criteria_met"] for e in grades] == [True, False, True, False]
    assert all(e["data"]["scorer"] == "healthbench" and e["model"] == "openai:j" and e["input_tokens"] > 0 for e in grades)
    assert [e["phase"] for e in events if e["kind"] == "turn"][:3] == ["initial"] * 3 and any(e["role"] == "moderator" for e in events)
    outcome = next(i for i in store.items("hb") if i["item_id"] == "hb-stroke-01")["outcome"]
    assert outcome["data"]["theme"] == "emergency_referrals"
    assert outcome["data"]["response"] == "Call emergency services now. Do not wait for it to pass."  # graded without the tags
    store.close()
    graded = [r for r in server.requests if "criteria_met" in json.dumps(r.get("response_format") or {})]
    assert graded and all("[Panelist" not in user_texts(r)[0] for r in graded)
    seat_calls = [r for r in server.requests if r["model"] == "a" and not r.get("response_format")]
    assert any([m["role"] for m in r["messages"]] == ["system", "user", "assistant", "user"] for r in seat_calls)  # the chat itself
    pharmacist = [r for r in seat_calls if r["messages"][-1]["content"].startswith("Quick check: renal dosing")]  # its answer call
    assert pharmacist and all([m["role"] for m in r["messages"]] == ["system", "user"] for r in pharmacist)  # one system message
    assert all("You are assisting a hospital pharmacist." in r["messages"][0]["content"] for r in pharmacist)  # the conversation's own

    table = medpanel(["show", "hb", "--by", "theme"], {**cli_env, "COLUMNS": "200"})
    assert table.returncode == 0, table.stderr
    assert "theme = emergency_referrals" in table.stdout and "theme = context_seeking" in table.stdout
    by_theme = json.loads(medpanel(["show", "hb", "--by", "theme", "--json"], cli_env).stdout)["by"]["theme"]
    assert by_theme["emergency_referrals"]["healthbench"]["mean"] == 0.0  # mean(1/8, -1/2), clipped
    assert by_theme["context_seeking"]["healthbench"]["mean"] == pytest.approx(7 / 15)
    item = medpanel(["show", "hb", "--item", "hb-stroke-01"], {**cli_env, "COLUMNS": "200"})
    assert "met (+10 points): Tells the user to call emergency services" in item.stdout


def test_single_answers_the_conversation_and_judge_run_grades_it_afterwards(server, cli_env):
    seat = f"openai:a@{server.base_url}"
    proc = medpanel(["bench", DATASET, "--models", seat, "--run-id", "plain", "--json"], cli_env)
    assert proc.returncode == 0, proc.stderr
    assert not any(name.startswith("healthbench") for name in json.loads(proc.stdout)["scores"])  # no judge: nothing graded yet
    assert proc.stderr.count("warning: HealthBench conversations are graded by the rubric grader") == 1  # said once, not per item
    assert "--set judge=SPEC" in proc.stderr and "medpanel judge run plain --judge SPEC" in proc.stderr
    judged = medpanel(["judge", "run", "plain", "--judge", f"openai:j@{server.base_url}", "--max-tokens", "77", "--json"], cli_env)
    assert judged.returncode == 0, judged.stderr
    summary = json.loads(judged.stdout)["summary"]
    assert summary["healthbench"]["mean"] == pytest.approx(7 / 96) and summary["healthbench"]["n"] == 4
    graded = [r for r in server.requests if "criteria_met" in json.dumps(r.get("response_format") or {}) and r.get("max_tokens") == 77]
    assert len(graded) == 13  # --max-tokens is the grader's budget (grader_max_tokens) on a HealthBench run


def test_judge_run_on_a_multiple_choice_single_run_is_refused(cli_env, tmp_path):
    cases = tmp_path / "mcq.jsonl"
    cases.write_text(json.dumps({"id": "q", "question": "Q?", "options": {"A": "a", "B": "b"}, "reference": {"answer": "A"}}) + "\n")
    proc = medpanel(["bench", str(cases), "--models", "scripted:Answer: A", "--run-id", "mcq"], cli_env)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr  # no rubric: nothing the missing judge would have graded
    judged = medpanel(["judge", "run", "mcq", "--judge", "scripted:x"], cli_env)
    assert judged.returncode == 2 and "which no judge scores" in judged.stderr and "Traceback" not in judged.stderr
    assert "judge" not in json.loads(medpanel(["show", "mcq", "--json"], cli_env).stdout)["roles"]  # no judge recorded


def test_a_bad_or_missing_file_exits_2_naming_the_line(cli_env, tmp_path):
    bad = tmp_path / "hard.jsonl"
    lines = FIXTURE.read_text().splitlines()
    broken = json.loads(lines[1])
    del broken["rubrics"][2]["points"]
    bad.write_text(lines[0] + "\n" + json.dumps(broken) + "\n")
    proc = medpanel(["bench", f"healthbench:{bad}", "--models", "scripted:x"], cli_env)
    assert proc.returncode == 2 and f"{bad}:2: criterion 3 has no points" in proc.stderr and "Traceback" not in proc.stderr
    missing = medpanel(["bench", f"healthbench:{tmp_path / 'consensus.jsonl'}", "--models", "scripted:x"], cli_env)
    assert missing.returncode == 2 and "not shipped" in missing.stderr and "consensus_2025-05-09-20-00-46.jsonl" in missing.stderr
