"""Board Simulation (basic form): the meeting parser on hand-written responses, and the protocol end to end."""

from __future__ import annotations

import pytest

from medpanel.cases import load_case
from medpanel.models import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel, get_protocol
from medpanel.protocols.board import BoardSettings
from medpanel.runs.scoring import score_outcome

from conftest import ROOT


async def scored(spec, case, outcome, settings=None, roles=None):
    """The runner's scorer path after `run` (the judge's scores when a judge role is given)."""
    return await score_outcome(spec, case, outcome, roles or {}, settings or BoardSettings())

WELL_FORMED = """<discussion>
<turn 1> Moderator: A 69-year-old man with Grade Group 2 disease at the right base.
<turn 2> Urologist: He is a candidate for surgery.
<turn 3> Radiation Oncologist: Radiotherapy with short ADT is equivalent.
</discussion>
<conclusion>Offer prostatectomy or radiotherapy. Discuss with the patient.</conclusion>"""


async def test_board_protocol_records_turns_and_conclusion(tmp_path):
    case_file = tmp_path / "case.yaml"
    case_file.write_text("summary: A 69-year-old man with prostate cancer.\nslides: []\n")
    model = ScriptedModel([WELL_FORMED], runtime=Runtime())
    spec = get_protocol("board")
    outcome = await spec.run(load_case(case_file), Panel.of([model]), BoardSettings())
    assert outcome.answer.startswith("Offer prostatectomy")
    speakers = [e.speaker for e in outcome.transcript if e.kind == "turn" and e.phase == "discussion"]
    assert speakers == ["Moderator", "Urologist", "Radiation Oncologist"]
    # A text-only model is shown the slides as captions in the prompt.
    assert "No slide descriptions are available." in model.history[0].messages[-1].content
    # Every format component earns full credit (blocks, envelope, turn syntax, numbering 1..3, a
    # two-sentence conclusion, no outer whitespace), so format = 0.25 x 1 + 0.75 x 1 = 1.0.
    assert await scored(spec, load_case(case_file), outcome) == {"format": 1.0, "format_exact": 1.0, "has_conclusion": 1.0, "turns": 3.0}
    # With the real board's conclusion on file, ROUGE-L of the conclusion is scored too.
    case_file.write_text("summary: A 69-year-old man with prostate cancer.\nreference:\n  conclusion: Offer prostatectomy or radiotherapy.\n")
    scores = await scored(spec, load_case(case_file), outcome)
    # LCS = 4 words ("offer prostatectomy or radiotherapy"); candidate 8 words, reference 4: P = 4/8, R = 4/4, F1 = 2/3.
    assert scores["rouge_l"] == pytest.approx(2 / 3)


async def test_a_meeting_without_conclusion_scores_at_the_floor(tmp_path):
    case_file = tmp_path / "case.yaml"
    case_file.write_text("summary: A case.\nreference:\n  conclusion: Operate.\n")
    model = ScriptedModel(["The board talked for a while."], runtime=Runtime())
    spec = get_protocol("board")
    outcome = await spec.run(load_case(case_file), Panel.of([model]), BoardSettings(structured="never"))
    scores = await scored(spec, load_case(case_file), outcome)
    assert outcome.answer is None and outcome.data["parse_status"] == "raw_fallback"
    assert scores["rouge_l"] == 0.0 and scores["has_conclusion"] == 0.0 and scores["format"] < 0


async def test_structured_mode_renders_json_into_the_tag_format(tmp_path):
    case_file = tmp_path / "case.yaml"
    case_file.write_text("summary: A 61-year-old with stage IIIA lung adenocarcinoma.\n")
    meeting = {"turns": [{"role": "Moderator", "text": "Stage IIIA, N2."}, {"role": "Thoracic Surgeon", "text": "Resectable after induction."},
                         {"role": "Medical Oncologist", "text": "Chemo-immunotherapy first."}],
               "conclusion": "Give neoadjuvant chemo-immunotherapy. Restage, then lobectomy."}
    model = ScriptedModel([meeting], runtime=Runtime())
    outcome = await get_protocol("board").run(load_case(case_file), Panel.of([model]), BoardSettings(structured="always", frequency_penalty=0.2))
    assert outcome.data["parse_status"] == "parsed"
    assert outcome.answer == "Give neoadjuvant chemo-immunotherapy. Restage, then lobectomy."
    assert [e.speaker for e in outcome.transcript if e.phase == "discussion"] == ["Moderator", "Thoracic Surgeon", "Medical Oncologist"]
    request = model.history[0]
    assert request.schema["properties"]["turns"]["maxItems"] == 7 and request.frequency_penalty == 0.2
    # "auto" leaves a model that is not small on the paper's tag format.
    plain = ScriptedModel([WELL_FORMED], runtime=Runtime())
    await get_protocol("board").run(load_case(case_file), Panel.of([plain]), BoardSettings())
    assert plain.history[0].schema is None


async def test_judges_run_when_asked_and_their_scores_reach_the_scorer():
    """The judge sits behind a real HTTP server (the mock answers every schema with valid JSON)."""
    from medpanel.models import build_model
    from medpanel.testing import MockServer

    case = load_case(ROOT / "examples" / "prostate")
    with MockServer(reply="choice") as srv:
        model = ScriptedModel([WELL_FORMED], runtime=Runtime())
        judge = build_model(f"openai:judge@{srv.base_url}", Runtime())
        settings = BoardSettings(structured="never")
        spec = get_protocol("board")
        outcome = await spec.run(case, Panel.of([model], roles={"judge": judge}), settings)
        scores = await scored(spec, case, outcome, settings, roles={"judge": judge})
        requests = len(srv.requests)
        await judge.aclose()
    judged = {e.role: e.data for e in outcome.transcript if e.kind == "score"}
    assert set(judged) == {"conclusion_alignment", "four_decisions", "consistency"}
    assert all(r["status"] == "ok" for r in judged.values()), judged
    assert requests == 4  # alignment, decision scope, decision scores, consistency
    assert 1 <= scores["conclusion_alignment"] <= 5 and scores["judge_failed"] == 0.0
    assert [e.role for e in outcome.transcript if e.kind == "score"] == ["conclusion_alignment", "four_decisions", "consistency"]


async def test_bertscore_of_the_conclusion_when_asked(tmp_path):
    pytest.importorskip("bert_score", reason="BERTScore needs the text-metrics extra")
    case_file = tmp_path / "case.yaml"
    case_file.write_text("summary: A case.\nreference:\n  conclusion: Offer prostatectomy or radiotherapy. Discuss with the patient.\n")
    model = ScriptedModel([WELL_FORMED], runtime=Runtime())
    spec = get_protocol("board")
    settings = BoardSettings(structured="never", bertscore=True)
    outcome = await spec.run(load_case(case_file), Panel.of([model]), settings)
    scores = await scored(spec, load_case(case_file), outcome, settings)
    assert scores["bertscore_f1"] == pytest.approx(1.0, abs=1e-4)  # the conclusion is the reference, word for word
    note = next(e for e in outcome.transcript if e.kind == "score" and e.role == "bertscore_f1").data["note"]  # recorded by its scorer
    assert "not comparable" in note
    from medpanel.runs.summary import score_notes

    assert "not comparable" in score_notes({"bertscore_f1": [1.0]})[0] and score_notes({"rouge_l": [1.0]}) == []


def test_bench_over_the_example_cases_gives_per_case_scores_and_intervals(cli_env, tmp_path):
    import json
    import subprocess

    from conftest import MEDPANEL

    from medpanel.cases import load_dataset

    n = len(load_dataset(str(ROOT / "examples")))
    brief = "<discussion>\n<turn 1> Moderator: Brief.\n</discussion>\n<conclusion>Operate.</conclusion>"
    script = [WELL_FORMED if i % 2 == 0 else brief for i in range(n)]  # alternate, one reply per example case
    replies = tmp_path / "meetings.yaml"
    replies.write_text(json.dumps(script))
    proc = subprocess.run([MEDPANEL, "bench", "examples", "-p", "board", "-m", f"scripted:{replies}", "-c", "1", "--json"],
                          env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert n >= 2 and summary["items"]["done"] == n
    rouge = summary["scores"]["rouge_l"]
    assert rouge["n"] == n and rouge["low"] is not None and rouge["low"] <= rouge["mean"] <= rouge["high"]
    # Well-formed meetings (exact format) alternate with one-sentence conclusions (not exact).
    assert summary["scores"]["format_exact"]["mean"] == pytest.approx(script.count(WELL_FORMED) / n)
    shown = json.loads(subprocess.run([MEDPANEL, "show", summary["run_id"], "--by", "parse_status", "--json"], env=cli_env, cwd=ROOT,
                                      capture_output=True, text=True, timeout=60).stdout)
    assert set(shown["by"]["parse_status"]) <= {"parsed", "parsed_with_warnings"}


class _CutAtMaxTokens(ScriptedModel):
    """A scripted model whose server reports the cut as "max_tokens" (Anthropic-style gateways), not "length"."""

    async def generate(self, request):
        gen = await super().generate(request)
        return gen.model_copy(update={"finish_reason": "max_tokens"})


async def test_a_reply_cut_with_finish_reason_max_tokens_is_recorded_truncated_and_fails_closed(tmp_path):
    # Before: only finish_reason == "length" was checked, so a "max_tokens" cut scored 1.0 as a finished meeting.
    from medpanel.scoring.board_format import FormatSettings, score_format

    case_file = tmp_path / "case.yaml"
    case_file.write_text("summary: A 69-year-old man with prostate cancer.\nslides: []\n")
    spec = get_protocol("board")
    outcome = await spec.run(load_case(case_file), Panel.of([_CutAtMaxTokens([WELL_FORMED], runtime=Runtime())]), BoardSettings())
    assert outcome.data["truncated"] is True
    assert (await scored(spec, load_case(case_file), outcome))["format"] == -1.0
    fmt = score_format(outcome.data["raw"], settings=FormatSettings.for_preset("released_code"), truncated=outcome.data["truncated"])
    assert (fmt.failure, fmt.score) == ("truncated", -1.0)


def test_debate_and_consult_turns_cut_with_max_tokens_are_marked_truncated():
    from medpanel.models.base import Reply
    from medpanel.transcript import Transcript

    # Debate and consult (like every protocol) record their turns through the one recorder, Transcript.record.
    for reason, cut in (("max_tokens", True), ("length", True), ("stop", False)):
        reply = Reply(text="Answer: B because", finish_reason=reason, truncated=cut)
        assert bool(Transcript().record("turn", reply=reply, speaker="GPT", round=1, phase="debate", data={}).data.get("truncated")) is cut, reason
        assert bool(Transcript().record("turn", reply=reply, speaker="Doctor", role="physician", round=1, phase="ask").data.get("truncated")) is cut, reason
