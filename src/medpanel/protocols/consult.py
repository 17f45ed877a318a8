"""Consult (MedSyn): a physician who knows only the chief complaint questions an assistant who holds
the clinical note, then writes the discharge: a diagnosis and its ICD-10 codes.

    turn 1      physician asks for an initial evaluation          (always a question)
    turn 2      assistant evaluates the patient from the note
    turn 3..    physician either asks again (the assistant answers, one turn each) or submits
    turn N      physician submits: the discharge {diagnosis, codes}, a structured call

Seats: the panel's first model is the physician, the second the assistant (one model sits in both
chairs). Either may be a person (`human`), who sees what that seat's model would see.

Every physician turn is a structured reply `{action: ask|submit, message}`, so even a small model
(decoding under the schema's grammar) or a person at the terminal ends the consult explicitly;
on "submit" a second call asks for the `Discharge`. The assistant gets no schema and is never asked
for the discharge. `max_turns` bounds the dialogue: a physician who has not submitted by then ends
the consult "unfinished" (Outcome.status), recorded with its turns and scored apart (see `score`).

Baselines: the physician alone writes the discharge from the chief complaint ("baseline", MedSyn's
"phy w/complaint") or from the whole note ("baseline-note", "phy w/full_note"), in one turn.
"""

from __future__ import annotations

import re

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from medpanel.cases.model import Case
from medpanel.errors import UsageError
from medpanel.models.base import Model, Reply
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec
from medpanel.scoring.icd10 import EmptyPolicy, code_table, icd10_scores, metric_names, parse_codes
from medpanel.transcript import Event, Transcript

PHYSICIAN, ASSISTANT = "Physician", "Assistant"

PHYSICIAN_SYSTEM = (
    "You are the attending physician. You know only the patient's chief complaint. Your assistant has "
    "read the patient's full clinical note, so you must learn the case by asking them. Start by asking "
    "for an initial evaluation. Then ask short, specific questions, one per turn, about what you still "
    "need: symptoms, history, examination, test results. Do not repeat questions, and keep every message "
    "brief. When you are confident of the diagnosis, submit: you will then write the discharge yourself, "
    "with the final diagnosis and its ICD-10-CM codes. Never ask the assistant to write the discharge."
)
ASSISTANT_SYSTEM = (
    "You are a physician assistant working with the attending physician, who has not seen the patient's "
    "note. You have. When first asked, give a short structured evaluation: key symptoms and findings, a "
    "preliminary diagnosis, possible complications, and further tests worth doing. After that, answer each "
    "question briefly and only from the note; say so when the note does not tell. The physician writes "
    "the discharge; you never write it.\n\nCLINICAL NOTE\n{note}"
)
BASELINE_SYSTEM = (
    "You are the attending physician writing a patient's discharge diagnosis. Work only from what you are "
    "given below; you cannot ask questions. Decide the final diagnosis and list the ICD-10-CM codes for it."
)
# No example codes here: small models copy them, and a copied common code (I10) scores real hits.
DISCHARGE_REQUEST = (
    "Write the discharge now: the patient's final diagnosis, and the ICD-10-CM codes for it (each a "
    "letter and two characters, then a dot and up to four more where the code has them)."
)

# A code as the discharge may give it: letter, two more, optionally a dot and up to four more. The
# grammar of a schema-constrained model keeps to it; people may type any case (normalised later).
CODE_PATTERN = r"^[A-Za-z]([0-9][0-9A-Za-z]|[Aa][0-9])(\.?[0-9A-Za-z]{1,4})?$"

# The reply shapes below carry no docstrings on purpose: a docstring becomes the schema's description,
# which the model is shown, and small models copy it into their answers.


# A physician turn that can only ask (the first: the request for an initial evaluation).
class Question(BaseModel):
    message: str = Field(min_length=1, max_length=600, description="your message to the assistant")


# A physician turn once questions were asked: ask again, or submit and write the discharge.
class PhysicianTurn(BaseModel):
    action: Literal["ask", "submit"] = Field(description="ask: put a question to the assistant; submit: end the consult and write the discharge")
    message: str = Field(min_length=1, max_length=600, description="your question (ask), or one line on why you are ready (submit)")

    @field_validator("action", mode="before")
    @classmethod
    def _tolerate_case(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


# The discharge text MedSyn scores: the diagnosis and its ICD-10 codes.
class Discharge(BaseModel):
    diagnosis: str = Field(min_length=1, max_length=400, description="the patient's final diagnosis")
    codes: list[Annotated[str, Field(pattern=CODE_PATTERN)]] = Field(
        min_length=1, max_length=15, description="ICD-10-CM codes for the diagnosis")

    @field_validator("codes", mode="before")
    @classmethod
    def _split_loose_items(cls, value: Any) -> Any:
        """'E11.9 I10' or 'E11.9 (diabetes)' typed as one item becomes its codes; an item with none stays, to fail."""
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            return value
        out: list[Any] = []
        for item in value:
            if not isinstance(item, str):
                out.append(item)
                continue
            # Each code is followed by an optional description: keep codes, never code-like words of the
            # description ("D51.0 (vitamin B12 deficiency anemia)" is D51.0, not D51.0 and B12).
            for part in re.split(r"[,;]", item):
                found = []
                for token in part.split("(")[0].split():  # the leading run of codes, up to the first word
                    if parse_codes(token) != [token.upper().rstrip(".")]:
                        break
                    found.append(parse_codes(token)[0])
                found = found or parse_codes(part)[:1]
                out.extend(found or ([part.strip()] if part.strip() else []))
        return out


EventHook = Callable[[Event], None]


class ConsultSettings(BaseModel):
    max_turns: int = Field(default=20, ge=3, le=200, description="messages in all, the discharge included; past it the consult is unfinished")
    min_questions: int = Field(default=1, ge=1, le=50, description="questions the physician must ask before it may submit")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=256, ge=16, description="per question or answer")
    discharge_max_tokens: int = Field(default=256, ge=16)
    frequency_penalty: float | None = None
    empty_prediction: EmptyPolicy = "zero"
    # Called with every event as it is recorded, e.g. to show the dialogue live. Never stored.
    on_event: EventHook | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _room_to_submit(self) -> "ConsultSettings":
        if self.max_turns < 2 * self.min_questions + 1:
            raise ValueError(f"max_turns {self.max_turns} leaves no turn to submit after {self.min_questions} question(s) and answer(s); "
                             f"use at least {2 * self.min_questions + 1}")
        return self


class BaselineSettings(BaseModel):
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    discharge_max_tokens: int = Field(default=256, ge=16)
    frequency_penalty: float | None = None
    empty_prediction: EmptyPolicy = "zero"
    on_event: EventHook | None = Field(default=None, exclude=True)


# ---------------------------------------------------------------------------- what each seat sees


def clinical_note(case: Case) -> str:
    """The whole note as the assistant (and the full-note baseline) read it: the complaint, then every section."""
    parts = []
    if case.chief_complaint and "chief complaint" not in case.note:
        parts.append(f"CHIEF COMPLAINT\n{case.chief_complaint}")
    parts += [f"{name.upper()}\n{body.strip()}" for name, body in case.note.items() if body.strip()]
    return "\n\n".join(parts)


def briefing(case: Case, seat: str) -> str:
    """What a person taking a seat is told before the consult starts (their model is told the same)."""
    if seat == PHYSICIAN:
        return f"You are the physician. You know only the chief complaint: {case.chief_complaint}"
    return "You are the assistant. The physician knows only the chief complaint. The clinical note:\n\n" + clinical_note(case)


def _turns(n: int) -> str:
    return f"{n} turn{'' if n == 1 else 's'} left"


def opening_prompt(case: Case, turns_left: int) -> str:
    return (f"Chief complaint: {case.chief_complaint}\n\n({_turns(turns_left)}, counting each question, each answer and "
            f"the discharge.) Write your first message to the assistant, asking for their initial evaluation of the patient.")


def followup_prompt(answer: str, turns_left: int, may_submit: bool) -> str:
    if not may_submit:
        choice = "Ask one short question."
    elif turns_left <= 2:  # the assistant's answer would take the last turn: a question now leaves none for the discharge
        choice = "Submit now: a question now leaves no turn for the discharge, and the consult would end without one."
    else:
        choice = "Ask one short question, or submit when you know enough to write the discharge."
    return f"Assistant: {answer}\n\n({_turns(turns_left)}.) {choice}"


# ---------------------------------------------------------------------------- running it


def seats(panel: Panel) -> tuple[tuple[str, Model], tuple[str, Model]]:
    """(physician seat, assistant seat): the first model, and the second (or the first again)."""
    items = list(panel.seats.items())
    if not items:
        raise UsageError("The panel is empty.", "Give a physician model (and optionally an assistant): --models local or --models M1,M2.")
    return items[0], (items[1] if len(items) > 1 else items[0])


class _Recorder:
    """Appends events to the transcript and hands each to the live hook."""

    def __init__(self, hook: EventHook | None) -> None:
        self.transcript = Transcript()
        self.hook = hook

    def reply(self, reply: Reply, *, speaker: str, role: str, round: int, phase: str, data: dict | None = None, kind: str = "turn") -> Event:
        event = self.transcript.add(kind, reply.text, speaker=speaker, role=role, model=reply.model, round=round, phase=phase,
                                    data=data or {}, input_tokens=reply.usage.input_tokens, output_tokens=reply.usage.output_tokens,
                                    latency_s=reply.latency_s, cost_usd=reply.cost_usd, cached=reply.cached)
        return self._emit(event)

    def note(self, text: str, **fields: Any) -> Event:
        return self._emit(self.transcript.add("note", text, **fields))

    def _emit(self, event: Event) -> Event:
        if self.hook is not None:
            self.hook(event)
        return event


def _options(settings: ConsultSettings | BaselineSettings, max_tokens: int) -> dict[str, Any]:
    options: dict[str, Any] = {"temperature": settings.temperature, "max_tokens": max_tokens}
    if settings.frequency_penalty is not None:
        options["frequency_penalty"] = settings.frequency_penalty
    return options


def _discharge_data(discharge: Discharge) -> dict[str, Any]:
    # The validator already split and normalised the codes; parsing again drops repeats.
    return {"diagnosis": discharge.diagnosis.strip(), "codes": parse_codes(discharge.codes)}


async def run(case: Case, panel: Panel, settings: ConsultSettings) -> Outcome:
    case.require("chief_complaint", "note", protocol="consult")
    (_, physician), (_, assistant) = seats(panel)
    rec = _Recorder(settings.on_event)
    physician_view = [{"role": "system", "content": PHYSICIAN_SYSTEM},
                      {"role": "user", "content": opening_prompt(case, settings.max_turns)}]
    assistant_view = [{"role": "system", "content": ASSISTANT_SYSTEM.format(note=clinical_note(case))}]
    turn, questions, discharge = 0, 0, None

    while turn < settings.max_turns:
        # The physician's turn: a question, or (once enough were asked) the decision to submit.
        turn += 1
        may_submit = questions >= settings.min_questions
        reply = await physician.complete(physician_view, schema=PhysicianTurn if may_submit else Question,
                                         **_options(settings, settings.max_tokens))
        action = reply.parsed.action if may_submit else "ask"
        message = reply.parsed.message.strip()
        physician_view.append({"role": "assistant", "content": reply.text})
        rec.reply(reply, speaker=PHYSICIAN, role="physician", round=turn, phase="submit" if action == "submit" else "question",
                  data={"action": action, "message": message})
        if action == "submit":
            physician_view.append({"role": "user", "content": DISCHARGE_REQUEST})
            written = await physician.complete(physician_view, schema=Discharge, **_options(settings, settings.discharge_max_tokens))
            discharge = _discharge_data(written.parsed)
            rec.reply(written, speaker=PHYSICIAN, role="physician", round=turn, phase="discharge", data=discharge, kind="decision")
            break
        questions += 1
        if turn >= settings.max_turns:
            break  # the question was asked on the last turn: no answer fits
        # The assistant's turn: answer from the note.
        turn += 1
        assistant_view.append({"role": "user", "content": message})
        answer = await assistant.complete(assistant_view, **_options(settings, settings.max_tokens))
        assistant_view.append({"role": "assistant", "content": answer.text})
        rec.reply(answer, speaker=ASSISTANT, role="assistant", round=turn, phase="evaluation" if questions == 1 else "answer")
        physician_view.append({"role": "user", "content": followup_prompt(answer.text.strip(), settings.max_turns - turn,
                                                                           questions >= settings.min_questions)})

    data: dict[str, Any] = {"turns": turn, "questions": questions, "max_turns": settings.max_turns,
                            "empty_prediction": settings.empty_prediction}
    if discharge is None:
        rec.note(f"The consult reached its bound of {settings.max_turns} turns without a discharge.", phase="unfinished", round=turn)
        return Outcome(status="unfinished", answer=None, data=data | {"codes": []}, transcript=rec.transcript)
    return Outcome(status="ok", answer=discharge["diagnosis"], data=data | discharge, transcript=rec.transcript)


def _baseline(view: Literal["complaint", "note"]):
    async def run_baseline(case: Case, panel: Panel, settings: BaselineSettings) -> Outcome:
        name = "baseline" if view == "complaint" else "baseline-note"
        if view == "complaint":
            case.require("chief_complaint", protocol=name)
            given = f"Chief complaint: {case.chief_complaint}"
        else:
            case.require("note", protocol=name)
            given = f"Clinical note:\n\n{clinical_note(case)}"
        (_, physician), _ = seats(panel)
        rec = _Recorder(settings.on_event)
        messages = [{"role": "system", "content": BASELINE_SYSTEM}, {"role": "user", "content": f"{given}\n\n{DISCHARGE_REQUEST}"}]
        written = await physician.complete(messages, schema=Discharge, **_options(settings, settings.discharge_max_tokens))
        discharge = _discharge_data(written.parsed)
        rec.reply(written, speaker=PHYSICIAN, role="physician", round=1, phase="discharge", data=discharge, kind="decision")
        data = {"turns": 1, "questions": 0, "empty_prediction": settings.empty_prediction} | discharge
        return Outcome(status="ok", answer=discharge["diagnosis"], data=data, transcript=rec.transcript)

    return run_baseline


# ---------------------------------------------------------------------------- scoring


def score(case: Case, outcome: Outcome) -> dict[str, float | None]:
    """ICD-10 metrics of the discharge against the case's gold codes, with the consult's bookkeeping.

    `finished` is 1 for a submitted discharge, 0 for an unfinished consult; `turns` counts messages.
    An unfinished consult has no discharge, so its ICD-10 metrics are None: means over a run are over
    finished consults, and `finished` says how many that is (bench/bench_consult_codiesp.py also
    reports them with unfinished consults counted as empty predictions). Without gold codes the
    metrics are None too; the invalid-code rate needs only the prediction.
    """
    finished = outcome.status == "ok"
    scores: dict[str, float | None] = {"finished": 1.0 if finished else 0.0, "turns": float(outcome.data.get("turns", 0))}
    names = [*metric_names(), "invalid_rate", "n_predicted", "empty"]
    if not finished:
        return scores | dict.fromkeys(names)
    try:
        table = code_table()
    except UsageError:  # no ICD-10 data here: score what needs no table
        table = False
    metrics = icd10_scores(outcome.data.get("codes") or [], case.reference.codes,
                           empty=outcome.data.get("empty_prediction", "zero"), table=table)
    return scores | {name: metrics.get(name) for name in names}


SPEC = ProtocolSpec(name="consult", run=run, settings=ConsultSettings, score=score,
                    description="a physician with the chief complaint consults an assistant holding the note, then writes the discharge (MedSyn)")
BASELINE_CHIEF_COMPLAINT = ProtocolSpec(name="baseline", run=_baseline("complaint"), settings=BaselineSettings, score=score,
                                        description="the physician alone writes the discharge from the chief complaint")
BASELINE_FULL_NOTE = ProtocolSpec(name="baseline-note", run=_baseline("note"), settings=BaselineSettings, score=score,
                                  description="the physician alone writes the discharge from the full note")
