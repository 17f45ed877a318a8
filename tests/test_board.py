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


# ---------------------------------------------------------------- a small model: the meeting turn by turn

from medpanel.cases import Case  # noqa: E402
from medpanel.models.base import REASONING_ALLOWANCE  # noqa: E402
from medpanel.protocols import board_small  # noqa: E402
from medpanel.scoring.form_checks import board_checks, recites_case, sentence_count  # noqa: E402

EXAMPLES = sorted(p for p in (ROOT / "examples").iterdir() if (p / "case.yaml").is_file())
PLAN = "The board recommends surgery after neoadjuvant therapy. The patient will be seen again in two weeks."


def asked_role(request) -> str | None:
    """The specialist a small-meeting call asks, or None for the closing."""
    user = request.messages[-1].content
    return None if "To close" in user else user.rsplit("Answer as the ", 1)[1].rstrip(".")


def own_sentence(role: str) -> str:
    return f"From the {role} side, the findings favour treatment."


def small_board(answer=None, plan=PLAN, **flags) -> ScriptedModel:
    """A scripted small model holding a turn-by-turn meeting: `answer(role, request)` is a specialist's
    sentences (default: one of its own), `plan` the closing (a dict is sent as it is)."""
    def respond(request):
        role = asked_role(request)
        if role is None:
            return plan if isinstance(plan, dict) else {"plan": plan}
        said = answer(role, request) if answer else [own_sentence(role)]
        return {"answer": said}
    return ScriptedModel(responder=respond, runtime=Runtime(), small=flags.pop("small", True), **flags)


def case_text(case) -> str:
    return "\n".join(p for p in (case.summary, case.slide_text(), case.question) if p)


def discussion(outcome) -> list[tuple[str, str]]:
    return [(e.role, e.text) for e in outcome.transcript if e.kind == "turn" and e.phase == "discussion"]


@pytest.mark.parametrize("case_dir", EXAMPLES, ids=lambda p: p.name)
async def test_a_small_model_holds_the_meeting_turn_by_turn(case_dir):
    case = load_case(case_dir)
    model = small_board()
    outcome = await get_protocol("board").run(case, Panel.of([model]), BoardSettings())
    turns = discussion(outcome)
    roles = [role for role, _ in turns[1:]]
    # The Moderator opens (by code: what is to be decided and who speaks, nothing of the case), then each
    # of the case's specialists once, so no one twice in a row; then the board's plan.
    assert turns[0][0] == "Moderator" and "management plan" in turns[0][1] and recites_case(turns[0][1], case_text(case)) == 0
    assert roles == board_small.board_roles(case) == outcome.data["roles"] and len(roles) == board_small.SPEAKERS
    assert all(a != b for a, b in zip(roles, roles[1:])) and "Moderator" not in roles
    assert outcome.answer == PLAN and sentence_count(outcome.answer) == 2 and outcome.answer.startswith("The board recommends")
    assert outcome.data["parse_status"] == "parsed" and outcome.data["structured"] == "turns"
    assert board_checks(turns, outcome.answer, case_text(case)).ok
    # Each question is the moderator's, recorded as a floor note for the specialist who answers it.
    floor = [e for e in outcome.transcript if e.phase == "floor"]
    assert [e.data["next_speaker"] for e in floor] == roles and all(e.text.startswith(f"{r}, what") for e, r in zip(floor, roles))
    # One prefix for the whole meeting (the system message with the case, one schema): the calls differ
    # only in their last message, so a model that keeps KV states reads the case once.
    assert len({r.messages[0].content for r in model.history}) == 1 and {r.schema_name for r in model.history} == {"BoardSay"}
    assert board_small.compact_case(case) in model.history[0].messages[0].content
    tails = [r.messages[-1].content for r in model.history]
    assert all(later.startswith(tails[i].split("\n\nModerator:")[0]) for i, later in enumerate(tails[1:-1], 1) if "Discussion" in tails[i])


def test_the_specialists_come_from_the_case():
    by_site = {load_case(p).metadata["cancer_site"]: board_small.board_roles(load_case(p)) for p in EXAMPLES}
    for path in EXAMPLES:
        case = load_case(path)
        assert board_small.site_of(case) == case.metadata["cancer_site"]
        stripped = case.model_copy(update={"metadata": {}})  # the site read from the case's own words
        assert board_small.site_of(stripped) == case.metadata["cancer_site"]
    assert {"Urologist", "Radiation Oncologist"} <= set(by_site["prostate"])
    assert "Thoracic Surgeon" in by_site["lung"] and "Gastroenterologist" in by_site["colorectal"]
    assert "Genetic Counselor" in by_site["pancreas"]  # a germline BRCA2 variant calls for one
    assert all(len(set(roles)) == len(roles) == 4 and "Moderator" not in roles for roles in by_site.values())
    # Roles the case names come first, matched to the catalogue's spelling; a case without site words gets a general team.
    named = Case(id="n", summary="A 70-year-old with a lung mass.", metadata={"specialists": ["geriatrician", "Thoracic Surgeon"]})
    assert board_small.board_roles(named)[:2] == ["Geriatrician", "Thoracic Surgeon"]
    plain = Case(id="p", summary="A 70-year-old with a new mass.")
    assert board_small.site_of(plain) is None and board_small.board_roles(plain) == list(board_small.GENERAL_TEAM[:4])
    assert board_small.board_roles(plain, 2, required=["Urologist", "Pathologist", "Geriatrician"]) == ["Urologist", "Pathologist", "Geriatrician"]
    assert "patient's cancer." in board_small.opening_text(plain, ["Radiologist"])


async def test_a_turn_that_repeats_the_meeting_is_asked_again_then_left_out():
    case = load_case(ROOT / "examples" / "prostate")
    first = "The lesion sits at the right base with no sign of spread beyond the gland."

    def answer(role, request):
        if role == "Radiologist":
            return [first]
        if role == "Pathologist":  # repeats the radiologist, then says something new when asked again
            again = request.messages[-1].content.split("Moderator: ")[-1].startswith("Pathologist, what is your recommendation")
            return ["Grade Group 2 cores support treating it with curative intent."] if again else [first]
        if role == "Urologist":  # a second sentence saying the first again is dropped, the first kept
            return ["Surgery is possible with nerve sparing on the left side.", "Surgery is possible with nerve sparing on both sides."]
        return [first, "The lesion sits at the right base with no sign of spread beyond the gland today."]  # always repeats

    model = small_board(answer)
    outcome = await get_protocol("board").run(case, Panel.of([model]), BoardSettings())
    turns = dict(discussion(outcome))
    assert turns["Pathologist"] == "Grade Group 2 cores support treating it with curative intent."
    assert turns["Urologist"] == "Surgery is possible with nerve sparing on the left side."
    assert "Radiation Oncologist" not in turns  # nothing new twice over: left out, on record as a note
    left_out = next(e for e in outcome.transcript if e.phase == "repeated")
    assert left_out.speaker == "Radiation Oncologist" and left_out.kind == "note" and left_out.data["dropped"]
    asked = [e for e in outcome.transcript if e.phase == "asked again"]
    assert [e.speaker for e in asked] == ["Pathologist", "Radiation Oncologist", "Radiation Oncologist"] and asked[0].text == first
    assert len(model.history) == 4 + 3 + 1  # four specialists; asked again: the pathologist once, the radiation oncologist twice; the plan
    questions = [r.messages[-1].content.split("Moderator: ")[-1].split("\n")[0] for r in model.history if asked_role(r) == "Radiation Oncologist"]
    assert questions == [board_small.question_for("Radiation Oncologist", n) for n in range(3)] and len(set(questions)) == 3
    assert board_checks(list(turns.items()), outcome.answer, case_text(case)).ok and outcome.data["parse_status"] == "parsed"


async def test_a_plan_in_the_wrong_shape_or_saying_itself_again_is_asked_again():
    case = load_case(ROOT / "examples" / "lung")
    plans = iter([{"answer": ["The board has heard everyone today."]},  # a turn's shape: asked under BoardPlan alone
                  {"plan": "The board recommends surgery for the right lobe tumour. The patient needs surgery for the right lobe tumour."},
                  {"plan": "The board recommends chemoradiotherapy. After that he is restaged with a new scan."}])

    def respond(request):
        role = asked_role(request)
        return next(plans) if role is None else {"answer": [own_sentence(role)]}

    model = ScriptedModel(responder=respond, runtime=Runtime(), small=True)
    outcome = await get_protocol("board").run(case, Panel.of([model]), BoardSettings())
    assert outcome.answer == "The board recommends chemoradiotherapy. After that he is restaged with a new scan."
    closing = [r for r in model.history if asked_role(r) is None]
    assert [r.schema_name for r in closing] == ["BoardSay", "BoardPlan", "BoardSay"]
    assert closing[-1].messages[-1].content.endswith(board_small.CLOSING[1])  # asked for the next step too
    assert board_small.names_option("The board recommends a lobectomy.") and not board_small.names_option("The board recommends rest.")


@pytest.mark.parametrize(("sentence", "loops"), [
    ("Surgical Oncologist, Surgical Oncologist, Surgical Oncologist.", True), ("Please, please, please.", True),
    ("Genetic Counselor, Genetic Testing, Genetic Testing, Genetic CtG.", True),
    ("The imaging shows a 3.4 cm mass in the right upper lobe.", False), ("Surgery first, then radiotherapy to the bed.", False),
])
def test_a_sentence_saying_a_word_pair_twice_loops(sentence, loops):
    assert board_small.loops_on_words(sentence) is loops


def test_a_sentence_that_stops_mid_phrase_is_dropped():
    said = ["The biopsy shows Grade Group 2 in three cores.", "The patient is now on a regimen, and the next step is."]
    assert board_small.fresh_sentences(said, []) == said[:1]


@pytest.mark.parametrize(("sentence", "echo"), [
    ("Pathologist, what do the pathology findings suggest about the cancer.", True),
    ("The Pathologist. The cores show Grade Group 2.", True),
    ("The urologist, what do the findings show.", True),  # asks the question back, whoever it names
    ("The pathology findings show Grade Group 2 in three cores.", False),  # shares the question's topic, answers it
    ("Grade Group 2 cancer in three of twelve cores.", False),
    ("The pathologist examines the cores and finds Grade Group 2.", False),  # speaks of itself: an answer
])
def test_a_sentence_that_gives_the_question_back_is_an_echo(sentence, echo):
    assert board_small.echoes_question(sentence, board_small.question_for("Pathologist"), "Pathologist") is echo


def test_the_grammar_allows_only_bounded_sentences():
    import re

    sentence, plan = board_small.SENTENCE, board_small.PLAN["properties"]["plan"]
    ok = ["The imaging shows a 3.4 cm mass (T2), with one abnormal node.", "PSA 9.4 ng/mL, Gleason 3+4, PD-L1 55% in tumour cells."]
    bad = ["the findings are as follows: 1.1, 2.1.", "Is surgery an option?", "A list e,e,e of things.", "Ends without a stop",
           "Runs of dots 1.1.1 are out."]
    assert all(re.search(sentence["pattern"], s) for s in ok) and not any(re.search(sentence["pattern"], s) for s in bad)
    assert 10 <= sentence["minLength"] and sentence["maxLength"] <= 160 and board_small._TURN["properties"]["answer"]["maxItems"] == 2
    assert re.search(plan["pattern"], PLAN) and not re.search(plan["pattern"], "The board recommends surgery. The board recommends surgery.")
    assert not re.search(plan["pattern"], "We recommend surgery. The patient agrees with it.")


def test_a_plan_opens_with_one_of_its_site_s_options():
    import re

    prostate = board_small.meeting_schemas("prostate")[1]["properties"]["plan"]["pattern"]
    assert re.search(prostate, "The board recommends active surveillance for his GG2 tumour. He has a PSA test in six months.")
    assert re.search(prostate, "The board recommends radical prostatectomy. If margins are positive, radiotherapy follows.")
    assert re.search(prostate, "The board recommends surgery, with nerve sparing. The patient is seen again in a week.")  # any board's option
    assert not re.search(prostate, "The board recommends a surgical mastectomy. The patient goes home the same day.")
    assert not re.search(prostate, "The board recommends lobectomy. He has a scan in three months.")  # another site's
    assert "lobectomy" in board_small.menu_for("lung") and "lobectomy" not in board_small.menu_for(None)
    assert all(board_small.names_option(f"The board recommends {o}.") for site in [None, *board_small.MENUS] for o in board_small.menu_for(site))


async def test_a_meeting_sends_its_site_s_plan_schema():
    case = load_case(ROOT / "examples" / "prostate")
    model = small_board(plan="The board recommends active surveillance with MRI. He has a PSA test in six months.")
    outcome = await get_protocol("board").run(case, Panel.of([model]), BoardSettings())
    say = board_small.meeting_schemas("prostate")[0]
    assert board_small.site_of(case) == "prostate" and all(r.schema == say for r in model.history)
    assert outcome.answer.startswith("The board recommends active surveillance")


@pytest.mark.parametrize(("flags", "settings", "expected"), [
    ({"small": True}, {}, {"BoardSay": {100, 200}}),  # 600 for the meeting: a share for each of 4 turns, two for the plan
    ({"small": True}, {"max_tokens": 300}, {"BoardSay": {50, 100}}),  # an explicit budget is shared out the same way
    ({"small": False}, {}, {"text": {4096}}),
    ({"small": False, "reasoning": True}, {}, {"text": {4096 + REASONING_ALLOWANCE}}),
    ({"small": False}, {"max_tokens": 300}, {"text": {300}}),
    ({"small": True}, {"structured": "always"}, {"WrittenMeeting": {600}}),
])
async def test_the_written_board_budget_fits_the_seat_on_each_path(flags, settings, expected):
    model = small_board(**flags) if settings.get("structured") != "always" else ScriptedModel(
        [{"turns": [{"role": "Moderator", "text": "Stage IIIA."}] * 3, "conclusion": "Operate. Then review."}], runtime=Runtime(), **flags)
    if not flags["small"]:
        model.enqueue(WELL_FORMED)
    await get_protocol("board").run(load_case(ROOT / "examples" / "prostate"), Panel.of([model]), BoardSettings(**settings))
    sent: dict[str, set[int]] = {}
    for request in model.history:
        sent.setdefault(request.schema_name if request.schema else "text", set()).add(request.max_tokens)
    assert sent == expected


async def test_structured_turns_takes_any_model_turn_by_turn():
    model = small_board(small=False)
    outcome = await get_protocol("board").run(load_case(ROOT / "examples" / "breast"), Panel.of([model]), BoardSettings(structured="turns"))
    assert outcome.data["structured"] == "turns" and outcome.data["parse_status"] == "parsed" and len(discussion(outcome)) == 5


@pytest.mark.parametrize(("sentence", "lists"), [
    ("The board recommends active surveillance, radical prostatectomy, brachytherapy and systemic therapy.", True),
    ("The board recommends radical prostatectomy, then radiotherapy with hormone therapy if margins are positive.", False),
    ("The board recommends breast-conserving surgery with radiotherapy to the breast.", False),  # one option inside another
])
def test_a_recommendation_naming_most_of_the_menu_is_a_copied_list(sentence, lists):
    site = "breast" if "breast" in sentence else "prostate"
    assert board_small.lists_options(sentence, board_small.menu_for(site)) is lists


LISTED_PLAN = "The board recommends active surveillance, radical prostatectomy, brachytherapy and surgery. He is seen in a month."


async def small_board_planning(*plans: str):
    """The prostate board on a small scripted model whose plan attempts are `plans`, in order."""
    queue = iter({"plan": plan} for plan in plans)

    def respond(request):
        role = asked_role(request)
        return next(queue) if role is None else {"answer": [own_sentence(role)]}

    case = load_case(ROOT / "examples" / "prostate")
    return await get_protocol("board").run(case, Panel.of([ScriptedModel(responder=respond, runtime=Runtime(), small=True)]), BoardSettings())


async def test_a_plan_that_copies_the_menu_is_asked_again():
    chosen = "The board recommends radical prostatectomy with nerve sparing. He is seen in a month."
    assert (await small_board_planning(LISTED_PLAN, chosen)).answer == chosen


async def test_when_both_plans_fail_the_one_meeting_more_checks_is_kept():
    dangling = "The board recommends active surveillance, radical prostatectomy, brachytherapy and surgery. He is then on the."
    assert (await small_board_planning(LISTED_PLAN, dangling)).answer == LISTED_PLAN  # lists the menu; the second also stops mid-phrase, so it meets fewer checks
