"""OSCE diagnostic dialogue (MCC): a panel of doctors takes a patient's history together, then diagnoses.

    opening    the patient greets the doctor and says why they came
    per patient message, the moderator triages (at most max_exchanges + max_direct_replies times):
      direct    a greeting, thanks or small talk: the moderator answers it itself (at most
                max_direct_replies times; past that, or with an empty reply, the panel deliberates)
      history   the panel deliberates the next questions: each doctor proposes up to max_questions,
                the proposals go through the scored review-and-revise cycle of the long-form debate
                with a fourth dimension, readability; the moderator merges the final lists (no new
                questions, each question credited to its proposers) and puts them to the patient
      diagnose  enough history (honoured only after at least one history exchange)
      after max_exchanges history exchanges the panel diagnoses without asking the moderator
    diagnosis  each doctor gives a primary diagnosis, differentials and reasoning; the moderator
               judges whether the primaries name the same condition; if not, the doctors see each
               other's views and reconsider, up to max_diagnosis_rounds times; without agreement the
               moderator's pick of the diagnosis most doctors hold stands ("majority"); the
               differentials are merged by the moderator
    evaluation is not part of the protocol: the runner hands the outcome to the OSCE judge scorer
               (medpanel.scoring.osce.OSCE_JUDGE, the panel's `judge` role), which checks the dialogue
               against the scenario and gives PICR, PRQR, PDA and SDA; run without a judge, the
               dialogue is held and those four are simply not produced

The doctors are the panel's seats; the patient, moderator and judge are its roles (`patient`,
`moderator`, `judge`), built and recorded by the runner (defaults: the embedded model plays the
patient, the first seat's model moderates, the moderator's model judges). The patient is a model
shown only the scenario's patient-actor record (it answers "I don't know" to anything outside it) or a
person (the role `human:Patient`). The doctors never see the scenario, only the dialogue (and, with
reveal_findings, the examination and test results before they diagnose). Prompts call the doctors
"Panelist 1", "Panelist 2"... never by their seat names (model specs, server URLs included).

Token budgets when not set (small model, e.g. the embedded one / any other; a reasoning model gets
REASONING_ALLOWANCE more): `max_tokens` (proposals, revisions, merges, diagnoses) 600 / 1024,
`review_max_tokens` (reviews, the moderator's triage, the judge's checks) 512 / 1024, `patient_max_tokens` 200 / 512.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, create_model

from medpanel.cases.model import Case
from medpanel.context import RunContext, quiet
from medpanel.errors import UsageError
from medpanel.models.base import Model, Reply
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec, gather_seats, seat_labels
from medpanel.protocols.longform import CritiqueSettings, Deliberation, QuestionsReview, critique_cycle
from medpanel.scoring.metrics import PROPORTION
from medpanel.scoring.osce import JUDGE_BUDGET, OSCE_JUDGE, numbered
from medpanel.scoring.scorer import pure
from medpanel.transcript import Transcript


class OsceSettings(CritiqueSettings):
    budgets: ClassVar[dict[str, tuple[int, int]]] = {
        "max_tokens": (600, 1024), "review_max_tokens": JUDGE_BUDGET, "patient_max_tokens": (200, 512)}

    max_exchanges: int = Field(default=5, ge=1, le=50)  # history-taking rounds of questions put to the patient
    max_direct_replies: int = Field(default=3, ge=0, le=20)  # greetings and small talk the moderator answers itself
    max_questions: int = Field(default=5, ge=1, le=15)  # per list, proposed or merged
    max_diagnosis_rounds: int = Field(default=3, ge=0, le=10)  # reconsiderations after the first diagnoses
    max_differentials: int = Field(default=5, ge=0, le=10)
    max_tokens: int | None = Field(default=None, ge=16)  # proposals, revisions, merges, diagnoses; None: fit the seat
    patient_max_tokens: int | None = Field(default=None, ge=8)
    reveal_findings: bool = False  # show the doctors the examination and test results before they diagnose


# ---------------------------------------------------------------- schemas
# No field descriptions: small models copy them into their answers. The prompts say what each field is.

Line = Annotated[str, Field(min_length=1, max_length=200)]
Name = Annotated[str, Field(min_length=1, max_length=150)]


@cache
def question_schemas(n: int) -> tuple[type[BaseModel], type[BaseModel], type[BaseModel]]:
    """(proposal, revision, merged list) schemas allowing at most n questions."""
    questions = (list[Line], Field(min_length=1, max_length=n))
    proposal = create_model("QuestionSet", questions=questions, rationale=(str, Field(max_length=300)))
    revision = create_model("RevisedQuestions", critique_summary=(str, Field(max_length=600)), questions=questions)
    credited = create_model("CreditedQuestion", question=(Line, ...), proposed_by=(list[Name], Field(max_length=12)))
    merged = create_model("ConsolidatedQuestions", questions=(list[credited], Field(min_length=1, max_length=n)))
    return proposal, revision, merged


@cache
def diagnosis_schemas(k: int) -> tuple[type[BaseModel], type[BaseModel]]:
    """(one doctor's opinion, the moderator's judgement) schemas allowing k differentials per doctor."""
    opinion = create_model("DiagnosisOpinion", primary_diagnosis=(Name, ...),
                           differentials=(list[Name], Field(max_length=k)), reasoning=(str, Field(max_length=600)))
    judgement = create_model("DiagnosisJudgement", same=(bool, ...), diagnosis=(Name, ...),
                             differentials=(list[Name], Field(max_length=max(2 * k, 1))))
    return opinion, judgement


class Triage(BaseModel):
    action: Literal["direct", "history", "diagnose"]
    reply: str = Field(default="", max_length=300)


# ---------------------------------------------------------------- prompts

PATIENT_SYSTEM = (
    "You are playing a patient in a clinical skills examination. Stay in character and talk to the doctor the "
    "way a patient would: plain everyday words, short answers. Use only the facts in your role description "
    "below. If the doctor asks about anything your role description does not cover, say \"I don't know.\" "
    "Never name a diagnosis and never mention a role description.\n\nYOUR ROLE DESCRIPTION:\n{actor}"
)
OPENING = "(The consultation begins. Greet the doctor and say in a sentence or two why you have come.)"

TRIAGE_SYSTEM = (
    "You moderate a panel of physicians in a consultation with a patient. Read the patient's latest message and "
    "choose what happens next:\n"
    "- 'direct': the message is only a greeting, thanks or small talk, with nothing clinical to work on; write a "
    "short friendly reply yourself in 'reply'.\n"
    "- 'history': the panel should work out the next questions to ask the patient.\n"
    "- 'diagnose': the history gathered so far is enough to make a diagnosis.\n"
    "Leave 'reply' empty unless you choose 'direct'."
)

PROPOSE_SYSTEM = (
    "You are {seat}, a physician on a panel that takes a patient's history together. Propose the next questions "
    "to ask: at most {n}, each short and in plain words, about what is still unknown and matters for the "
    "diagnosis. Do not ask again what the patient has already told. Add a one-sentence rationale."
)

MERGE_SYSTEM = (
    "You moderate a panel of physicians taking a patient's history. Merge their question lists into one list of at "
    "most {n} questions to put to the patient: drop duplicates, keep the most useful, word them plainly, and add no "
    "question of your own. For each question, list in 'proposed_by' the panel members who proposed it, using "
    "exactly these names: {names}."
)

DIAGNOSE_SYSTEM = (
    "You are {seat}, a physician on a diagnostic panel. From the consultation below, give your primary (most "
    "likely) diagnosis, up to {k} differential diagnoses, and your reasoning in two or three sentences."
)
RECONSIDER = (
    "Your colleagues' current views:\n{views}\n\nYour current view: {own}\n\nReconsider. Keep your diagnosis if you "
    "still judge it best; change it only if their reasoning convinces you on clinical grounds."
)
JUDGEMENT_SYSTEM = (
    "You moderate a diagnostic panel. Decide whether the doctors' primary diagnoses name the same condition, "
    "allowing for synonyms and different wording ('same'). In 'diagnosis' give the shared diagnosis or, if they "
    "differ, the one most doctors hold (in a tie, the best supported). In 'differentials' merge the doctors' "
    "differential diagnoses, one entry per condition, leaving out the diagnosis above and adding none of your own."
)


def render_record(record: Any, indent: int = 0) -> str:
    """A scenario record (nested dicts and lists) as indented 'Label: value' lines."""
    pad = "  " * indent
    if isinstance(record, dict):
        lines = []
        for key, value in record.items():
            label = str(key).replace("_", " ")
            if isinstance(value, (dict, list)):
                lines.append(f"{pad}{label}:\n{render_record(value, indent + 1)}")
            else:
                lines.append(f"{pad}{label}: {value}")
        return "\n".join(lines)
    if isinstance(record, list):
        return "\n".join(f"{pad}- {item}" if not isinstance(item, (dict, list)) else render_record(item, indent) for item in record)
    return f"{pad}{record}"


def opinion_text(opinion: Any) -> str:
    differentials = "; ".join(opinion.differentials) or "none"
    return f"Primary: {opinion.primary_diagnosis}. Differentials: {differentials}. Reasoning: {opinion.reasoning}"


# ---------------------------------------------------------------- one consultation


class Consultation:
    """The state of one OSCE encounter: who plays what, what has been said, and the record."""

    def __init__(self, case: Case, panel: Panel, settings: OsceSettings, transcript: Transcript | None = None) -> None:
        osce = case.metadata.get("osce") or {}
        if not isinstance(osce.get("patient_actor"), dict) or not osce["patient_actor"]:
            raise UsageError(f"Case '{case.id}' cannot run the osce protocol: it has no metadata.osce.patient_actor.",
                             "Use an OSCE scenario (agentclinic, agentclinic-extended) or add metadata.osce.patient_actor to the case file.")
        patient = panel.role("patient")
        if patient is None:
            raise UsageError("The osce protocol needs a patient: the panel has no 'patient' role.",
                             "Run it through the runner (which seats the embedded model by default) or give the panel a patient role.")
        self.case, self.osce, self.settings = case, osce, settings
        self.doctors = dict(panel.seats)
        self.labels = seat_labels(self.doctors)  # what prompts call the doctors
        self.patient = patient
        self.moderator = panel.role("moderator") or panel.first()[1]  # the runner's default too: the first seat's model
        self.transcript = transcript if transcript is not None else Transcript()
        self.dialogue: list[tuple[str, str]] = []  # ("Patient" | "Doctor", words), in order
        self.patient_messages: list[dict[str, str]] = [
            {"role": "system", "content": PATIENT_SYSTEM.format(actor=render_record(osce["patient_actor"]))}]
        self.questions_asked: list[str] = []
        self.history_scores: list[float | None] = []  # final consensus of each history exchange

    def dialogue_text(self) -> str:
        return "\n".join(f"{who}: {words}" for who, words in self.dialogue) or "(nothing said yet)"

    async def ask(self, model: Model, system: str, user: str, *, schema: Any = None, budget: str = "max_tokens") -> Reply:
        """One call; `budget` names the token setting it spends (fitted to `model` when not set)."""
        return await model.complete([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                    schema=schema, temperature=self.settings.temperature, max_tokens=self.settings.tokens_for(model, budget))

    # -------------------------------------------------------------- the patient

    async def patient_says(self, doctor_words: str, step: int) -> str:
        self.patient_messages.append({"role": "user", "content": doctor_words})
        reply = await self.patient.complete(self.patient_messages, temperature=self.settings.temperature,
                                            max_tokens=self.settings.tokens_for(self.patient, "patient_max_tokens"))
        words = reply.text.strip()
        self.patient_messages.append({"role": "assistant", "content": words})
        self.dialogue.append(("Patient", words))
        self.transcript.record("turn", words, reply=reply, speaker="Patient", role="patient",
                               phase="opening" if step == 0 else "patient", round=step, data={"step": step})
        return words

    def doctor_says(self, words: str) -> None:
        self.dialogue.append(("Doctor", words))

    # -------------------------------------------------------------- the moderator's triage

    async def triage(self, step: int) -> Triage:
        user = f"CONSULTATION SO FAR:\n{self.dialogue_text()}\n\nLATEST PATIENT MESSAGE:\n{self.dialogue[-1][1]}"
        reply = await self.ask(self.moderator, TRIAGE_SYSTEM, user, schema=Triage, budget="review_max_tokens")
        decision: Triage = reply.parsed
        self.transcript.record("turn", f"{decision.action}" + (f": {decision.reply}" if decision.reply else ""), reply=reply,
                               speaker="Moderator", role="moderator", phase="triage", round=step,
                               data={"step": step, "action": decision.action, "reply": decision.reply})
        return decision

    # -------------------------------------------------------------- history taking

    async def take_history(self, exchange: int, step: int, context: RunContext) -> list[str]:
        s = self.settings
        proposal_schema, revision_schema, merged_schema = question_schemas(s.max_questions)
        task = (f"CONSULTATION SO FAR:\n{self.dialogue_text()}\n\n"
                f"TASK: decide the next questions (at most {s.max_questions}) to ask this patient.")
        tag = {"exchange": exchange, "step": step}
        replies = await gather_seats([
            self.ask(m, PROPOSE_SYSTEM.format(seat=self.labels[seat], n=s.max_questions), task, schema=proposal_schema)
            for seat, m in self.doctors.items()], list(self.doctors), "proposing questions", self.doctors)
        drafts: dict[str, str] = {}
        proposed: dict[str, list[str]] = {}
        for seat, reply in zip(self.doctors, replies):
            proposed[seat] = list(reply.parsed.questions)
            drafts[seat] = numbered(proposed[seat])
            self.transcript.record("turn", drafts[seat], reply=reply, speaker=seat, role="doctor", phase="proposal", round=0,
                                   data={**tag, "questions": proposed[seat], "rationale": reply.parsed.rationale})
        work = Deliberation(task=task, label="list of questions", review_schema=QuestionsReview,
                            revision_schema=revision_schema, draft_of=lambda parsed: numbered(list(parsed.questions)), data=tag)
        cycle = await critique_cycle(self.doctors, drafts, work, s, self.transcript, context)
        self.history_scores.append(cycle.scores[-1] if cycle.scores else None)

        if len(self.doctors) == 1:  # nothing to review or merge: the one list goes to the patient as proposed
            seat = next(iter(self.doctors))
            questions = proposed[seat]
        else:
            seat_of = {label: seat for seat, label in self.labels.items()}
            lists = "\n\n".join(f"QUESTIONS FROM {self.labels[seat]}:\n{text}" for seat, text in cycle.drafts.items())
            reply = await self.ask(self.moderator, MERGE_SYSTEM.format(n=s.max_questions, names=", ".join(seat_of)),
                                   f"CONSULTATION SO FAR:\n{self.dialogue_text()}\n\n{lists}", schema=merged_schema)
            questions = [q.question for q in reply.parsed.questions]
            credited = [list(q.proposed_by) for q in reply.parsed.questions]
            sources = [[seat_of.get(n.strip(), n) for n in src] for src in credited]  # labels back to seat names
            self.transcript.record("turn", numbered(questions), reply=reply, speaker="Moderator", role="moderator",
                                   phase="consolidation", round=cycle.rounds, data={**tag, "questions": questions, "sources": sources,
                                 "unknown_sources": sorted({n for src in sources for n in src if n not in self.doctors}),
                                 "consensus": self.history_scores[-1], "stopped_by": cycle.stopped_by})
        self.questions_asked.extend(questions)
        return questions

    # -------------------------------------------------------------- diagnosis

    def findings(self) -> str:
        if not self.settings.reveal_findings:
            return ""
        parts = [f"{title}:\n{render_record(self.osce[key])}" for key, title in
                 (("physical_exam", "PHYSICAL EXAMINATION"), ("test_results", "TEST RESULTS")) if self.osce.get(key)]
        return ("\n\n" + "\n\n".join(parts)) if parts else ""

    async def diagnose(self, context: RunContext) -> dict[str, Any]:
        s = self.settings
        opinion_schema, judgement_schema = diagnosis_schemas(s.max_differentials)
        task = f"CONSULTATION:\n{self.dialogue_text()}{self.findings()}"
        systems = {seat: DIAGNOSE_SYSTEM.format(seat=self.labels[seat], k=s.max_differentials) for seat in self.doctors}
        replies = await gather_seats([self.ask(m, systems[seat], task, schema=opinion_schema)
                                      for seat, m in self.doctors.items()], list(self.doctors), "diagnosing", self.doctors)
        opinions = self._record_opinions(replies, round_=0, phase="diagnosis")
        judgement: Any = None
        rnd = 0
        for rnd in range(s.max_diagnosis_rounds + 1):
            if len(self.doctors) == 1:
                break
            context.check()
            views = "\n".join(f"- {self.labels[seat]}: {opinion_text(o)}" for seat, o in opinions.items())
            reply = await self.ask(self.moderator, JUDGEMENT_SYSTEM, f"{task}\n\nTHE DOCTORS' VIEWS:\n{views}", schema=judgement_schema)
            judgement = reply.parsed
            self.transcript.record("turn", f"{'Same diagnosis' if judgement.same else 'Different diagnoses'}: {judgement.diagnosis}",
                                   reply=reply, speaker="Moderator", role="moderator", phase="diagnosis-consensus", round=rnd,
                                   data={"same": judgement.same, "primary_diagnosis": judgement.diagnosis, "differentials": list(judgement.differentials)})
            if judgement.same or rnd == s.max_diagnosis_rounds:
                break
            replies = await gather_seats([
                self.ask(m, systems[seat], task + "\n\n" + RECONSIDER.format(
                    views="\n".join(f"- {self.labels[other]}: {opinion_text(o)}" for other, o in opinions.items() if other != seat),
                    own=opinion_text(opinions[seat])), schema=opinion_schema)
                for seat, m in self.doctors.items()], list(self.doctors), f"reconsidering in round {rnd + 1}", self.doctors)
            opinions = self._record_opinions(replies, round_=rnd + 1, phase="diagnosis-debate")

        if judgement is None:  # one doctor: its view is the panel's
            only = next(iter(opinions.values()))
            primary, differentials, status = only.primary_diagnosis, list(only.differentials), "single"
        else:
            primary, differentials = judgement.diagnosis, list(judgement.differentials)
            status = "consensus" if judgement.same else "majority"
        differentials = [d for d in dict.fromkeys(differentials) if d.strip().casefold() != primary.strip().casefold()]
        result = {"primary": primary, "differentials": differentials, "status": status, "rounds": rnd,
                  "opinions": {seat: o.model_dump() for seat, o in opinions.items()}}
        self.transcript.record("decision", primary, speaker="Moderator", phase="diagnosis",
                     data={"primary_diagnosis": primary, "differentials": differentials, "status": status, "rounds": rnd})
        return result

    def _record_opinions(self, replies: list[Reply], *, round_: int, phase: str) -> dict[str, Any]:
        opinions = {}
        for seat, reply in zip(self.doctors, replies):
            opinions[seat] = reply.parsed
            self.transcript.record("turn", opinion_text(reply.parsed), reply=reply, speaker=seat, role="doctor", phase=phase, round=round_,
                                   data={"primary_diagnosis": reply.parsed.primary_diagnosis, "differentials": list(reply.parsed.differentials)})
        return opinions


# ---------------------------------------------------------------- the protocol


async def run(case: Case, panel: Panel, settings: OsceSettings, context: RunContext | None = None) -> Outcome:
    context = quiet(context)
    visit = Consultation(case, panel, settings, context.transcript())
    await visit.patient_says(OPENING, step=0)
    exchanges = direct = 0
    # Each pass spends one history exchange or one direct reply, so the two budgets bound the loop.
    for step in range(1, settings.max_exchanges + settings.max_direct_replies + 1):
        if exchanges >= settings.max_exchanges:
            break
        context.check()
        decision = await visit.triage(step)
        action = decision.action
        if action == "direct" and (direct >= settings.max_direct_replies or not decision.reply.strip()):
            action = "history"
        if action == "diagnose" and exchanges == 0:
            action = "history"  # nothing has been asked yet: take some history first
        if action != decision.action:
            visit.transcript.record("note", f"Moderator chose '{decision.action}'; the panel takes the history instead.",
                                    speaker="Moderator", phase="triage", round=step, data={"step": step})
        if action == "diagnose":
            break
        if action == "direct":
            direct += 1
            words = decision.reply.strip()
            visit.transcript.record("turn", words, speaker="Moderator", role="moderator", phase="direct-reply", round=step, data={"step": step})
        else:
            exchanges += 1
            words = numbered(await visit.take_history(exchanges, step, context))
        visit.doctor_says(words)
        await visit.patient_says(words, step)
    diagnosis = await visit.diagnose(context)
    return Outcome(answer=diagnosis["primary"], transcript=visit.transcript, data={
        "diagnosis": diagnosis,
        "questions_asked": visit.questions_asked,
        "history_exchanges": exchanges,
        "direct_replies": direct,
        "history_consensus": visit.history_scores,
    })


def score(case: Case, outcome: Outcome) -> dict[str, float | None]:
    """Whether the doctors' primary diagnoses agreed (the judge's four metrics are OSCE_JUDGE's)."""
    status = (outcome.data.get("diagnosis") or {}).get("status")
    return {"diagnosis_consensus": None if status in (None, "single") else float(status == "consensus")}


SPEC = ProtocolSpec(name="osce", run=run, settings=OsceSettings, scorers=(pure("osce", score, {"diagnosis_consensus": PROPORTION}), OSCE_JUDGE),
                    min_models=1, role_defaults={"patient": "local", "moderator": "@seat", "judge": "@moderator"},
                    description="MCC diagnostic dialogue: panel history taking with a simulated patient, diagnosis by consensus, OSCE metrics")
