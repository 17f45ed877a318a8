"""The options every model-calling command shares are bound once (cli.common.RunOptions), read from the same
MEDPANEL_ variables everywhere; `--max-tokens` has one variable per command where its meaning differs; and
the roles a command is given (here the board's --judge) are recorded with its run (issue 10, item 6)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import typing

import pytest
import typer

from conftest import MEDPANEL, ROOT
from medpanel.cli import app
from medpanel.cli.common import RunOptions
from medpanel.runs.store import Store
from medpanel.testing.process import mock_server_process

NOTE = """Chief Complaint:
Fever and right flank pain

History of Present Illness:
A 34-year-old woman with three days of fever, dysuria and right flank pain.

Discharge Diagnosis:
Acute pyelonephritis
"""
ANSWER = 'scripted:{"answer": "Radiotherapy alone."}'
MEETING = ("<discussion>\n<turn 1> Moderator: A man with prostate cancer.\n<turn 2> Radiologist: One lesion on MRI.\n"
           "<turn 3> Radiation Oncologist: Radiotherapy fits.\n</discussion>\n<conclusion>Offer radiotherapy without ADT.</conclusion>")

# Every command that calls a model: how to run it once, and the variable its --max-tokens reads (None: no such option).
COMMANDS = {
    "chat": (["chat", "scripted:echo", "hi"], "MEDPANEL_CHAT_MAX_TOKENS"),
    "bench": (["bench", "examples/prostate", "-p", "board", "-m", "scripted:Fine."], None),
    "board": (["board", "examples/prostate", "-m", "scripted:Fine."], "MEDPANEL_BOARD_MAX_TOKENS"),
    "ask": (["ask", "examples/prostate", "What next?", "--role", "Radiation Oncologist", "-m", ANSWER], "MEDPANEL_ASK_MAX_TOKENS"),
    "debate": (["debate", "-q", "Which?", "-o", "A=yes", "-o", "B=no", "-m", "scripted:Answer: A,scripted:Answer: B"], "MEDPANEL_DEBATE_MAX_TOKENS"),
    "osce": (["osce", "agentclinic:0", "--patient", "scripted:It hurts.", "-m", "scripted:x"], "MEDPANEL_OSCE_MAX_TOKENS"),
    "consult": (["consult", "NOTE", "--physician", "scripted:echo"], "MEDPANEL_CONSULT_MAX_TOKENS"),
    "summarize": (["summarize", "RUN", "--model", "scripted:A summary."], "MEDPANEL_SUMMARY_MAX_TOKENS"),
    "judge equivalence": (["judge", "equivalence", "--case", "examples/prostate", "--candidate", "SBRT alone.", "--judge", "scripted:echo"],
                          "MEDPANEL_JUDGE_MAX_TOKENS"),
    "judge board": (["judge", "board", "--case", "examples/prostate", "--response", MEETING, "--judge", "scripted:echo"], "MEDPANEL_JUDGE_MAX_TOKENS"),
    "judge run": (["judge", "run", "RUN", "--judge", "scripted:echo"], "MEDPANEL_JUDGE_MAX_TOKENS"),
    "score healthbench-meta": (["score", "healthbench-meta", "tests/fixtures/healthbench/meta.jsonl", "--judge", "scripted:echo"],
                               "MEDPANEL_JUDGE_MAX_TOKENS"),
}
# Commands that store their work as a run, and the setting their --max-tokens becomes.
STORED_SETTING = {"board": "max_tokens", "ask": "max_tokens", "debate": "max_tokens", "osce": "max_tokens", "consult": "max_tokens"}


def medpanel(args, env) -> subprocess.CompletedProcess:
    return subprocess.run([MEDPANEL, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)


def command(name: str):
    node = typer.main.get_command(app)
    for part in name.split():
        node = node.commands[part]
    return node


def _all_commands(group, prefix: str = ""):
    for name, sub in getattr(group, "commands", {}).items():
        if hasattr(sub, "commands"):
            yield from _all_commands(sub, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", sub


def shared_options() -> dict[str, tuple[str, str, str]]:
    """RunOptions' fields as declared: name -> (flag, variable, help)."""
    hints = typing.get_type_hints(RunOptions, include_extras=True)
    declared = {}
    for field in dataclasses.fields(RunOptions):
        info = hints[field.name].__metadata__[0]
        declared[field.name] = (info.default, info.envvar, info.help)
    return declared


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """One store for the module (as cli_env, shared so the runs below are made once)."""
    import os

    from medpanel.cases import data_dir

    folder = tmp_path_factory.mktemp("options")
    return dict(os.environ, MEDPANEL_STORE=str(folder / "cli.db"), PYTHONUNBUFFERED="1", MEDPANEL_DATA_DIR=os.environ.get("MEDPANEL_DATA_DIR", str(data_dir())))


@pytest.fixture(scope="module")
def prepared(env, tmp_path_factory):
    """The arguments of every command made concrete: a note file, and stored runs to summarise and to judge."""
    cli_env = env
    note = tmp_path_factory.mktemp("note") / "note.txt"
    note.write_text(NOTE)
    assert medpanel(["debate", "-q", "Which?", "-o", "A=yes", "-o", "B=no", "-m", "scripted:Answer: A,scripted:Answer: A",
                     "--json"], cli_env).returncode == 0
    debated = json.loads(medpanel(["show", "last", "--json"], cli_env).stdout)["run_id"]
    asked = medpanel(["bench", "examples/prostate", "-p", "specialist", "-m", ANSWER, "--run-id", "spec", "--json"], cli_env)
    assert asked.returncode == 0, asked.stderr

    def args(name: str) -> list[str]:
        given = COMMANDS[name][0]
        run = "spec" if name == "judge run" else debated
        return [str(note) if a == "NOTE" else run if a == "RUN" else a for a in given]

    return args


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_run_command_takes_the_shared_options_and_their_variables(name, prepared, env, shared_data):
    params = {p.name: p for p in command(name).params}
    for field, (flag, envvar, help_text) in shared_options().items():
        param = params.get(field)
        assert param is not None and param.opts[0] == flag, f"{name} lacks {flag}"
        assert param.envvar == envvar and param.help == help_text, f"{name} {flag} is declared apart from RunOptions"
    # Bound, not only declared: a cap from the environment stops the command before its first call (exit 3).
    proc = medpanel(prepared(name), dict(env, MEDPANEL_MAX_CALLS="0"))
    assert proc.returncode == 3, f"{name}: {proc.stdout}\n{proc.stderr}"
    assert "Budget cap reached: calls limit 0" in proc.stderr and "Traceback" not in proc.stderr


def test_max_tokens_has_its_own_variable_wherever_its_meaning_differs():
    readers: dict[str, set[str]] = {}
    root = typer.main.get_command(app)
    for name, node in _all_commands(root):
        for param in node.params:
            if "--max-tokens" in param.opts:
                readers.setdefault(param.envvar, set()).add(name)
    assert {name: envvar for name, (_, envvar) in COMMANDS.items() if envvar} == {
        name: envvar for envvar, names in readers.items() for name in names}
    assert "MEDPANEL_MAX_TOKENS" not in readers
    # One meaning per variable: only the judge commands (tokens per judge reply) share theirs.
    assert {envvar: names for envvar, names in readers.items() if len(names) > 1} == {
        "MEDPANEL_JUDGE_MAX_TOKENS": {"judge equivalence", "judge board", "judge run", "score healthbench-meta"}}


@pytest.mark.parametrize("name", list(STORED_SETTING))
def test_a_commands_max_tokens_variable_affects_that_command_only(name, prepared, env, tmp_path, shared_data):
    # Every command's variable is set, each to its own value; the command stores only its own.
    values = {envvar: str(100 + 7 * i) for i, envvar in enumerate(sorted({v for _, v in COMMANDS.values() if v}))}
    values["MEDPANEL_MAX_TOKENS"] = "999"  # the old shared variable means nothing now
    store = tmp_path / "tokens.db"
    proc = medpanel([*prepared(name), "--store", str(store)], dict(env, MEDPANEL_MAX_CALLS="0", **values))
    assert proc.returncode == 3, proc.stderr  # the run is stored (with its settings) before the cap stops it
    db = Store(store, create=False)
    try:
        (run,) = db.list_runs()
        settings = db.get_run(run["id"])["settings"]["settings"]
    finally:
        db.close()
    assert settings[STORED_SETTING[name]] == int(values[COMMANDS[name][1]]), settings


def test_board_judge_is_recorded_in_the_runs_roles_and_shown(cli_env):
    with mock_server_process("--reply", "choice") as mock:
        judge = f"openai:judge@{mock.base_url}"
        proc = medpanel(["board", "examples/prostate", "-m", f"scripted:{MEETING}", "--judge", judge], cli_env)
        assert proc.returncode == 0, proc.stderr
        assert "judges: " in proc.stdout  # the judges' scores, printed with the meeting
    shown = json.loads(medpanel(["show", "last", "--json"], cli_env).stdout)
    assert shown["roles"]["judge"] == judge
    assert shown["scores"]["conclusion_alignment"]["n"] == 1
    text = medpanel(["show", "last"], cli_env).stdout
    assert f"judge {judge}" in text  # `show` names every role with its model


def test_ask_is_stored_as_a_run_that_show_displays(cli_env):
    proc = medpanel(["ask", "examples/prostate", "What next?", "--role", "Radiation Oncologist", "-m", ANSWER], cli_env)
    assert proc.returncode == 0, proc.stderr
    assert "Radiotherapy alone." in proc.stdout  # the answer, printed as ever
    shown = json.loads(medpanel(["show", "last", "--json"], cli_env).stdout)
    assert shown["protocol"] == "specialist" and shown["items"]["done"] == 1
    assert shown["scores"]["answered"]["mean"] == 1.0
    events = json.loads(medpanel(["show", "last", "--item", "prostate-gg2-right-base", "--json"], cli_env).stdout)
    assert any(e["kind"] == "decision" and e["text"] == "Radiotherapy alone." for e in events)
    assert "specialist" in medpanel(["show", "last"], cli_env).stdout


def test_bench_refuses_a_typed_address_for_a_local_run_but_not_its_variable_left_set(cli_env):
    env = cli_env | {"MEDPANEL_RAY_ADDRESS": "10.0.0.1:6379"}
    # Typed with the local executor: refused, even when it equals the variable (the check once compared values).
    typed = medpanel(["bench", "examples/prostate", "-p", "specialist", "-m", ANSWER, "--address", "10.0.0.1:6379"], env)
    assert typed.returncode == 2 and "only --executor ray uses" in typed.stderr and "Traceback" not in typed.stderr, typed.stderr
    # The variable alone is not the user's doing for this run: it runs locally.
    left_set = medpanel(["bench", "examples/prostate", "-p", "specialist", "-m", ANSWER, "--json"], env)
    assert left_set.returncode == 0, left_set.stderr
    assert json.loads(left_set.stdout)["status"] == "done", left_set.stdout[-2000:]
