"""OpenTumorBoard's rubric judges: protocols over any judge model, each with a strict output schema.

    clinical equivalence   Specialist Turn: an answer against the real specialist's answer (1-5,
                           plus critical_error and unsupported_claim flags)
    conclusion alignment   Board Simulation: a conclusion against the real board's conclusion (1-5)
    four decisions         therapy / surgery / next_action / clinical_trial, each 1-5 or -1 (out of
                           scope), combined as a weighted mean over the dimensions in scope
    consistency            does the candidate's own discussion support its conclusion (0-5)

Every judge runs at temperature 0 and sees the case, the reference and the candidate inside tags
that the prompt declares to be data, not instructions. A reply that never validates (after the
model layer's bounded re-asks) or a call that fails for good leaves the item unscored, with the
error recorded: never a zero. A board response with no conclusion is a format failure scored at the
floor of each scale, without calling the judge on it.

The four-decision scope (positive / negative / absent per dimension) is decided from the reference
conclusion alone, in a first call that never sees the candidate, and frozen in a ScopeBook; the
scoring call's schema then locks every absent dimension to -1 and every dimension in scope to 1-5.

Any rubric's system prompt can be replaced by a text file (for instance the paper's released
prompt files) with `prompt_file`; the tagged user text and the output schema stay the same. The
default prompts (prompts.py) are medpanel's own wording of the paper's rubrics.

`mode="released"` reproduces the benchmark's own evaluation instead (released.py: requests, schemas
and checks; release_mode.py: the rubrics, and the training reward's judges); docs/judges.md lists
every difference between the two modes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import unicodedata
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from medpanel.cases.model import Case
from medpanel.errors import ModelCallError, UsageError
from medpanel.models.base import Model, Reply
from medpanel.models.messages import Image, Message
from medpanel.scoring.judges import prompts
# The four dimensions and OpenTumorBoard's weights for them (Appendix E.2: therapy 1.00, surgery 1.25,
# next action 1.15, clinical trial 2.00) come from the reward, so judge and reward cannot drift apart.
from medpanel.scoring.reward import DIMENSION_WEIGHTS as DECISION_WEIGHTS
from medpanel.scoring.reward import DIMENSIONS, decisions_mean
from medpanel.transcript import Transcript

RUBRICS = ("equivalence", "alignment", "decisions", "scope", "consistency")  # names a prompt file can be given for
DEFAULT_MAX_TOKENS = 512  # a 1,000-character rationale plus the JSON around it
NO_CONCLUSION = "The response has no conclusion to judge: a format failure, scored at the floor of the scale."
NO_ANSWER = "The response has no answer to judge: a format failure, scored at the floor of the scale."

# ---------------------------------------------------------------- untrusted data in the judge's user text

UNTRUSTED_TAGS = ("TARGET_SPECIALIST_ROLE", "CASE_SUMMARY", "SLIDE_DESCRIPTIONS", "QUESTION", "REFERENCE_ANSWER",
                  "REFERENCE_CONCLUSION", "CANDIDATE_RESPONSE")
UNTRUSTED_NOTE = prompts.data_note(UNTRUSTED_TAGS)

# What a reader could take for a tag's angle brackets: the ASCII ones, everything NFKC folds to them
# (small and full-width forms) and the common look-alikes (single guillemets, angle brackets, modifier letters).
_OPENERS = "<\ufe64\uff1c\u2039\u2329\u3008\u27e8\u276e\u02c2\u1438\u29fc"
_CLOSERS = ">\ufe65\uff1e\u203a\u232a\u3009\u27e9\u276f\u02c3\u1433\u29fd"
_SLASHES = "/\uff0f\u2215\u2044\u29f8"
_COMPACT_TAGS = {re.sub(r"[\W_]", "", t.casefold()): t for t in UNTRUSTED_TAGS}
_TAG_WINDOW = 400  # characters looked at after an opening bracket (attributes, padding, invisible characters)


def _compact(text: str) -> str:
    """`text` as a reader sees it: NFKC, no format characters (zero-width space/joiners, BOM, soft hyphen,
    bidi controls) or combining marks, casefolded, slash look-alikes as '/', and nothing but letters,
    digits and slashes (so spaces, underscores, hyphens and their variants inside a name do not count)."""
    folded = unicodedata.normalize("NFKC", text)
    kept = []
    for c in folded:
        if unicodedata.category(c) in ("Cf", "Mn", "Me", "Cc"):
            continue
        kept.append("/" if c in _SLASHES else c)
    return re.sub(r"[^\w/]|_", "", "".join(kept).casefold())


def _look_alike(inner: str) -> tuple[str, str] | None:
    """(slash, TAG) when `inner` (what follows an opening bracket) reads as one of our tags, with any attributes."""
    compact = _compact(inner)
    slash = "/" if compact.startswith("/") else ""
    name = compact.lstrip("/")
    for short, tag in _COMPACT_TAGS.items():
        if name.startswith(short):
            return slash, tag
    return None


def neutralise_tags(text: str) -> str:
    """`text` with every look-alike of our data tags defanged to `[TAG]` / `[/TAG]`.

    Matching is done on a normalised reading of each bracketed span (see `_compact`), so variants
    with attributes, zero-width or format characters, full-width or small forms, odd case or spacing
    are caught; the replacement is made in the original text. An opening bracket that reads as our
    tag but is never closed loses its bracket (`[` instead), so it cannot pair with ours."""
    pieces: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c not in _OPENERS:
            pieces.append(c)
            i += 1
            continue
        end = i + 1
        limit = min(n, i + 1 + _TAG_WINDOW)
        while end < limit and text[end] not in _CLOSERS and text[end] not in _OPENERS:
            end += 1
        closed = end < n and end < limit and text[end] in _CLOSERS
        found = _look_alike(text[i + 1 : end])
        if found is None:
            pieces.append(c)
            i += 1
        elif closed:
            pieces.append(f"[{found[0]}{found[1]}]")
            i = end + 1
        else:
            pieces.append("[")
            i += 1
    return "".join(pieces)


def tagged(tag: str, text: str | None) -> str:
    """`text` wrapped in `tag`. Any of our tags written inside the text, in any look-alike form, is
    defanged, so a candidate cannot close its own section early and speak to the judge from outside it."""
    clean = neutralise_tags(text or "").strip()
    return f"<{tag}>\n{clean}\n</{tag}>"


def evidence_text(case: Case) -> str:
    return tagged("CASE_SUMMARY", case.summary or "No case summary is available.") + "\n\n" + tagged("SLIDE_DESCRIPTIONS", case.slide_text())


def read_prompt_file(path: str | Path) -> str:
    """A system prompt from a text file, e.g. one of the paper's released judge or generation prompts."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"Prompt file {file} does not exist.", "Give the path of a text file holding the system prompt.")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"Cannot read prompt file {file}: {exc}.", "Give a readable UTF-8 text file.") from None
    if not text.strip():
        raise UsageError(f"Prompt file {file} is empty.", "Put the system prompt in the file.")
    return text


# ---------------------------------------------------------------- output schemas (strict: no extra keys)

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EquivalenceVerdict(_Strict):
    clinical_equivalence_score: int = Field(ge=1, le=5)
    critical_error: bool
    unsupported_claim: bool
    rationale: str = Field(min_length=1, max_length=1000)


class AlignmentScore(_Strict):
    score: int = Field(ge=1, le=5)
    rationale: str = Field(min_length=1, max_length=1000)


class AlignmentVerdict(_Strict):
    conclusion_alignment: AlignmentScore  # nested as in the paper's released schema


ScopeLabel = Literal["positive", "negative", "absent"]


class DecisionScope(_Strict):
    """Per dimension: the reference decided to do something (positive), decided against it (negative),
    or said nothing decisive about it (absent, hence out of scope)."""

    therapy: ScopeLabel
    surgery: ScopeLabel
    next_action: ScopeLabel
    clinical_trial: ScopeLabel
    rationale: str = Field(default="", max_length=800)


class ConsistencyVerdict(_Strict):
    consistency: int = Field(ge=0, le=5)
    rationale: str = Field(min_length=1, max_length=1000)


def decisions_schema(scope: Mapping[str, str]) -> type[BaseModel]:
    """The scoring call's schema: an absent dimension can only be -1, one in scope only 1-5."""
    fields: dict[str, Any] = {
        dim: ((Literal[-1] if scope[dim] == "absent" else Literal[1, 2, 3, 4, 5]), ...) for dim in DIMENSIONS
    }
    fields["rationale"] = (str, Field(min_length=1, max_length=1200))
    return create_model("FourDecisions", __base__=_Strict, **fields)


# ---------------------------------------------------------------- pure parts

def in_scope(scope: Mapping[str, str]) -> list[str]:
    return [dim for dim in DIMENSIONS if scope.get(dim, "absent") != "absent"]


def force_scope(scores: Mapping[str, int], scope: Mapping[str, str]) -> dict[str, int]:
    """Lock every dimension the reference leaves out of scope to -1, whatever the judge said about it."""
    return {dim: (-1 if scope.get(dim, "absent") == "absent" else int(scores[dim])) for dim in DIMENSIONS}


def weighted_decision_mean(scores: Mapping[str, int], weights: Mapping[str, float] = DECISION_WEIGHTS) -> float | None:
    """Weighted mean of the dimensions scored 1-5; -1 (out of scope) is left out of numerator and
    denominator alike. None when no dimension is in scope. Divide by 5 for the paper's 0-1 reward term.
    (The arithmetic is the reward's own `decisions_mean`, so judge and reward agree by construction.)"""
    return decisions_mean({dim: scores.get(dim, -1) for dim in DIMENSIONS}, weights)


# ---------------------------------------------------------------- results

Status = Literal["ok", "format_failure", "failed"]

# The scores each rubric produces; a failed judgement reports all of them as None (unscored).
SCORE_NAMES: dict[str, tuple[str, ...]] = {
    "clinical_equivalence": ("clinical_equivalence", "critical_error", "unsupported_claim"),
    "conclusion_alignment": ("conclusion_alignment",),
    "four_decisions": ("four_decisions", *(f"decision_{d}" for d in DIMENSIONS)),
    "consistency": ("consistency",),
}


JudgeMode = Literal["medpanel", "released"]
JUDGE_MODES: tuple[str, ...] = ("medpanel", "released")


def check_mode(mode: str) -> str:
    if mode not in JUDGE_MODES:
        raise UsageError(f"Unknown judge mode '{mode}'.", "Use --judge-mode medpanel (the default) or released (the benchmark's own evaluation).")
    return mode


class JudgeResult(BaseModel):
    rubric: str  # clinical_equivalence | conclusion_alignment | four_decisions | consistency
    status: Status
    mode: str = "medpanel"  # medpanel | released | reward (the training reward's judges)
    scores: dict[str, float | None] = Field(default_factory=dict)
    verdict: dict[str, Any] | None = None  # the judge's validated reply
    scope: dict[str, str] | None = None  # four decisions only: the frozen scope used
    error: str | None = None  # why a failed judgement is unscored
    judge: str = ""
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0

    @property
    def rationale(self) -> str:
        if self.error:
            return self.error
        verdict = self.verdict or {}
        if "conclusion_alignment" in verdict:
            return verdict["conclusion_alignment"].get("rationale", "")
        return str(verdict.get("rationale", ""))

    def charge(self, reply: Reply) -> None:
        self.calls += 1
        self.input_tokens += reply.usage.input_tokens
        self.output_tokens += reply.usage.output_tokens
        self.cost_usd += reply.cost_usd
        self.latency_s += reply.latency_s


def failed(rubric: str, judge: Model, error: str) -> JudgeResult:
    return JudgeResult(rubric=rubric, status="failed", judge=judge.id, error=error,
                       scores={name: None for name in SCORE_NAMES[rubric]})


def record(transcript: Transcript, result: JudgeResult) -> None:
    """Add a judgement to a transcript as a score event, with its tokens and cost."""
    transcript.add("score", result.rationale, speaker="Judge", role=result.rubric, model=result.judge, phase="judge",
                   data=result.model_dump(mode="json"), input_tokens=result.input_tokens, output_tokens=result.output_tokens,
                   latency_s=result.latency_s, cost_usd=result.cost_usd)


def merged_scores(results: Mapping[str, JudgeResult] | list[JudgeResult]) -> dict[str, float | None]:
    """All rubrics' scores in one dict, plus judge_failed (1.0 when any rubric is unscored)."""
    items = list(results.values()) if isinstance(results, Mapping) else list(results)
    scores: dict[str, float | None] = {}
    for result in items:
        scores.update(result.scores)
    scores["judge_failed"] = 1.0 if any(r.status == "failed" for r in items) else 0.0
    return scores


# ---------------------------------------------------------------- prompts (medpanel's own wording: prompts.py)

EQUIVALENCE_SYSTEM = prompts.equivalence(UNTRUSTED_TAGS)
ALIGNMENT_SYSTEM = prompts.alignment(UNTRUSTED_TAGS)
SCOPE_SYSTEM = prompts.scope(UNTRUSTED_TAGS)
DECISIONS_SYSTEM = prompts.decisions_locked(UNTRUSTED_TAGS)
CONSISTENCY_SYSTEM = prompts.consistency(UNTRUSTED_TAGS)

DEFAULT_PROMPTS = {"equivalence": EQUIVALENCE_SYSTEM, "alignment": ALIGNMENT_SYSTEM, "decisions": DECISIONS_SYSTEM,
                   "scope": SCOPE_SYSTEM, "consistency": CONSISTENCY_SYSTEM}


def system_prompt(rubric: str, prompt_files: Mapping[str, str | Path] | None = None) -> str:
    path = (prompt_files or {}).get(rubric)
    return read_prompt_file(path) if path else DEFAULT_PROMPTS[rubric]


def check_prompt_files(prompt_files: Mapping[str, str | Path] | None) -> dict[str, Path]:
    """Validate {rubric: path} up front, so a typo fails before any model is called."""
    checked: dict[str, Path] = {}
    for rubric, path in (prompt_files or {}).items():
        if rubric not in RUBRICS:
            raise UsageError(f"Unknown rubric '{rubric}' for a prompt file.", f"Name one of: {', '.join(RUBRICS)}.")
        read_prompt_file(path)
        checked[rubric] = Path(path)
    return checked


# ---------------------------------------------------------------- one judge call

async def _ask(judge: Model, result: JudgeResult, system: str, user: str, schema: type[BaseModel], *,
               images: list[Image], max_tokens: int) -> BaseModel | None:
    """One judge call at temperature 0. On a call that fails for good, marks `result` failed and returns None."""
    try:
        reply = await judge.complete([Message(role="system", content=system), Message(role="user", content=user, images=images)],
                                     schema=schema, temperature=0.0, max_tokens=max_tokens)
    except ModelCallError as exc:  # includes StructuredOutputError: invalid after the bounded re-asks
        result.status, result.error = "failed", f"{getattr(exc, 'kind', 'error')}: {exc.problem}"
        result.scores = {name: None for name in SCORE_NAMES[result.rubric]}
        result.calls += 1
        return None
    result.charge(reply)
    return reply.parsed


def _images(judge: Model, case: Case, use_images: bool) -> list[Image]:
    return case.images() if use_images and judge.supports_vision else []


# ---------------------------------------------------------------- Specialist Turn: clinical equivalence

def equivalence_user_text(case: Case, candidate: str, reference: str) -> str:
    return "\n\n".join([
        tagged("TARGET_SPECIALIST_ROLE", case.target_role), evidence_text(case), tagged("QUESTION", case.question),
        tagged("REFERENCE_ANSWER", reference), tagged("CANDIDATE_RESPONSE", candidate),
    ])


async def judge_equivalence(judge: Model, case: Case, candidate: str | None, reference: str | None = None, *,
                            prompt_file: str | Path | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
                            images: bool = True, mode: JudgeMode = "medpanel") -> JudgeResult:
    """Clinical equivalence of a specialist's answer to the reference answer (the case's, unless given).
    `mode="released"`: the benchmark's own request and checks (release_mode.py; budget and images its own)."""
    if check_mode(mode) == "released":
        from medpanel.scoring.judges import release_mode

        return await release_mode.judge_equivalence(judge, case, candidate, reference, prompt_file=prompt_file)
    rubric = "clinical_equivalence"
    reference = reference if reference is not None else case.reference.answer
    if not reference or not reference.strip():
        return failed(rubric, judge, f"case '{case.id}' has no reference answer to judge against")
    if not candidate or not candidate.strip():
        return JudgeResult(rubric=rubric, status="format_failure", judge=judge.id, error=None, verdict={"rationale": NO_ANSWER},
                           scores={"clinical_equivalence": 1.0, "critical_error": 0.0, "unsupported_claim": 0.0})
    result = JudgeResult(rubric=rubric, status="ok", judge=judge.id)
    system = read_prompt_file(prompt_file) if prompt_file else EQUIVALENCE_SYSTEM
    verdict = await _ask(judge, result, system, equivalence_user_text(case, candidate, reference), EquivalenceVerdict,
                         images=_images(judge, case, images), max_tokens=max_tokens)
    if isinstance(verdict, EquivalenceVerdict):
        result.verdict = verdict.model_dump()
        result.scores = {"clinical_equivalence": float(verdict.clinical_equivalence_score),
                         "critical_error": float(verdict.critical_error), "unsupported_claim": float(verdict.unsupported_claim)}
    return result


# ---------------------------------------------------------------- Board Simulation: alignment, decisions, consistency

def board_user_text(case: Case, reference: str, candidate: str) -> str:
    return "\n\n".join([evidence_text(case), tagged("REFERENCE_CONCLUSION", reference), tagged("CANDIDATE_RESPONSE", candidate)])


def _board_reference(case: Case, reference: str | None) -> str | None:
    text = reference if reference is not None else case.reference.conclusion
    return text if text and text.strip() else None


async def judge_alignment(judge: Model, case: Case, conclusion: str | None, reference: str | None = None, *,
                          prompt_file: str | Path | None = None, max_tokens: int = DEFAULT_MAX_TOKENS) -> JudgeResult:
    rubric = "conclusion_alignment"
    reference = _board_reference(case, reference)
    if reference is None:
        return failed(rubric, judge, f"case '{case.id}' has no reference conclusion to judge against")
    if not conclusion or not conclusion.strip():
        return JudgeResult(rubric=rubric, status="format_failure", judge=judge.id, scores={"conclusion_alignment": 1.0},
                           verdict={"conclusion_alignment": {"score": 1, "rationale": NO_CONCLUSION}})
    result = JudgeResult(rubric=rubric, status="ok", judge=judge.id)
    system = read_prompt_file(prompt_file) if prompt_file else ALIGNMENT_SYSTEM
    verdict = await _ask(judge, result, system, board_user_text(case, reference, conclusion), AlignmentVerdict,
                         images=[], max_tokens=max_tokens)
    if isinstance(verdict, AlignmentVerdict):
        result.verdict = verdict.model_dump()
        result.scores = {"conclusion_alignment": float(verdict.conclusion_alignment.score)}
    return result


async def judge_consistency(judge: Model, case: Case, response: str | None, conclusion: str | None, reference: str | None = None, *,
                            prompt_file: str | Path | None = None, max_tokens: int = DEFAULT_MAX_TOKENS) -> JudgeResult:
    """Whether the candidate's discussion supports its own conclusion (`response` is the whole meeting)."""
    rubric = "consistency"
    reference = _board_reference(case, reference)
    if reference is None:
        return failed(rubric, judge, f"case '{case.id}' has no reference conclusion to judge against")
    if not conclusion or not conclusion.strip():
        return JudgeResult(rubric=rubric, status="format_failure", judge=judge.id, scores={"consistency": 0.0},
                           verdict={"consistency": 0, "rationale": NO_CONCLUSION})
    result = JudgeResult(rubric=rubric, status="ok", judge=judge.id)
    system = read_prompt_file(prompt_file) if prompt_file else CONSISTENCY_SYSTEM
    verdict = await _ask(judge, result, system, board_user_text(case, reference, response or conclusion), ConsistencyVerdict,
                         images=[], max_tokens=max_tokens)
    if isinstance(verdict, ConsistencyVerdict):
        result.verdict = verdict.model_dump()
        result.scores = {"consistency": float(verdict.consistency)}
    return result


class ScopeBook:
    """Four-decision scopes, frozen once per (judge, scope prompt, reference conclusion).

    The first judging of a reference asks the judge for its scope (reference only); every later
    judging of that reference, whatever the candidate, reuses it. Concurrent judgings of one
    reference share a single scope call. With a `path`, scopes persist as JSON across runs.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self._scopes: dict[str, dict[str, str]] = {}
        self._pending: dict[str, asyncio.Future] = {}
        self.decided = 0  # scope calls made by this book (not loaded, not reused)
        if self.path and self.path.exists():
            try:
                raw = json.loads(self.path.read_text())
                self._scopes = {k: DecisionScope.model_validate(v).model_dump() for k, v in raw.items()}
            except (OSError, ValueError, AttributeError, ValidationError) as exc:
                raise UsageError(f"Scope file {self.path} is not a valid scope book: {exc}.", "Delete it or point --scope-file elsewhere.") from None

    @staticmethod
    def key(judge_id: str, system: str, reference: str) -> str:
        body = json.dumps([judge_id, hashlib.sha256(system.encode()).hexdigest(), " ".join(reference.split())])
        return hashlib.sha256(body.encode()).hexdigest()

    def __len__(self) -> int:
        return len(self._scopes)

    def get(self, key: str) -> dict[str, str] | None:
        return self._scopes.get(key)

    async def freeze(self, key: str, decide: Callable[[], Awaitable[dict[str, str] | None]]) -> dict[str, str] | None:
        """The frozen scope for `key`, deciding it once. A failed decision (None) is not frozen."""
        if key in self._scopes:
            return self._scopes[key]
        if key not in self._pending:
            self._pending[key] = asyncio.ensure_future(decide())
            self.decided += 1
        task = self._pending[key]
        try:
            scope = await asyncio.shield(task)
        finally:
            if task.done():
                self._pending.pop(key, None)
        if scope is not None and key not in self._scopes:
            self._scopes[key] = scope
            self.save()
        return scope

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps(self._scopes, indent=1, sort_keys=True))
        os.replace(tmp, self.path)  # atomic: a crash never leaves a half-written book


def scope_user_text(reference: str) -> str:
    return tagged("REFERENCE_CONCLUSION", reference)


_SCOPE_LINES = {"absent": "out of scope: answer -1", "positive": "in scope (the reference decided to act): score 1-5",
                "negative": "in scope (the reference decided against acting): score 1-5"}


def decisions_user_text(case: Case, reference: str, conclusion: str, scope: Mapping[str, str]) -> str:
    lines = [f"- {dim}: {_SCOPE_LINES[scope[dim]]}" for dim in DIMENSIONS]
    return board_user_text(case, reference, conclusion) + "\n\nScope, fixed from the reference conclusion alone:\n" + "\n".join(lines)


async def judge_decisions(judge: Model, case: Case, conclusion: str | None, reference: str | None = None, *,
                          scopes: ScopeBook | None = None, prompt_file: str | Path | None = None,
                          scope_prompt_file: str | Path | None = None, max_tokens: int = DEFAULT_MAX_TOKENS) -> JudgeResult:
    """The four-decision rubric in two calls: scope from the reference alone (frozen), then the scores."""
    rubric = "four_decisions"
    reference = _board_reference(case, reference)
    if reference is None:
        return failed(rubric, judge, f"case '{case.id}' has no reference conclusion to judge against")
    result = JudgeResult(rubric=rubric, status="ok", judge=judge.id)
    scopes = scopes if scopes is not None else ScopeBook()
    scope_system = read_prompt_file(scope_prompt_file) if scope_prompt_file else SCOPE_SYSTEM

    spent: list[JudgeResult] = []  # the scope call's accounting, when this judging is the one that makes it

    async def decide() -> dict[str, str] | None:
        probe = JudgeResult(rubric=rubric, status="ok", judge=judge.id)
        spent.append(probe)
        read = await _ask(judge, probe, scope_system, scope_user_text(reference), DecisionScope, images=[], max_tokens=max_tokens)
        return read.model_dump() if isinstance(read, DecisionScope) else None

    scope = await scopes.freeze(ScopeBook.key(judge.id, scope_system, reference), decide)
    probe = spent[0] if spent else None
    if probe is not None:
        result.calls, result.input_tokens, result.output_tokens = probe.calls, probe.input_tokens, probe.output_tokens
        result.cost_usd, result.latency_s = probe.cost_usd, probe.latency_s
    if scope is None:
        result.status, result.error = "failed", f"the scope call failed: {probe.error if probe else 'see the concurrent judging of this reference'}"
        result.scores = {name: None for name in SCORE_NAMES[rubric]}
        return result
    result.scope = {dim: scope[dim] for dim in DIMENSIONS}
    dims = in_scope(scope)
    if not conclusion or not conclusion.strip():  # format failure: every dimension in scope at the floor
        values = force_scope({dim: 1 for dim in DIMENSIONS}, scope)
        result.status, result.verdict = "format_failure", {**values, "rationale": NO_CONCLUSION}
    elif not dims:  # nothing to compare: no second call
        values = force_scope({dim: -1 for dim in DIMENSIONS}, scope)
        result.verdict = {**values, "rationale": "The reference conclusion states no decision on any of the four dimensions."}
    else:
        system = read_prompt_file(prompt_file) if prompt_file else DECISIONS_SYSTEM
        verdict = await _ask(judge, result, system, decisions_user_text(case, reference, conclusion, scope), decisions_schema(scope),
                             images=[], max_tokens=max_tokens)
        if verdict is None:
            return result
        values = force_scope(verdict.model_dump(), scope)
        result.verdict = {**values, "rationale": verdict.rationale}  # type: ignore[attr-defined]
    mean = weighted_decision_mean(values)
    result.scores = {"four_decisions": mean, **{f"decision_{d}": (float(values[d]) if values[d] != -1 else None) for d in DIMENSIONS}}
    return result


def split_response(response: str) -> tuple[str | None, str]:
    """(conclusion or None, how it was found) of a board response, read as the benchmark's evaluation
    reads it (think block and code fence removed, lenient tags); None is a format failure."""
    from medpanel.scoring.board_format import extract_conclusion

    conclusion, how = extract_conclusion(response or "")
    return conclusion or None, how


async def judge_board(judge: Model, case: Case, response: str, reference: str | None = None, *,
                      scopes: ScopeBook | None = None, prompt_files: Mapping[str, str | Path] | None = None,
                      max_tokens: int = DEFAULT_MAX_TOKENS, mode: JudgeMode = "medpanel") -> dict[str, JudgeResult]:
    """Conclusion alignment, the four decisions and consistency for one written (or live) board.
    `mode="released"`: the benchmark's evaluation rubrics as it runs them (release_mode.py)."""
    if check_mode(mode) == "released":
        from medpanel.scoring.judges import release_mode

        return await release_mode.judge_board(judge, case, response, reference, scopes=scopes, prompt_files=prompt_files)
    files = check_prompt_files(prompt_files)
    conclusion, _ = split_response(response)
    alignment, decisions, consistency = await asyncio.gather(
        judge_alignment(judge, case, conclusion, reference, prompt_file=files.get("alignment"), max_tokens=max_tokens),
        judge_decisions(judge, case, conclusion, reference, scopes=scopes, prompt_file=files.get("decisions"),
                        scope_prompt_file=files.get("scope"), max_tokens=max_tokens),
        judge_consistency(judge, case, response, conclusion, reference, prompt_file=files.get("consistency"), max_tokens=max_tokens),
    )
    return {"conclusion_alignment": alignment, "four_decisions": decisions, "consistency": consistency}


# ---------------------------------------------------------------- judging a stored run

JUDGED_PROTOCOLS = ("specialist", "board", "board-live")


def _response_from_events(events: list[dict], conclusion: str | None) -> str:
    """A stored board rebuilt in the tagged format, for runs stored without their raw text."""
    turns = [e for e in events if e.get("kind") == "turn" and e.get("phase") == "discussion"]
    lines = [f"<turn {i}> {e.get('speaker') or e.get('role')}: {e.get('text', '')}" for i, e in enumerate(turns, 1)]
    return "<discussion>\n" + "\n".join(lines) + "\n</discussion>\n" + (f"<conclusion>{conclusion}</conclusion>" if conclusion else "")


async def judge_stored_run(store: Any, run_id: str, judge: Model, *, scopes: ScopeBook | None = None,
                           prompt_files: Mapping[str, str | Path] | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
                           concurrency: int = 4, on_item: Callable[[dict], None] | None = None,
                           mode: JudgeMode = "medpanel") -> list[dict]:
    """Judge every finished item of a stored specialist or board run and add the scores to the store.

    The cases (with their references) are reloaded from the run's dataset; judge calls are logged
    against their item. Items are written one by one, so a budget stop keeps what was judged.
    """
    from medpanel.cases import load_dataset
    from medpanel.models.runtime import call_scope
    from medpanel.protocols import get_protocol
    from medpanel.runs.runner import expand_items

    run = store.get_run(run_id)
    if run is None:
        raise UsageError(f"No run '{run_id}' in {store.path}.", "List runs with `medpanel runs`.")
    protocol = run["protocol"]
    if protocol not in JUDGED_PROTOCOLS:
        raise UsageError(f"Run {run_id} used the '{protocol}' protocol, which no rubric judge reads.",
                         f"Judge a run of one of: {', '.join(JUDGED_PROTOCOLS)}.")
    files = check_prompt_files(prompt_files)
    check_mode(mode)
    config = run["settings"]
    cases = {c.id: c for c in expand_items(get_protocol(run["protocol"]), load_dataset(config["dataset"], config.get("limit")))}
    items = [i for i in store.items(run_id) if i["status"] == "done"]
    lost = sorted({i["item_id"] for i in items} - set(cases))
    if lost:
        raise UsageError(f"The run's dataset '{config['dataset']}' no longer holds item(s) {', '.join(lost[:5])}.",
                         "Run the command from the folder the run was started in, with the same dataset files.")
    scopes = scopes if scopes is not None else ScopeBook()
    queue = list(items)
    rows: list[dict] = []

    async def judge_item(item: dict) -> dict:
        case, outcome = cases[item["item_id"]], item["outcome"] or {}
        token = call_scope.set((run_id, item["item_id"], item["repeat"]))
        try:
            if protocol == "specialist":
                candidate = outcome.get("answer")
                if mode == "released":  # the release reads the raw reply itself (specialist.released_answer_text)
                    from medpanel.protocols.specialist import released_answer_text

                    raws = [e.get("text") for e in store.events(run_id, item["item_id"], item["repeat"])
                            if e.get("kind") == "turn" and e.get("phase") == "answer"]
                    candidate = released_answer_text(raws[-1]) if raws else candidate
                results = {"clinical_equivalence": await judge_equivalence(
                    judge, case, candidate, prompt_file=files.get("equivalence"), max_tokens=max_tokens, mode=mode)}
            else:
                response = (outcome.get("data") or {}).get("raw") or _response_from_events(
                    store.events(run_id, item["item_id"], item["repeat"]), outcome.get("answer"))
                results = await judge_board(judge, case, response, scopes=scopes, prompt_files=files, max_tokens=max_tokens, mode=mode)
        finally:
            call_scope.reset(token)
        scores = merged_scores(results)
        store.add_scores(run_id, item["item_id"], item["repeat"], scores)
        return {"item": item["item_id"], "repeat": item["repeat"], "scores": scores,
                "results": {name: r.model_dump(mode="json") for name, r in results.items()}}

    async def worker() -> None:
        while queue:
            row = await judge_item(queue.pop(0))
            rows.append(row)
            if on_item:
                on_item(row)

    workers = [asyncio.create_task(worker()) for _ in range(max(1, min(concurrency, len(queue))))]
    try:
        await asyncio.gather(*workers)  # a budget stop raises here; the finally stops the other workers
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    return sorted(rows, key=lambda r: (r["item"], r["repeat"]))
