"""The tumor board on a small model (`model.small`: the embedded one, or one marked small), built turn by turn.

A 135M model cannot hold a whole meeting's form in one reply: it recites the summary, drops the roles
and the conclusion. So code holds the form and the model writes each turn's words, under constraints:

- who sits: the specialists the case's metadata names (`specialists`), else its site's team from a small
  catalogue (the site from `metadata["cancer_site"]`, or from the words of its summary and slides), with
  a specialist a finding calls for (a germline variant: the Genetic Counselor);
- the opening: the Moderator says what is to be decided and who will speak (written by code: asked to
  present the case, a small model recites it);
- the floor: the next unheard specialist (so never the same twice in a row), with a short question for
  that specialty;
- each turn: one or two sentences of at most 140 characters, under a schema pattern the grammar
  enforces; a sentence that repeats an 8-word run of an earlier turn, restates the turn's own first
  sentence, loops on a few words (a word pair twice), stops mid-phrase ("... the next step is."), gives
  the moderator's question back or mostly copies the case is dropped, and a turn left with nothing is asked up to two other questions (then
  left out);
- the plan: two sentences of counted words, the first "The board recommends OPTION ...", the option
  from a short menu for the case's site (MENUS, plus options any board may take), the second opening
  with a word that moves on ("The patient ...", "If ...").

Every call of one meeting starts with the same system message (the instructions, one short worked
example, the case in brief) and the same schema note, and differs only in its tail (the discussion so
far and the question), so a model that keeps KV states (the embedded one does) reads the case once per
meeting. The case in brief: the summary when short, else its first sentence and the slide captions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from medpanel.cases.model import Case
from medpanel.models.base import Model, Reply
from medpanel.errors import StructuredOutputError
from medpanel.models.messages import Message
from medpanel.models.structured import extract_json
from medpanel.scoring.form_checks import MOSTLY, conclusion_ok, loops, recites_case, repeated_phrase, stops_mid_phrase, words
from medpanel.scoring.sentences import sentence_spans

MODERATOR = "Moderator"
SPEAKERS = 4  # specialists at a small-model meeting: enough for the form, few enough to stay quick
CASE_WORDS = 250
RESTATE_WORDS = 4  # a second sentence sharing this many words in a row with the first says it again

# A sentence: a capital or digit first, then words of letters, digits and a little punctuation (a comma
# only before a space, a decimal point only between digits), and a full stop; at most 140 characters.
# No colons (a small model follows one with a list), no stray symbols or runs of dots to fall into, no
# "?" or "!": the sentences it allows are exactly the sentences the format score counts.
_WORDS = r"(\d\.\d|,? |[\w'/%+()-])*[\w)]\."
SENTENCE = {"type": "string", "minLength": 16, "maxLength": 140, "pattern": rf"^[A-Z\d]{_WORDS}$"}
# The plan's second sentence opens with a word that moves on (a small model otherwise says the
# recommendation again, word for word).
NEXT = ("He", "She", "This", "We", "If", "After", "The patient")
RECOMMENDS = "The board recommends"
# Words that name a management option (any site). A plan whose first sentence names none is asked again;
# they are checked by code, not listed in the schema, since a small model copies a list it is shown.
OPTION_WORDS = ("surveillance", "watchful", "observation", "monitoring", "follow-up", "surgery", "surgical", "resection",
                "excision", "ectomy", "operation", "radiotherapy", "radiation", "sbrt", "brachytherapy", "chemo", "immunotherapy",
                "systemic", "endocrine", "hormon", "targeted", "neoadjuvant", "adjuvant", "palliative", "trial", "biopsy",
                "staging", "referral", "transplant", "ablation", "stent", "therapy")

# One schema for every call of a meeting: a turn ("answer": one or two sentences) or the plan (two
# sentences: the recommendation, then what follows). One schema, one schema note: every call shares the
# prompt up to its tail. The model takes the shape its question asks for; a reply in the other shape is
# asked again under that shape alone. Plain field names and no descriptions (a small model copies those).
_TURN = {"type": "object", "properties": {"answer": {"type": "array", "items": SENTENCE, "minItems": 1, "maxItems": 2}},
         "required": ["answer"]}
TURN = {"title": "BoardTurn", **_TURN}

# The management options a plan may open with, by site (see SITES), then options any board may take.
# Left free, a 135M model recommends whatever its weights favour (a mastectomy for a prostate); held to
# a short menu by the grammar, it still chooses, and goes on in its own words ("... for his GG2 tumour").
MENUS: dict[str, tuple[str, ...]] = {
    "prostate": ("active surveillance", "radical prostatectomy", "radiotherapy with hormone therapy", "brachytherapy"),
    "bladder or kidney": ("transurethral resection", "radical cystectomy", "partial nephrectomy", "radical nephrectomy"),
    "lung": ("lobectomy", "neoadjuvant chemoimmunotherapy", "concurrent chemoradiotherapy", "stereotactic radiotherapy"),
    "breast": ("breast-conserving surgery", "mastectomy", "neoadjuvant chemotherapy", "endocrine therapy"),
    "colorectal": ("total neoadjuvant therapy", "chemoradiotherapy", "surgical resection", "adjuvant chemotherapy"),
    "pancreas": ("neoadjuvant chemotherapy", "pancreatoduodenectomy", "chemoradiotherapy", "biliary stenting"),
    "upper digestive": ("perioperative chemotherapy", "surgical resection", "endoscopic resection", "ablation"),
}
ANY_BOARD = ("surgery", "radiotherapy", "chemoradiotherapy", "systemic therapy", "further staging", "palliative care")


PLAN_CHARS = 260  # the plan's two sentences


def menu_for(site: str | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*MENUS.get(site or "", ()), *ANY_BOARD]))


def lists_options(sentence: str, menu: Sequence[str], most: int = 2) -> bool:
    """A recommendation that names more than `most` of the menu's options: the menu copied as a list
    ("active surveillance, radical prostatectomy, ..."), not a choice."""
    left, named = sentence.lower(), 0
    for option in sorted(menu, key=len, reverse=True):  # "breast-conserving surgery" is one option, not two
        left, found = re.subn(rf"\b{re.escape(option)}\b", " ", left)
        named += found > 0
    return named > most


def meeting_schemas(site: str | None) -> tuple[dict, dict]:
    """(SAY, PLAN) for a meeting at `site`: the plan opens with one of the site's options (menu_for),
    then the rest of its first sentence, then a sentence that moves on."""
    options = "|".join(menu_for(site))  # letters, spaces and hyphens: nothing to escape
    # Bounded by length, not by counted words: counted repeats of a word pattern grow the grammar past
    # what llguidance builds ("too many expressions constructed"). A plan that runs on loops, and is asked again.
    pattern = rf"^{RECOMMENDS} ({options})(\.|,? [a-z\d]{_WORDS}) ({'|'.join(NEXT)}) {_WORDS}$"
    plan = {"type": "object", "required": ["plan"], "properties": {"plan": {"type": "string", "maxLength": PLAN_CHARS, "pattern": pattern}}}
    return {"title": "BoardSay", "anyOf": [_TURN, plan]}, {"title": "BoardPlan", **plan}


SAY, PLAN = meeting_schemas(None)  # a meeting whose site is not known


def names_option(sentence: str) -> bool:
    lowered = sentence.lower()
    return any(word in lowered for word in OPTION_WORDS)


def reply_sentences(parsed: dict) -> list[str]:
    """The sentences of a reply under SAY, TURN or PLAN, in order."""
    items = parsed["answer"] if "answer" in parsed else [parsed["plan"]]
    texts = [" ".join(str(item).split()) for item in (items if isinstance(items, list) else [items])]
    return [text[a:b] for text in texts for a, b in sentence_spans(text)]


def loose_reading(text: str) -> dict | None:
    """A reply that is JSON of the right shape but breaks the patterns or lengths, or None."""
    try:
        data = extract_json(text)
    except ValueError:
        return None
    if isinstance(data, dict) and isinstance(data.get("answer"), (list, str)):
        return {"answer": data["answer"]}
    if isinstance(data, dict) and isinstance(data.get("plan"), str):
        return {"plan": data["plan"]}
    return None


# ---------------------------------------------------------------- who sits: the case's specialists

# site -> (words that point to it, its team in speaking order: findings first, then the treating specialties)
SITES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "prostate": (("prostat", "psa", "gleason"),
                 ("Radiologist", "Pathologist", "Urologist", "Radiation Oncologist", "Medical Oncologist")),
    "bladder or kidney": (("bladder", "urothelial", "renal cell", "kidney"),
                          ("Radiologist", "Pathologist", "Urologist", "Medical Oncologist", "Radiation Oncologist")),
    "lung": (("lung", "pulmonary", "nsclc", "lobe", "bronch", "pleura"),
             ("Radiologist", "Pathologist", "Thoracic Surgeon", "Medical Oncologist", "Radiation Oncologist", "Pulmonologist")),
    "breast": (("breast", "mammogra", "her2", "mastectomy"),
               ("Radiologist", "Pathologist", "Surgical Oncologist", "Medical Oncologist", "Radiation Oncologist")),
    "colorectal": (("colorectal", "rectal", "rectum", "colon", "sigmoid", "colonoscop"),
                   ("Radiologist", "Gastroenterologist", "Surgical Oncologist", "Radiation Oncologist", "Medical Oncologist")),
    "pancreas": (("pancrea", "ampulla", "whipple", "ca 19-9"),
                 ("Radiologist", "Gastroenterologist", "Surgical Oncologist", "Medical Oncologist", "Pathologist")),
    "upper digestive": (("gastric", "stomach", "oesophag", "esophag", "liver", "hepatocellular", "biliary"),
                        ("Radiologist", "Gastroenterologist", "Surgical Oncologist", "Medical Oncologist", "Pathologist")),
}
SITE_WORDS = {"pancreas": "pancreatic", "bladder or kidney": "urological", "upper digestive": "upper digestive"}  # for the opening
GENERAL_TEAM = ("Radiologist", "Pathologist", "Surgical Oncologist", "Medical Oncologist", "Radiation Oncologist")
# Findings that bring one more specialist to the table, whatever the site.
CALLED_FOR = {"Genetic Counselor": ("brca", "germline", "lynch syndrome", "pathogenic variant")}

# The moderator's question to each specialty: short, different from one another, and each of the form
# "what is / what does ...", which a small model answers with a statement ("The imaging shows ...")
# where a yes-no question or a "how would you" draws the question back as its answer.
QUESTIONS = {
    "Radiologist": "what does the imaging show?",
    "Pathologist": "what do the pathology findings show?",
    "Urologist": "what are the surgical options?",
    "Thoracic Surgeon": "what are the surgical options?",
    "Surgical Oncologist": "what are the surgical options?",
    "Radiation Oncologist": "what is the role of radiotherapy here?",
    "Medical Oncologist": "what is the role of systemic therapy here?",
    "Pulmonologist": "what does the lung function allow?",
    "Gastroenterologist": "what do the endoscopy findings show?",
    "Nuclear Medicine Physician": "what do the nuclear scans show?",
    "Geriatrician": "what does the patient's fitness allow?",
    "Palliative Care Physician": "what are the patient's symptom needs?",
    "Genetic Counselor": "what is the role of genetic testing here?",
    "Oncology Nurse Navigator": "what support does the patient need?",
}
DEFAULT_QUESTION = "what is your recommendation?"
# Asked, in turn, of a specialist whose answer drew nothing new (each question draws other words from a greedy model).
AGAIN_QUESTIONS = ("what is your recommendation?", "what would you add for this patient?")


def case_words(case: Case) -> str:
    """What the case says, lowercased, for finding its site: summary, slides and any stated site."""
    parts = [case.summary, case.slide_text() if case.slides else "", str(case.metadata.get("slides_text") or "")]
    return " ".join(p for p in parts if p).lower()


def site_of(case: Case) -> str | None:
    """The case's site: the one its metadata names, else the one whose words its text uses most."""
    stated = " ".join(str(case.metadata.get(k) or "") for k in ("cancer_site", "cancer_type", "site")).lower()
    for text in (stated, case_words(case)):
        if not text.strip():
            continue
        hits = {site: sum(text.count(word) for word in clues) for site, (clues, _) in SITES.items()}
        best = max(hits, key=hits.get)
        if hits[best]:
            return best
    return None


def board_roles(case: Case, limit: int = SPEAKERS, required: Sequence[str] = (), known: Iterable[str] = ()) -> list[str]:
    """The specialists who speak, in speaking order: `required` first, then those the case's metadata
    names (matched to `known` roles without case), then those a finding calls for, then the site's team."""
    by_lower = {r.lower(): r for r in [*known, *QUESTIONS]}
    named = case.metadata.get("specialists") or []
    named = [by_lower.get(str(n).strip().lower(), str(n).strip()) for n in (named if isinstance(named, list) else [named])]
    text = case_words(case)
    called = [role for role, clues in CALLED_FOR.items() if any(c in text for c in clues)]
    site = site_of(case)
    team = SITES[site][1] if site else GENERAL_TEAM
    # A called-for specialist takes the last seat of the team, so the treating specialties still speak.
    ordered = [*required, *named, *team[: max(limit - len(called), 0)], *called, *team]
    roles = [r for r in dict.fromkeys(ordered) if r and r != MODERATOR]
    return roles[: max(limit, len(required))]


def next_speaker(roles: Sequence[str], given: Sequence[str]) -> str | None:
    """Who has the floor next: the first seated specialist not yet `given` it, else None (all have had it).
    Nobody speaks twice in a row, since each has the floor once before the meeting closes."""
    return next((r for r in roles if r not in set(given)), None)


def question_for(role: str, again: int = 0) -> str:
    """The moderator's question to `role`; `again`: the how-manieth time it is asked this turn, from 0."""
    return f"{role}, {AGAIN_QUESTIONS[again - 1] if again else QUESTIONS.get(role, DEFAULT_QUESTION)}"


def opening_text(case: Case, roles: Sequence[str]) -> str:
    """The Moderator's opening: what is to be decided and who will speak, never the summary."""
    site = site_of(case)
    subject = f"this patient's {SITE_WORDS.get(site, site)} cancer" if site else "this patient's cancer"
    names = [f"the {r}" for r in roles]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"We are here to agree on a management plan for {subject}. I will ask {listed} for their views in turn."


def compact_case(case: Case, max_words: int = CASE_WORDS) -> str:
    """The case in few words, since a small model reads every word of it at each meeting: the summary
    when it is short; else its first sentence and the slide captions when those are shorter (slides
    restate the summary in brief); else the summary's first sentences up to `max_words` words."""
    summary = " ".join(case.summary.split())
    if len(summary.split()) <= max_words:
        return summary
    spans = sentence_spans(summary)
    first = summary[: spans[0][1]] if spans else summary
    captions = [" ".join(s.caption.split()) for s in case.slides if s.caption.strip()]
    if captions and len(" ".join([first, *captions]).split()) < len(summary.split()):
        return "\n".join([first, *(f"Slide {i}: {c}" for i, c in enumerate(captions, 1))])
    kept, used = [], 0
    for start, end in spans:
        n = len(summary[start:end].split())
        if kept and used + n > max_words:
            break
        kept.append(summary[start:end])
        used += n
    return " ".join(kept)


# ---------------------------------------------------------------- the calls

SYSTEM = (
    "This is a tumor board meeting about the patient below. Each specialist answers the moderator in one or "
    "two short sentences of their own, from their own specialty, without repeating the case. At the end the "
    "moderator states the board's plan.\n"
    "Example:\nModerator: Pathologist, what does the biopsy show?\n"
    "Pathologist: The biopsy confirms the cancer, and its grade favours treating it.\n\n"
    "The patient:\n{case}"
)
CLOSING = ("To close, the board's plan:", "To close, the board's plan and the next step:")


def loops_on_words(sentence: str) -> bool:
    """A small model stuck on a phrase: a sentence that says a word pair twice ("radical prostatectomy,
    radical prostatectomy", "please, please, please"), or of 8 words or more with under half of them distinct."""
    tokens = words(sentence)
    return loops(sentence, 2) or (len(tokens) >= 8 and len(set(tokens)) < len(tokens) / 2)


def echoes_question(sentence: str, question: str, role: str) -> bool:
    """A sentence that gives the moderator's line back instead of answering it: it opens by addressing the
    speaker ("Pathologist, what do ...", "The Thoracic Surgeon. ..."; "The pathologist examines ..." is an
    answer) or asks the question's own opening ("what do the ..."; the answer "The pathology findings
    show ..." shares only its topic)."""
    addressed = re.match(rf"(the )?{re.escape(role)}\s*[,.:]", sentence.strip(), flags=re.I) is not None
    asked = words(question.split(",", 1)[-1])[:3]
    return addressed or (len(asked) == 3 and repeated_phrase(sentence, [" ".join(asked)], 3) is not None)


def fresh_sentences(said: Sequence[str], earlier: Sequence[str], case_text: str = "", question: str = "", role: str = "") -> list[str]:
    """The sentences that repeat no 8-word run of an earlier turn, restate no earlier sentence kept here
    (the same words, or RESTATE_WORDS of them in a row: a small model's second sentence often says its first
    again), do not loop on a few words, do not give the `question` back to the moderator, and do not
    mostly copy the case."""
    kept: list[str] = []
    for sentence in said:
        restates = any(words(sentence) == words(k) for k in kept) or repeated_phrase(sentence, kept, RESTATE_WORDS) is not None
        if restates or loops_on_words(sentence) or stops_mid_phrase(sentence) or repeated_phrase(sentence, earlier) is not None:
            continue
        if role and echoes_question(sentence, question, role):
            continue
        if recites_case(sentence, case_text) <= MOSTLY:
            kept.append(sentence)
    return kept


async def complete(model: Model, messages: list[Message], schema: dict, options: dict) -> Reply:
    """model.complete under `schema`. A server that enforces the JSON but not its patterns (Ollama, some
    gateways) may answer in the right shape outside the bounds: that reply is read as it is (its cost is
    not on record), and the bounds that matter hold here (sentences split, kept, counted, filtered)."""
    try:
        return await model.complete(messages, schema=schema, **options)
    except StructuredOutputError as problem:
        parsed = loose_reading(problem.last_text)
        if parsed is None:
            raise
        return Reply(text=problem.last_text, parsed=parsed, model=model.id)


@dataclass
class SmallMeeting:
    """One small-model meeting: the shared prompt prefix, and the calls that vary only its tail. `said`
    is the specialists' turns so far (the Moderator's opening is code's, and only invites echoes)."""

    case: Case
    temperature: float = 0.0
    options: dict = field(default_factory=dict)  # further call options (frequency_penalty)

    def __post_init__(self) -> None:
        self.system = SYSTEM.format(case=compact_case(self.case))
        site = site_of(self.case)
        self.menu = menu_for(site)
        self.say, self.plan = meeting_schemas(site)
        self.case_text = "\n".join(p for p in (self.case.summary, case_words(self.case)) if p)

    def tail(self, said: Sequence[tuple[str, str]], line: str) -> str:
        """The discussion so far, then the moderator's line: what follows the shared prefix. Each call's
        tail begins with the previous call's discussion, so it shares that too."""
        spoken = "".join(f"{role}: {text}\n" for role, text in said)
        return (f"Discussion so far:\n{spoken}\n" if spoken else "") + f"{MODERATOR}: {line}"

    async def ask(self, model: Model, user: str, shape: str, max_tokens: int) -> list[Reply]:
        """A call under SAY; asked again under the one shape wanted when the reply took the other."""
        messages = [Message(role="system", content=self.system), Message(role="user", content=user)]
        options = {"temperature": self.temperature, "max_tokens": max_tokens, **self.options}
        replies = [await complete(model, messages, self.say, options)]
        if shape not in replies[-1].parsed:
            replies.append(await complete(model, messages, TURN if shape == "answer" else self.plan, options))
        return replies

    async def speak(self, model: Model, role: str, said: Sequence[tuple[str, str]], max_tokens: int,
                    question: str | None = None) -> tuple[str, list[Reply], list[str]]:
        """One specialist's turn, answering `question` (default: the specialty's own): (its text, "" when
        all it said repeated the meeting; the replies it took; the sentences dropped). Asked a second,
        different question (AGAIN_QUESTIONS, in turn) while what it said drew nothing new."""
        earlier = [text for _, text in said]
        replies: list[Reply] = []
        offered: list[str] = []
        for asked in (question or question_for(role), *(question_for(role, again=n) for n in range(1, len(AGAIN_QUESTIONS) + 1))):
            user = f"{self.tail(said, asked)}\nAnswer as the {role}."
            replies += await self.ask(model, user, "answer", max_tokens)
            got = reply_sentences(replies[-1].parsed)
            offered += got
            kept = fresh_sentences(got, earlier, self.case_text, asked, role)[:2]
            if kept:
                break
        return " ".join(kept), replies, [s for s in offered if s not in kept]

    async def conclude(self, model: Model, said: Sequence[tuple[str, str]], max_tokens: int) -> tuple[str, list[Reply]]:
        """The board's plan: (its text, the replies it took). Asked once more, for the next step too, when
        its recommendation names no management option or lists the menu, or a sentence of it is dropped (see
        fresh_sentences). When neither attempt holds, the one that meets more of those checks is the plan."""
        replies: list[Reply] = []
        best: tuple[int, str] = (-1, "")
        for line in CLOSING:
            replies += await self.ask(model, self.tail(said, line), "plan", max_tokens)
            plan = reply_sentences(replies[-1].parsed)
            kept = fresh_sentences(plan, ())
            text = " ".join(kept if len(kept) >= 2 else plan)
            met = [len(kept) >= 2, bool(kept) and names_option(kept[0]), not lists_options(text, self.menu), conclusion_ok(text)]
            if all(met):
                return text, replies
            if sum(met) > best[0]:  # the first attempt wins a tie
                best = (sum(met), text)
        return best[1], replies
