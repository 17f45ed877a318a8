"""What a newcomer trips on: exit codes of the one-case commands, stores created by accident, messages."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import MEDPANEL, ROOT
from medpanel.testing.process import mock_server_process

NOTE = """Chief Complaint:
Fever and right flank pain

History of Present Illness:
A 34-year-old woman with three days of fever to 39.4 C, dysuria and right flank pain.

Discharge Diagnosis:
Acute pyelonephritis
"""


def medpanel(args, env, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([MEDPANEL, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, **kw)


@pytest.fixture(scope="module")
def mock():
    with mock_server_process() as server:
        yield server


@pytest.fixture
def no_replies(mock):
    """A model the server does not have (a 404, not retried): every call fails, so the item fails."""
    return f"openai:missing@{mock.base_url}"


@pytest.mark.parametrize("as_json", [False, True])
def test_a_board_whose_item_failed_exits_4(cli_env, no_replies, as_json):
    proc = medpanel(["board", "examples/lung", "-m", no_replies] + (["--json"] if as_json else []), cli_env)
    assert proc.returncode == 4, proc.stderr
    assert "missing" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("as_json", [False, True])
def test_a_debate_whose_item_failed_exits_4(cli_env, no_replies, as_json):
    proc = medpanel(["debate", "-q", "Which?", "-o", "A=yes", "-o", "B=no", "-m", f"{no_replies},{no_replies}"]
                    + (["--json"] if as_json else []), cli_env)
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr
    if as_json:
        assert json.loads(proc.stdout)["item"]["status"] == "failed"


def test_a_consult_whose_item_failed_exits_4(cli_env, no_replies, tmp_path):
    note = tmp_path / "note.txt"
    note.write_text(NOTE)
    proc = medpanel(["consult", str(note), "--physician", no_replies], cli_env)
    assert proc.returncode == 4, proc.stderr
    assert "The consult failed" in proc.stderr and "Traceback" not in proc.stderr


def test_an_osce_whose_item_failed_exits_4(cli_env, no_replies, shared_data):
    proc = medpanel(["osce", "agentclinic:0", "--patient", no_replies, "-m", no_replies], cli_env)
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr


def test_read_only_commands_never_create_a_store(cli_env, tmp_path):
    path = tmp_path / "cli.db"
    for args in (["show", "last"], ["runs"], ["runs", "--json"]):
        proc = medpanel(args, cli_env)
        assert proc.returncode in (0, 2), proc.stderr
        assert "Traceback" not in proc.stderr
        assert not path.exists(), args
    assert "No runs yet" in medpanel(["runs"], cli_env).stdout


def test_a_typo_in_store_folder_is_refused_and_a_new_store_announced(cli_env, tmp_path):
    typo = tmp_path / "rns" / "s.db"
    proc = medpanel(["chat", "scripted:echo", "hi", "--store", str(typo)], cli_env)
    assert proc.returncode == 2 and "does not exist" in proc.stderr and not typo.parent.exists()
    fresh = tmp_path / "new.db"
    proc = medpanel(["chat", "scripted:echo", "hi", "--store", str(fresh)], cli_env)
    assert proc.returncode == 0, proc.stderr
    assert f"Created a new store: {fresh}" in proc.stderr
    again = medpanel(["chat", "scripted:echo", "hi", "--store", str(fresh)], cli_env)
    assert "Created a new store" not in again.stderr


def test_the_budget_cap_is_said_once_with_the_real_flag_and_the_run_id(cli_env, shared_data):
    proc = medpanel(["bench", "medqa", "-m", "scripted:Answer: A", "--limit", "5", "-c", "1", "--max-tokens-total", "20", "--run-id", "capped"], cli_env)
    assert proc.returncode == 3, proc.stderr
    both = proc.stdout + proc.stderr
    assert both.count("Budget cap reached") == 1, both
    assert "--max-tokens-total" in both and "--max-tokens " not in both
    assert "RUN_ID" not in both and "--resume capped" in both


def test_the_local_model_hint_appears_only_when_a_seat_is_local(cli_env):
    proc = medpanel(["board", "examples/lung", "-m", "scripted:Fine."], cli_env)
    assert proc.returncode == 0, proc.stderr
    assert "Tumor board on" in proc.stderr and "loads the model" not in proc.stderr
    debate = medpanel(["debate", "-q", "Which?", "-o", "A=yes", "-o", "B=no", "-m", "scripted:Answer: A,scripted:Answer: A"], cli_env)
    assert debate.returncode == 0, debate.stderr
    assert "loads" not in debate.stderr


def test_loads_local_names_only_local_specs():
    from medpanel.cli.core import loads_local

    assert loads_local("local") and loads_local("scripted:x", "Radiologist=local?n_ctx=4096")
    assert loads_local("scripted:x", None, "openai:gpt-4o-mini") == ""


@pytest.mark.parametrize("command", [["consult", "CASE", "--physician", "scripted:x"], ["consult", "CASE", "--physician", "scripted:x", "--json"],
                                     ["osce", "CASE", "--patient", "scripted:x", "-m", "scripted:y"],
                                     ["osce", "CASE", "--patient", "scripted:x", "-m", "scripted:y", "--json"]])
def test_a_case_without_the_field_its_protocol_needs_exits_2(cli_env, tmp_path, command):
    case = tmp_path / "case.yaml"
    case.write_text("id: c1\nsummary: A patient with a cough.\n")
    proc = medpanel([str(case) if a == "CASE" else a for a in command], cli_env)
    assert proc.returncode == 2, proc.stderr
    assert "cannot run the" in proc.stderr and "Traceback" not in proc.stderr


def test_at_80_columns_ids_specs_and_paths_are_never_cut(cli_env, tmp_path):
    env = {**cli_env, "COLUMNS": "80", "MEDPANEL_STORE": str(tmp_path / "a-rather-long-folder-name-for-the-store" / "medpanel.db")}
    (tmp_path / "a-rather-long-folder-name-for-the-store").mkdir()
    case = tmp_path / "q.yaml"
    case.write_text("id: q1\nquestion: Which?\noptions: {A: aspirin, B: heparin}\nreference: {answer: A}\n")
    for run_id in ("20261201-101010-abcd", "a-long-run-id-that-someone-chose-by-hand"):
        assert medpanel(["bench", str(case), "-m", "scripted:Answer: A", "--run-id", run_id], env).returncode == 0
    runs = medpanel(["runs"], env).stdout
    assert "20261201-101010-abcd" in runs and "a-long-run-id-that-someone-chose-by-hand" in runs and "…" not in runs
    models = medpanel(["models"], env).stdout
    assert "…" not in models
    info = medpanel(["info"], env).stdout
    assert env["MEDPANEL_STORE"] in info


def test_json_mode_still_shows_progress_on_stderr(cli_env, tmp_path):
    debate = medpanel(["debate", "-q", "Which?", "-o", "A=yes", "-o", "B=no", "-m", "scripted:Answer: A,scripted:Answer: B", "--json"], cli_env)
    assert debate.returncode == 0, debate.stderr
    json.loads(debate.stdout)  # stdout stays pure JSON
    assert debate.stderr.count("… turn") >= 2, debate.stderr
    bench = medpanel(["bench", "examples", "-p", "board", "-m", "scripted:Fine.", "-c", "1", "--json"], cli_env)
    assert bench.returncode == 0, bench.stderr
    json.loads(bench.stdout)
    assert "items 5/5 · done 5" in bench.stderr


def test_replay_prints_disagreements_as_lines_not_raw_dicts(cli_env, shared_data, tmp_path):
    import shutil
    import subprocess

    from conftest import MEDPANEL, ROOT

    for name in ("case_363.txt", "case_116.txt", "case_0.txt"):  # a mislabelled round, a claimed initial consensus
        shutil.copy(shared_data / "mcc_logs" / "MedQA" / name, tmp_path / name)
    proc = subprocess.run([MEDPANEL, "replay", "mcc", str(tmp_path)], env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "round summary disagreements case_363" in " ".join(proc.stdout.split())
    assert "{'" not in proc.stdout
