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
the consult "unfinished" (Outcome.status), recorded with its turns and scored as an empty
prediction unless `unfinished="exclude"` (see `score`).

On a small model (`model.small`, such as the embedded one) a seat takes the small-model profile of
medpanel.protocols.consult_small instead: questions held to a question's form by a grammar, the
discharge offered by code after a few questions, answers told from the note's own sentences, codes picked
from an ICD-10-CM lookup. The loop, the turn bound and the scoring here are the same for both; an outcome
says which profile each seat took (`data["profile"]`, `data["assistant_profile"]`, only when small).

Baselines: the physician alone writes the discharge from the chief complaint ("baseline", MedSyn's
"phy w/complaint") or from the whole note ("baseline-note", "phy w/full_note"), in one turn.
"""

from __future__ import annotations

import re

from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, PrivateAttr, field_validator, model_validator

from medpanel.cases.model import Case
from medpanel.context import RunContext, quiet
from medpanel.errors import UsageError
from medpanel.models.base import Model, Reply
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec, Settings
from medpanel.scoring.icd10 import EmptyPolicy, code_table, icd10_scores, metric_names, parse_codes, token_code
from medpanel.scoring.metrics import COUNT, PROPORTION, UNIT
from medpanel.scoring.scorer import pure

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


# How a discharge item may run codes together: commas, semicolons, and joining words ("N13.5, D18.09 and N23").
_ITEM_SEPARATORS = re.compile(r"[,;/&+]|\s(?:and|or|plus)\s", re.IGNORECASE)
# A dash joining codes with no space ("E11.9-I10", "E11.9–I10", "E11.9—I10", "E11.9‑I10"): ASCII hyphen, the
# Unicode hyphens and dashes (U+2010-U+2015), minus signs and full-width hyphen. It separates only a word
# made wholly of codes, so "E11-9" stays one (unread) word and "B12‑related" one description word.
_DASHES = re.compile("[-\u2010-\u2015\u2212\u2043\ufe58\ufe63\uff0d]")
_PARENTHESISED = re.compile(r"\([^)]*\)?|\[[^\]]*\]?")  # a description in brackets, even one left open


def read_discharge_codes(value: str | list[Any]) -> tuple[list[Any], list[str]]:
    """(codes, unread) from a discharge's codes as written: every code kept, in order, each once.

    An item may hold several codes and a description: "E119 I10", "N13.5, D18.09 and N23",
    "Type 2 diabetes E11.9", "D51.0 (vitamin B12 deficiency anemia)". Each part (between commas,
    semicolons, joining words, or dashes inside a word made of codes: "E11.9–I10") gives the codes at
    its start and at its end, any longer code (E78.5, E785) among its words, and a three-character
    one among its words when the ICD-10-CM table lists it as a category ("G40 epilepsy G43 migraine"). Text in brackets is a description, read for codes only when the
    rest of the item has none ("Type 2 diabetes (E11.9)").

    `unread` lists what was not taken as a code but might have been one: a three-character
    code-shaped word among words that is no category ("vitamin B12"), or one in a bracketed description, and a part with a
    digit but no code ("250.00", "E11-9"). An item with no code at all stays among the codes as
    text, so that the Discharge check fails and the author is asked again. Non-strings pass through
    for the schema to refuse.
    """
    items = [value] if isinstance(value, str) else list(value) if isinstance(value, list) else [value]
    codes: list[Any] = []
    unread: list[str] = []
    for item in items:
        if not isinstance(item, str):
            codes.append(item)
            continue
        bracketed = " ; ".join(m.strip("()[] ") for m in _PARENTHESISED.findall(item))
        found, skipped = _read_parts(_PARENTHESISED.sub(" ", item))
        if found:  # the brackets describe the codes: whatever looks like a code in them is listed
            skipped += [t for t in bracketed.split() if token_code(t)]
        else:
            found, skipped = _read_parts(bracketed)
        if not found:
            codes.append(item.strip())
            unread.append(item.strip())
            continue
        codes.extend(found)
        unread.extend(skipped)
    if all(isinstance(c, str) for c in codes):
        codes = list(dict.fromkeys(codes))
    return codes, unread


def _read_parts(text: str) -> tuple[list[str], list[str]]:
    """(codes, unread) of text without brackets, part by part (see read_discharge_codes)."""
    found: list[str] = []
    skipped: list[str] = []
    for part in _ITEM_SEPARATORS.split(text):
        tokens = [piece for word in part.split() for piece in _dashed_codes(word)]
        read = [token_code(t) for t in tokens]
        if not any(read):
            if any(ch.isdigit() for ch in part):
                skipped.append(part.strip())
            continue
        lead = _leading_run(read)
        trail = _leading_run(read[::-1]) if len(lead) < len(read) else []
        found.extend(lead)
        for token, code in zip(tokens[len(lead):len(read) - len(trail)], read[len(lead):len(read) - len(trail)]):
            if code is not None:  # among words: a longer code, or a three-character one the code table lists
                keep = len(code) > 3 or _is_category(code)
                (found if keep else skipped).append(code if keep else token)
        found.extend(trail[::-1])
    return found, skipped


def _dashed_codes(word: str) -> list[str]:
    """A word of codes joined by dashes as its codes; any other word as it is."""
    pieces = _DASHES.split(word)
    return pieces if len(pieces) > 1 and all(token_code(p) for p in pieces) else [word]


def _is_category(code: str) -> bool:
    """Whether a three-character code is an ICD-10-CM category ("I10", "G43"; not "B12"). Without the
    code table (no shared data) none is, and such a word stays unread as before."""
    try:
        return code in code_table().categories
    except UsageError:
        return False


def _leading_run(read: list[str | None]) -> list[str]:
    """The codes at the start of a part's tokens, up to its first word."""
    run = []
    for code in read:
        if code is None:
            break
        run.append(code)
    return run


# The discharge text MedSyn scores: the diagnosis and its ICD-10 codes.
class Discharge(BaseModel):
    diagnosis: str = Field(min_length=1, max_length=400, description="the patient's final diagnosis")
    codes: list[Annotated[str, Field(pattern=CODE_PATTERN)]] = Field(
        min_length=1, max_length=15, description="ICD-10-CM codes for the diagnosis")
    # What the codes as written held that was not read as a code (see read_discharge_codes); not in the schema.
    _unread: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _read_loose_codes(cls, data: Any, handler: Any) -> "Discharge":
        unread: list[str] = []
        if isinstance(data, dict) and "codes" in data:
            codes, unread = read_discharge_codes(data["codes"])
            data = {**data, "codes": codes}
        discharge = handler(data)
        discharge._unread = unread
        return discharge

    @property
    def unread(self) -> list[str]:
        return list(self._unread)


UnfinishedPolicy = Literal["empty", "exclude"]


class ConsultSettings(Settings):
    # max_tokens / discharge_max_tokens when not set: (small model such as the embedded one, any other);
    # a reasoning model gets REASONING_ALLOWANCE more (Model.token_budget).
    budgets: ClassVar[dict[str, tuple[int, int]]] = {"max_tokens": (256, 1024), "discharge_max_tokens": (256, 1024)}

    max_turns: int = Field(default=20, ge=3, le=200, description="messages in all, the discharge included; past it the consult is unfinished")
    min_questions: int = Field(default=1, ge=1, le=50, description="questions the physician must ask before it may submit")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=None, ge=16, description="per question or answer; None: fit the seat")
    discharge_max_tokens: int | None = Field(default=None, ge=16)
    frequency_penalty: float | None = None
    empty_prediction: EmptyPolicy = "zero"
    unfinished: UnfinishedPolicy = Field(default="empty", description="an unfinished consult scores as an empty prediction (empty) or is left out of the ICD-10 means (exclude)")

    @model_validator(mode="after")
    def _room_to_submit(self) -> "ConsultSettings":
        if self.max_turns < 2 * self.min_questions + 1:
            raise ValueError(f"max_turns {self.max_turns} leaves no turn to submit after {self.min_questions} question(s) and answer(s); "
                             f"use at least {2 * self.min_questions + 1}")
        return self


class BaselineSettings(Settings):
    budgets: ClassVar[dict[str, tuple[int, int]]] = {"discharge_max_tokens": (256, 1024)}

    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    discharge_max_tokens: int | None = Field(default=None, ge=16)
    frequency_penalty: float | None = None
    empty_prediction: EmptyPolicy = "zero"


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


def _options(settings: ConsultSettings | BaselineSettings, model: Model, budget: str) -> dict[str, Any]:
    """Call options for `model`; `budget` names the token setting the call spends, fitted to the model when unset."""
    options: dict[str, Any] = {"temperature": settings.temperature, "max_tokens": settings.tokens_for(model, budget)}
    if settings.frequency_penalty is not None:
        options["frequency_penalty"] = settings.frequency_penalty
    return options


def _discharge_data(discharge: Discharge) -> dict[str, Any]:
    # The validator already split and normalised the codes; what it could not read is kept beside them.
    return {"diagnosis": discharge.diagnosis.strip(), "codes": parse_codes(discharge.codes), "unread": discharge.unread}


class PaperPhysician:
    """The physician's side as MedSyn holds it: every turn a structured {action, message}, the discharge one call."""

    profile = "paper"

    def __init__(self, case: Case, model: Model, options: Callable[[str], dict[str, Any]], max_turns: int) -> None:
        self.model, self.options = model, options
        self.view = [{"role": "system", "content": PHYSICIAN_SYSTEM}, {"role": "user", "content": opening_prompt(case, max_turns)}]

    async def turn(self, questions: int, turns_left: int, may_submit: bool) -> dict[str, Any]:
        reply = await self.model.complete(self.view, schema=PhysicianTurn if may_submit else Question, **self.options("max_tokens"))
        self.view.append({"role": "assistant", "content": reply.text})
        # The event's text is the reply as written (text None), the message is in its data.
        return {"action": reply.parsed.action if may_submit else "ask", "message": reply.parsed.message.strip(), "reply": reply, "text": None}

    def hear(self, answer: str, turns_left: int, questions: int, may_submit: bool) -> None:
        self.view.append({"role": "user", "content": followup_prompt(answer, turns_left, may_submit)})

    async def discharge(self) -> tuple[Reply, Discharge, dict[str, Any]]:
        self.view.append({"role": "user", "content": DISCHARGE_REQUEST})
        written = await self.model.complete(self.view, schema=Discharge, **self.options("discharge_max_tokens"))
        return written, written.parsed, {}


class PaperAssistant:
    """The assistant as MedSyn holds it: the note in its prompt, free-text answers."""

    profile = "paper"
    trims = False  # its answers are recorded as written

    def __init__(self, note: str, model: Model, options: Callable[[str], dict[str, Any]]) -> None:
        self.model, self.options = model, options
        self.view = [{"role": "system", "content": ASSISTANT_SYSTEM.format(note=note)}]

    async def answer(self, message: str, topic: str | None = None) -> tuple[Reply, str]:
        self.view.append({"role": "user", "content": message})
        reply = await self.model.complete(self.view, **self.options("max_tokens"))
        self.view.append({"role": "assistant", "content": reply.text})
        return reply, reply.text.strip()


def chairs(case: Case, panel: Panel, settings: ConsultSettings) -> tuple[Any, Any]:
    """(physician, assistant) sides for the panel's seats: each seat's profile follows its own model (a small
    model gets the compact profile of medpanel.protocols.consult_small, any other MedSyn's)."""
    from medpanel.protocols import consult_small  # it builds on this module's schemas

    (_, physician), (_, assistant) = seats(panel)

    def options_for(model: Model) -> Callable[[str], dict[str, Any]]:
        return lambda budget: _options(settings, model, budget)

    doctor = (consult_small.SmallPhysician(case, physician, options_for(physician)) if physician.small
              else PaperPhysician(case, physician, options_for(physician), settings.max_turns))
    helper = (consult_small.SmallAssistant(case, assistant, options_for(assistant)) if assistant.small
              else PaperAssistant(clinical_note(case), assistant, options_for(assistant)))
    return doctor, helper


async def run(case: Case, panel: Panel, settings: ConsultSettings, context: RunContext | None = None) -> Outcome:
    context = quiet(context)
    case.require("chief_complaint", "note", protocol="consult")
    doctor, helper = chairs(case, panel, settings)
    transcript = context.transcript()
    turn, questions, discharge, extra = 0, 0, None, {}

    while turn < settings.max_turns:
        context.check()
        # The physician's turn: a question, or (once enough were asked) the decision to submit.
        turn += 1
        step = await doctor.turn(questions, settings.max_turns - turn + 1, questions >= settings.min_questions)
        action, message = step["action"], step["message"]
        fields = dict(speaker=PHYSICIAN, round=turn, phase="submit" if action == "submit" else "question", data={"action": action, "message": message})
        if step.get("note"):  # code sent the physician to the discharge (no turns left for a question...): it says why
            transcript.record("note", step["note"], speaker=PHYSICIAN, round=turn, phase="submit")
        transcript.record("turn", step.get("text", message), reply=step["reply"], role="physician", **fields)
        if action == "submit":
            written, parsed, extra = await doctor.discharge()
            discharge = _discharge_data(parsed)
            transcript.record("decision", reply=written, speaker=PHYSICIAN, role="physician", round=turn, phase="discharge", data=discharge | extra)
            break
        questions += 1
        if turn >= settings.max_turns:
            break  # the question was asked on the last turn: no answer fits
        # The assistant's turn: answer from the note.
        turn += 1
        answer, said = await helper.answer(message, step.get("topic"))
        transcript.record("turn", said if helper.trims else None, reply=answer, speaker=ASSISTANT, role="assistant", round=turn, phase="evaluation" if questions == 1 else "answer")
        doctor.hear(said, settings.max_turns - turn, questions, questions >= settings.min_questions)

    data: dict[str, Any] = {"turns": turn, "questions": questions, "max_turns": settings.max_turns,
                            "empty_prediction": settings.empty_prediction, "unfinished": settings.unfinished}
    if doctor.profile != "paper":
        data["profile"] = doctor.profile
    if helper.profile != "paper":
        data["assistant_profile"] = helper.profile
    if discharge is None:
        transcript.record("note", f"The consult reached its bound of {settings.max_turns} turns without a discharge.", phase="unfinished", round=turn)
        return Outcome(status="unfinished", answer=None, data=data | {"codes": []}, transcript=transcript)
    return Outcome(status="ok", answer=discharge["diagnosis"], data=data | extra | discharge, transcript=transcript)


def _baseline(view: Literal["complaint", "note"]):
    async def run_baseline(case: Case, panel: Panel, settings: BaselineSettings, context: RunContext | None = None) -> Outcome:
        context = quiet(context)
        name = "baseline" if view == "complaint" else "baseline-note"
        if view == "complaint":
            case.require("chief_complaint", protocol=name)
            given = f"Chief complaint: {case.chief_complaint}"
        else:
            case.require("note", protocol=name)
            given = f"Clinical note:\n\n{clinical_note(case)}"
        (_, physician), _ = seats(panel)
        transcript = context.transcript()
        messages = [{"role": "system", "content": BASELINE_SYSTEM}, {"role": "user", "content": f"{given}\n\n{DISCHARGE_REQUEST}"}]
        written = await physician.complete(messages, schema=Discharge, **_options(settings, physician, "discharge_max_tokens"))
        discharge = _discharge_data(written.parsed)
        transcript.record("decision", reply=written, speaker=PHYSICIAN, role="physician", round=1, phase="discharge", data=discharge)
        data = {"turns": 1, "questions": 0, "empty_prediction": settings.empty_prediction} | discharge
        return Outcome(status="ok", answer=discharge["diagnosis"], data=data, transcript=transcript)

    return run_baseline


# ---------------------------------------------------------------------------- scoring


def score(case: Case, outcome: Outcome) -> dict[str, float | None]:
    """ICD-10 metrics of the discharge against the case's gold codes, with the consult's bookkeeping.

    `finished` is 1 for a submitted discharge, 0 for an unfinished consult; `turns` counts messages.
    An unfinished consult scores as an empty prediction by default (`unfinished="empty"`, MedSyn's
    reading): leaving it out would let a physician that never submits on hard cases score better.
    With `unfinished="exclude"` its ICD-10 metrics are None, so means are over finished consults;
    `finished` counts both ways. Without gold codes the metrics are None; the invalid-code rate needs
    only the prediction. The ICD-10-CM table is required: without it this raises a UsageError naming
    the data folder, rather than scoring with columns missing.
    """
    finished = outcome.status == "ok"
    scores: dict[str, float | None] = {"finished": 1.0 if finished else 0.0, "turns": float(outcome.data.get("turns", 0))}
    names = [*metric_names(), "invalid_rate", "n_predicted", "empty"]
    if not finished and outcome.data.get("unfinished", "empty") == "exclude":
        return scores | dict.fromkeys(names)
    predicted = (outcome.data.get("codes") or []) if finished else []
    metrics = icd10_scores(predicted, case.reference.codes, empty=outcome.data.get("empty_prediction", "zero"), table=code_table())
    return scores | {name: metrics.get(name) for name in names}


# Kinds as medpanel.scoring.metrics declares them: the ICD-10 set metrics are per-sample shares.
CONSULT_METRICS = {"finished": PROPORTION, "turns": COUNT, "code_*": UNIT, "category_*": UNIT, "chapter_*": UNIT,
                   "invalid_rate": UNIT, "n_predicted": COUNT, "empty": PROPORTION}
SCORERS = (pure("icd10", score, CONSULT_METRICS),)

SPEC = ProtocolSpec(name="consult", run=run, settings=ConsultSettings, scorers=SCORERS, needs=("chief_complaint", "note"),
                    description="a physician with the chief complaint consults an assistant holding the note, then writes the discharge (MedSyn)")
BASELINE_CHIEF_COMPLAINT = ProtocolSpec(name="baseline", run=_baseline("complaint"), settings=BaselineSettings, scorers=SCORERS,
                                        needs=("chief_complaint",), description="the physician alone writes the discharge from the chief complaint")
BASELINE_FULL_NOTE = ProtocolSpec(name="baseline-note", run=_baseline("note"), settings=BaselineSettings, scorers=SCORERS,
                                  needs=("note",), description="the physician alone writes the discharge from the full note")
