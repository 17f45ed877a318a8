"""The consult on a small model (any seat with `model.small`, such as the embedded one): MedSyn's form,
held by code and grammar where a 135M model cannot hold it by itself.

    physician   asks real questions. A compact prompt with one worked example names the area of the
                history to ask about next (TOPICS, one a question, in the order a history is taken), and
                a grammar lets it write only a short question that opens with a question word and ends in
                '?', or "Diagnosis: ..." (no schema descriptions to copy). A question that repeats an
                earlier one is asked again once, held to naming the area; a second repeat ends the questions.
                After OFFER_AFTER questions code offers the discharge as the next step, a one-word choice
                (ask or submit, under a grammar) the physician makes each turn from then on; once every
                area was asked about, the note is told, or too few turns are left for a question and its
                answer, code sends it to the discharge
    discharge   the physician's diagnosis in its own words (at most six words, under the grammar; one that
                says two words twice or stops on a word like "of" is named once more, told why), then codes
                picked, in a short call of their own,
                from candidates that code looked up in the ICD-10-CM table from what the physician knows
                (its diagnosis, what it heard, the chief complaint): a small model cannot recall codes, a
                coder looks them up, and the grammar holds the pick to codes that exist
    assistant   answers from the note: code finds the note's sentences that bear on the question (its
                words, and those of the area asked about) and have not been told yet; the model picks one
                or two of them under a grammar, so an answer is the note's own words, one to three
                sentences, and never an earlier answer again. A small model that cannot decode under a
                schema is shown those sentences and answers in free text, cut to MAX_SENTENCES

The turn bound, the turn count and the scoring are the consult's (medpanel.protocols.consult). An
outcome of this profile says so: `data["profile"] == "small"`, with the code candidates it was shown.
Non-small seats keep MedSyn's own prompts and schemas.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, create_model

from medpanel.cases.model import Case
from medpanel.errors import StructuredOutputError, UsageError
from medpanel.models.base import Model, Reply
from medpanel.protocols.single import joined
from medpanel.scoring.form_checks import loops, repeats_earlier, stops_mid_phrase, words
from medpanel.scoring.icd10 import CodeTable, code_table
from medpanel.scoring.sentences import first_sentences, sentence_spans

OFFER_AFTER = 4  # questions asked (the evaluation and three areas) before code offers the small physician the discharge
MAX_SENTENCES = 3  # a free-text answer is cut to this many sentences
PASSAGES = 3  # note sentences the assistant is shown for one question
MAX_PICKED = 2  # of which it tells at most this many
CANDIDATES = 6  # codes looked up for the discharge
PER_CATEGORY = 2  # at most this many candidates share a three-character category
MAX_CODES = 3

# What the grammar lets the small physician write: a question (a question word, then up to 70 characters
# with no quote, backslash, newline or other question mark, then '?') or its diagnosis ("Diagnosis: ...",
# a few words). One pattern for every turn, so the schema (which the embedded model is shown in its system
# prompt) stays the same and each turn reuses the conversation's KV state; code accepts a diagnosis only
# once submission is offered. Only the grammar holds a reply to the pattern: one made without it (a
# scripted fake, a server without structured output) is read as written, a question unless it opens as
# a diagnosis does.
QUESTION_WORDS = ("What", "Which", "How", "When", "Where", "Why", "Who", "Did", "Does", "Do", "Is", "Are", "Was", "Were",
                  "Has", "Have", "Had", "Can", "Could", "Any")
DIAGNOSIS_OPENS = "Diagnosis: "
_ASKED = "(" + "|".join(QUESTION_WORDS) + r") [^?\"\\\n]{3,70}\?"
# At most six words, apart by a space or a comma and a space, one sentence. A word is letters (an apostrophe
# among them, one hyphen inside: "Crohn's", "Non-Hodgkin") or a number alone ("type 2"). Without digits,
# brackets and free hyphens inside words, a small model cannot run a phrase on ("URON2020",
# "3-year-old-patient-with-") past the word bound.
_WORD = r"([A-Za-z][A-Za-z']{0,19}(-[A-Za-z]{1,12})?|\d{1,2})"
_NAMED = DIAGNOSIS_OPENS + r"[A-Za-z][A-Za-z']{0,19}(-[A-Za-z]{1,12})?(,? " + _WORD + r"){0,5}\."
TURN_PATTERN = f"^({_ASKED}|{_NAMED})$"
DIAGNOSIS_PATTERN = f"^{_NAMED}$"


def about(topic_words: str) -> str:
    """The question pattern for a re-ask: it must name the area (`topic_words`, a regex of its words). No
    counted repeats here: with the alternation after them the grammar's automaton grows past what
    llguidance builds (it stops mid-reply); the schema's maxLength bounds the length instead."""
    return "^(" + "|".join(QUESTION_WORDS) + r") ([^?\"\\\n]* )?(" + topic_words + r")[^?\"\\\n]*\?$"


PHYSICIAN_SYSTEM = (
    "You are a doctor. You know only the patient's chief complaint; your assistant has read the whole clinical "
    "note. Find out about the case by asking the assistant short questions, one at a time.\n\n"
    "Example:\nYou: Does the patient have any allergies?\nAssistant: The note mentions no allergies."
)
# What the physician asks about, in the order a history is taken (MedSyn's own prompt names these areas):
# the words a question about it names (a regex, for a re-ask), and words the note uses there (for finding
# the sentences that answer). One area a question, so the questions differ; once each was asked about,
# the physician writes the discharge.
TOPICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "the symptoms and how they began": ("symptom|pain|began|start", ("pain", "fever", "symptom", "complain", "present", "began", "onset", "day", "week")),
    "the physical examination": ("exam", ("examination", "exam", "palpation", "percussion", "tender", "physical", "revealed", "found")),
    "the test and imaging results": ("test|laborator|blood|urine|analys|imag|scan|ultrasound|ray|CT|MRI",
                                     ("analysi", "blood", "urine", "laboratory", "level", "culture", "cytology", "test", "marker", "ultrasound",
                                      "scan", "tomography", "radiograph", "imaging", "resonance", "urography", "pyelography", "ray", "showed")),
    "the patient's past medical history": ("history|past|previous", ("history", "previou", "prior", "year", "diagnosed", "allergy", "smoker", "medical")),
    "the treatment given": ("treat|surg|therap|medica|operat", ("surgery", "performed", "treated", "treatment", "therapy", "underwent", "resection", "administered", "surgical")),
    "how the patient is doing now": ("now|today|current|follow|doing", ("discharged", "follow", "later", "currently", "evolution", "remain", "free", "recurrence", "month")),
}
OPENING = "Chief complaint: {complaint}\n\nYour first question: ask the assistant for their evaluation of the patient's condition."
NEXT = "Assistant: {answer}\n\nNow ask one question about {topic}."
OFFER = ("Assistant: {answer}\n\nYou have asked {questions} questions. If you know enough to name the diagnosis, choose submit "
         "and write the discharge; if you still need to know about {topic}, choose ask.")
READY = "You chose to write the discharge."
DIAGNOSIS_REQUEST = "Assistant: {answer}\n\n{why} Write \"" + DIAGNOSIS_OPENS.strip() + "\" and name the patient's diagnosis in a few words."
ASKED_BEFORE = "You asked that already. Ask one question about {topic} instead."
NOT_YET = "Not yet: first ask one question about {topic}."
NOT_YET_OPENING = "Not yet: first ask the assistant for their evaluation of the patient's condition."
CODER_SYSTEM = "You are a doctor writing a patient's discharge: you pick the ICD-10-CM codes for the diagnosis."
CODES_REQUEST = ("Chief complaint: {complaint}\nDiagnosis: {diagnosis}\n\nICD-10-CM codes whose descriptions match the "
                 "diagnosis or the complaint:\n{listed}\n\nPick the codes that fit this patient (one to three).")
UNAIDED = "Chief complaint: {complaint}\nDiagnosis: {diagnosis}\n\nWrite the ICD-10-CM codes for this diagnosis (one to three)."
NO_TURNS = "No turns are left for another question and its answer."
ASKED_ALL = "You have asked about every part of the history."
NOTHING_MORE = "The assistant has told you all the note holds."
NOTHING_NEW = "You have nothing new to ask."
RENAME = "That diagnosis {flaw}. Name the diagnosis again, once, in two to five words that end on the condition."

ASSISTANT_SYSTEM = (
    "You are the doctor's assistant. You have read the patient's clinical note; the doctor has not. Tell the doctor "
    "the one or two lines of the note (the choices in the schema below) that answer the question."
)
FREE_ASSISTANT_SYSTEM = (
    "You are the doctor's assistant. You have read the patient's clinical note; the doctor has not. For each "
    "question you are shown the lines of the note that bear on it: answer in one to three short sentences, in your own words."
)
ASK = "Doctor: {question}"
ASK_FREE = "Doctor: {question}\n\nLines of the note:\n{lines}"
NOTHING_LEFT = "The note says nothing more than I have told you."


# No docstrings on these shapes: a docstring becomes the schema's description, which the model is shown.
class Question(BaseModel):  # a physician's turn (the name the consult's budgets know it by): a question, or the diagnosis
    question: str = Field(min_length=1, max_length=120, json_schema_extra={"pattern": TURN_PATTERN})


@lru_cache(maxsize=16)
def question_about(topic: str | None) -> type[BaseModel]:
    """A turn that can only be a question, naming the area when there is one (for a re-ask: greedy decoding
    would say the same again)."""
    pattern = about(TOPICS[topic][0]) if topic in TOPICS else f"^{_ASKED}$"
    return create_model("Question", question=(str, Field(min_length=1, max_length=120, json_schema_extra={"pattern": pattern})))


class Choice(BaseModel):  # an offered turn: ask on, or submit and write the discharge
    choice: Literal["ask", "submit"]


class Diagnosis(BaseModel):
    diagnosis: str = Field(min_length=1, max_length=120, json_schema_extra={"pattern": DIAGNOSIS_PATTERN})


def diagnosis_flaw(diagnosis: str) -> str | None:
    """What is wrong with a named diagnosis' form, or None: it says two words twice ("Renal failure, Renal
    failure"), or it stops on a word that leads on ("... with")."""
    tokens = words(diagnosis)
    if loops(diagnosis, 2) or (len(tokens) == 2 and tokens[0] == tokens[1]):
        return "says the same words twice"
    stop = stops_mid_phrase(diagnosis)
    return None if stop is None else f"stops on '{stop}'"


def named_diagnosis(text: str) -> str | None:
    """The diagnosis a physician's turn names ("Diagnosis: Renal colic." -> "Renal colic"), or None for a question."""
    text = text.strip()
    if not text.startswith(DIAGNOSIS_OPENS):
        return None
    return text[len(DIAGNOSIS_OPENS):].strip().rstrip(".").strip() or None


def codes_schema(candidates: list[str] | None) -> type[BaseModel]:
    """The discharge's codes: the grammar lets the model write only the candidates (any code-shaped string
    when there are none); validation reads any code-shaped string, so a reply made without the grammar
    (a scripted fake) is read as the consult's Discharge reads it."""
    from medpanel.protocols.consult import CODE_PATTERN

    code = Annotated[str, Field(pattern=CODE_PATTERN, json_schema_extra={"enum": candidates} if candidates else None)]
    return create_model("Discharge", codes=(list[code], Field(min_length=1, max_length=MAX_CODES)))


def told_schema(lines: list[str]) -> type[BaseModel]:
    """One to MAX_PICKED of the lines shown, as the grammar lets the assistant write them (validation reads any text)."""
    line = Annotated[str, Field(min_length=1, json_schema_extra={"enum": lines})]
    return create_model("Told", lines=(list[line], Field(min_length=1, max_length=MAX_PICKED)))


# ---------------------------------------------------------------------------- looking codes up

_WORD = re.compile(r"[a-z]+")
# Words that say nothing about which condition a description names.
_STOP = frozenset("""a an the of and or in on to for with without by due as at from other unspecified specified not
    elsewhere classified nos site type patient patients than following into its his her their this that is was are""".split())
# Everyday clinical words and the words the ICD-10-CM descriptions use for them.
_SYNONYMS = {"stone": ("calculus",), "cancer": ("malignant", "neoplasm"), "carcinoma": ("malignant", "neoplasm"),
             "tumor": ("neoplasm",), "tumour": ("neoplasm",), "infection": ("infection", "infectious"),
             "kidney": ("kidney", "renal"), "renal": ("renal", "kidney"), "testicular": ("testicular", "testis"),
             "pulmonary": ("pulmonary", "lung"), "hepatic": ("hepatic", "liver"), "cardiac": ("cardiac", "heart"),
             "gastric": ("gastric", "stomach"), "cerebral": ("cerebral", "brain")}


def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def lookup_words(text: str) -> set[str]:
    """The words of `text` a lookup compares, lowercased, singular, without filler, with their table synonyms."""
    out: set[str] = set()
    for word in _WORD.findall((text or "").lower()):
        if word in _STOP or len(word) < 3:
            continue
        stem = _stem(word)
        out.update(_SYNONYMS.get(stem, (stem,)))
    return out


class CodeFinder:
    """ICD-10-CM codes by the words of their descriptions (tf-idf cosine over description words)."""

    def __init__(self, table: CodeTable) -> None:
        self.codes: list[str] = []
        self.descriptions: list[str] = []
        postings: dict[str, list[int]] = defaultdict(list)
        word_sets = []
        for row in table.rows.values():
            words = lookup_words(row["description"])
            if not words:
                continue
            index = len(self.codes)
            self.codes.append(row["code"])
            self.descriptions.append(row["description"])
            word_sets.append(words)
            for word in words:
                postings[word].append(index)
        n = len(self.codes)
        self.idf = {word: math.log(n / len(rows)) for word, rows in postings.items()}
        self.postings = dict(postings)
        self.norms = [math.sqrt(sum(self.idf[w] ** 2 for w in words)) or 1.0 for words in word_sets]

    def search(self, text: str, k: int = CANDIDATES) -> list[tuple[str, str]]:
        """Up to k (code, description) best matching `text`, at most PER_CATEGORY per category."""
        query = [w for w in lookup_words(text) if w in self.idf]
        if not query:
            return []
        norm = math.sqrt(sum(self.idf[w] ** 2 for w in query))
        scores: dict[int, float] = defaultdict(float)
        for word in query:
            weight = self.idf[word] ** 2
            for index in self.postings[word]:
                scores[index] += weight
        ranked = sorted(scores, key=lambda i: (-scores[i] / (norm * self.norms[i]), len(self.codes[i]), self.codes[i]))
        out: list[tuple[str, str]] = []
        per_category: dict[str, int] = defaultdict(int)
        for index in ranked:
            code = self.codes[index]
            if per_category[code[:3]] >= PER_CATEGORY:
                continue
            per_category[code[:3]] += 1
            out.append((code, self.descriptions[index]))
            if len(out) == k:
                break
        return out


@lru_cache(maxsize=2)
def _finder(table: CodeTable) -> CodeFinder:
    return CodeFinder(table)


# Where a discharge's candidate codes come from, and how many each gives: what the physician knows.
SOURCES = (("diagnosis", 4), ("heard", 3), ("complaint", 2))


def code_candidates(known: dict[str, str], k: int = CANDIDATES) -> list[tuple[str, str]]:
    """Codes for a discharge, looked up from what the physician knows (`known`: its diagnosis, what it
    heard, the chief complaint; SOURCES says how many each gives), at most k + 2; none without the
    ICD-10-CM table (the discharge then writes its codes unaided, as MedSyn's does)."""
    try:
        finder = _finder(code_table())
    except UsageError:
        return []
    found: dict[str, str] = {}
    for source, n in SOURCES:
        fresh = [(c, d) for c, d in finder.search(known.get(source) or "", k + n) if c not in found]
        found.update(fresh[:n])
    return list(found.items())[: k + 2]


# ---------------------------------------------------------------------------- the note, sentence by sentence


def note_sentences(case: Case) -> list[str]:
    """The note's sentences in order (sections' bodies, line by line), leaving out fragments of under four words."""
    out = []
    for body in case.note.values():
        for line in body.splitlines():
            out += [line[a:b].strip() for a, b in sentence_spans(line) if len(line[a:b].split()) >= 4]
    return out


def bearing_on(sentences: list[str], question: str, topic: str | None, told: list[str], k: int = PASSAGES) -> list[str]:
    """Up to k sentences not told yet (nor repeating 8 words of one told) that share most words with the
    question and the area asked about, best first; for the first question, with no area (the opening
    evaluation), the note's first sentences."""
    fresh = [i for i, s in enumerate(sentences) if s not in told and not repeats_earlier(s, told)]
    if topic is None and not told:
        return [sentences[i] for i in fresh[:k]]
    wanted = lookup_words(question) | set(TOPICS[topic][1] if topic in TOPICS else ())

    def score(i: int) -> int:
        words = lookup_words(sentences[i])
        return sum(1 for w in wanted if any(word.startswith(w) for word in words))

    return [sentences[i] for i in sorted(fresh, key=lambda i: (-score(i), i))[:k]]  # the best first: a small model tends to pick the first


# ---------------------------------------------------------------------------- the seats


class SmallPhysician:
    """The physician's side of a consult on a small model (see the module docstring).

    Its questions and its diagnosis share one schema, and each offer of the discharge another (a one-word
    choice): the embedded model writes the schema into the system prompt, so a call under a schema other
    than the last one's evaluates the conversation again, while calls that alternate between two each
    resume from their own kept prefix (local.PrefixCache)."""

    profile = "small"

    def __init__(self, case: Case, model: Model, options) -> None:
        self.case, self.model, self.options = case, model, options
        self.view = [{"role": "system", "content": PHYSICIAN_SYSTEM},
                     {"role": "user", "content": OPENING.format(complaint=case.chief_complaint)}]
        self.topic: str | None = None  # the area of the history the next question is about (None: the evaluation)
        self.offered = False  # this turn offers the discharge
        self.answer = ""  # the assistant's last answer
        self.exhausted = False  # the assistant said the note holds nothing more
        self.diagnosis: str | None = None
        self.heard: list[str] = []  # the assistant's answers

    async def turn(self, questions: int, turns_left: int, may_submit: bool) -> dict[str, Any]:
        """{"action", "message", "reply"} of one physician turn, and "note" where code sent it to the discharge."""
        why = NO_TURNS if turns_left <= 2 else ASKED_ALL if questions > len(TOPICS) else NOTHING_MORE if self.exhausted else None
        if may_submit and why is not None:
            return await self._name_diagnosis(why)
        offered = may_submit and self.offered
        if offered:  # code offers the discharge: the physician chooses
            offer = OFFER.format(answer=self.answer, questions=questions, topic=self.topic)
            chosen = await self.model.complete([*self.view[:-1], {"role": "user", "content": offer}], schema=Choice, **self.options("max_tokens"))
            if chosen.parsed.choice == "submit":
                step = await self._name_diagnosis(READY)
                return {**step, "reply": joined(chosen, step["reply"], step["reply"].text), "note": None}
        reply = await self.model.complete(self.view, schema=Question, **self.options("max_tokens"))
        said = reply.parsed.question.strip()
        early = named_diagnosis(said) is not None and not offered
        if early or (self.topic is not None and self._asked_before(said)):
            # Once, held to a question (about the area): greedy decoding would say the same again.
            self.view += [{"role": "assistant", "content": said},
                          {"role": "user", "content": NOT_YET_OPENING if self.topic is None else (NOT_YET if early else ASKED_BEFORE).format(topic=self.topic)}]
            try:
                reply = await self.model.complete(self.view, schema=question_about(self.topic), **self.options("max_tokens"))
            except StructuredOutputError:  # it could not keep to the held question: no new one to ask
                if not may_submit:
                    raise
                return await self._name_diagnosis(NOTHING_NEW)
            said = reply.parsed.question.strip()
            if may_submit and self._asked_before(said):  # nothing new to ask: the discharge is what is left
                return await self._name_diagnosis(NOTHING_NEW)
        self.view.append({"role": "assistant", "content": said})
        self.diagnosis = named_diagnosis(said) if offered else None
        if self.diagnosis is not None:
            return {"action": "submit", "message": said, "reply": reply}
        return {"action": "ask", "message": said, "reply": reply, "topic": self.topic}

    async def _name_diagnosis(self, why: str) -> dict[str, Any]:
        """Code sends the physician to the discharge (`why` says why): it names the diagnosis, under the turns'
        own schema first (which reuses the conversation's KV state), held to a diagnosis if it asks instead."""
        self.view[-1] = {"role": "user", "content": DIAGNOSIS_REQUEST.format(answer=self.answer, why=why)}
        reply = await self.model.complete(self.view, schema=Question, **self.options("max_tokens"))  # a turn's budget
        said = reply.parsed.question.strip()
        if named_diagnosis(said) is None:
            reply = await self.model.complete(self.view, schema=Diagnosis, **self.options("discharge_max_tokens"))
            said = reply.parsed.diagnosis.strip()
        flaw = diagnosis_flaw(named_diagnosis(said) or said)
        if flaw is not None:  # once more, told what was wrong (greedy decoding would say the same again)
            retry = [*self.view, {"role": "assistant", "content": said}, {"role": "user", "content": RENAME.format(flaw=flaw)}]
            again = await self.model.complete(retry, schema=Diagnosis, **self.options("discharge_max_tokens"))
            fixed = again.parsed.diagnosis.strip()
            if diagnosis_flaw(named_diagnosis(fixed) or fixed) is None:
                reply, said = joined(reply, again, fixed), fixed
        self.view.append({"role": "assistant", "content": said})
        self.diagnosis = named_diagnosis(said) or said.rstrip(".")  # a reply made without the grammar may lack the opening
        return {"action": "submit", "message": said, "reply": reply, "note": f"{why} The physician writes the discharge."}

    def _asked_before(self, question: str) -> bool:
        """Whether a question repeats one asked earlier (the same words, or 8 words in a row of one)."""
        asked = [m["content"] for m in self.view if m["role"] == "assistant"]
        mine = words(question)
        return any(words(earlier) == mine for earlier in asked) or repeats_earlier(question, asked)

    def hear(self, answer: str, turns_left: int, questions: int, may_submit: bool) -> None:
        self.answer, self.exhausted = answer, answer == NOTHING_LEFT
        self.heard.append(answer)
        self.topic = list(TOPICS)[questions - 1] if questions <= len(TOPICS) else None  # the opening asked for an evaluation
        self.offered = may_submit and questions >= OFFER_AFTER and self.topic is not None
        if self.topic is None:  # every area was asked about: the discharge comes next (see turn)
            self.view.append({"role": "user", "content": f"Assistant: {answer}"})
        else:
            self.view.append({"role": "user", "content": NEXT.format(answer=answer, topic=self.topic)})

    async def discharge(self) -> tuple[Reply, Any, dict[str, Any]]:
        """(the reply to record, the parsed discharge, data to add): codes for the diagnosis the physician
        named, picked from the ICD-10-CM table's candidates in a short call of its own (the diagnosis and
        the complaint are all the pick needs, and a fresh prompt costs a fraction of the conversation)."""
        from medpanel.protocols.consult import Discharge

        diagnosis = self.diagnosis or "unknown"
        complaint = self.case.chief_complaint or ""
        candidates = code_candidates({"diagnosis": diagnosis, "heard": " ".join(self.heard), "complaint": complaint})
        listed = "\n".join(f"{code} {description}" for code, description in candidates)
        ask = (CODES_REQUEST if listed else UNAIDED).format(complaint=complaint, diagnosis=diagnosis, listed=listed)
        written = await self.model.complete([{"role": "system", "content": CODER_SYSTEM}, {"role": "user", "content": ask}],
                                            schema=codes_schema([code for code, _ in candidates]), **self.options("discharge_max_tokens"))
        discharge = Discharge.model_validate({"diagnosis": diagnosis, "codes": list(written.parsed.codes)})
        return written, discharge, {"profile": self.profile, "code_candidates": [code for code, _ in candidates]}


class SmallAssistant:
    """The assistant's side on a small model: the note's sentences that answer each question (see the module docstring)."""

    profile = "small"
    trims = True  # its answers are recorded as told, not as the reply's JSON

    def __init__(self, case: Case, model: Model, options) -> None:
        self.model, self.options = model, options
        self.sentences = note_sentences(case)
        self.picks = model.supports_json_schema  # the model can be held to the lines it is offered
        self.told: list[str] = []

    async def answer(self, message: str, topic: str | None = None) -> tuple[Reply, str]:
        lines = bearing_on(self.sentences, message, topic, self.told) or [NOTHING_LEFT]
        if self.picks:  # the lines are the schema's choices (shown with it), so the prompt holds them once
            messages = [{"role": "system", "content": ASSISTANT_SYSTEM}, {"role": "user", "content": ASK.format(question=message)}]
            reply = await self.model.complete(messages, schema=told_schema(lines), **self.options("max_tokens"))
            text = " ".join(dict.fromkeys(line.strip() for line in reply.parsed.lines))
        else:
            shown = ASK_FREE.format(question=message, lines="\n".join(f"- {line}" for line in lines))
            reply = await self.model.complete([{"role": "system", "content": FREE_ASSISTANT_SYSTEM}, {"role": "user", "content": shown}],
                                              **self.options("max_tokens"))
            text, _ = first_sentences(" ".join(reply.text.split()), MAX_SENTENCES)
        self.told += [line for line in lines if line in text]
        return reply, text
