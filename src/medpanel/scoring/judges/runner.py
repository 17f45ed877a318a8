"""The one rubric runner: every rubric, in medpanel's mode and in released mode, is judged through here.

A judging has one shape whatever the rubric: no reference means unscored (failed, never a zero); a
missing candidate is a format failure at the rubric's floor, with no call; otherwise one call to the
judge (`ask`), whose verdict is read into scores. The modes differ only in the `Request`: its prompt,
user text, schema and sampling, and how a reply is accepted. In medpanel's mode the model layer
validates against a pydantic schema and re-asks a bounded number of times. In released mode the
release's own checks read the raw reply once and a refused reply is a counted failure, as the
benchmark does (released.py builds those requests).

The four-decision scope is frozen through here too (`frozen_scope`), for both modes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from pydantic import BaseModel

from medpanel.cases.model import Case
from medpanel.errors import ModelCallError, StructuredOutputError
from medpanel.models.base import Model
from medpanel.models.messages import Image, Message
from medpanel.scoring.judges.schemas import DecisionScope, JudgeResult, failed
from medpanel.scoring.judges.scope import ScopeBook

DEFAULT_MAX_TOKENS = 512  # medpanel's mode: a 1,000-character rationale plus the JSON around it


@dataclass(frozen=True)
class Request:
    """One judge call: system prompt, user turn, schema (a pydantic model or a JSON schema) and the
    call's options. `check`, when set, is the release's own reading of the raw reply: it replaces the
    model layer's validation (a refused reply is a judge failure, not re-asked)."""

    system: str
    user: Message
    schema: type[BaseModel] | dict
    options: Mapping[str, Any] = field(default_factory=dict)
    check: Callable[[Any], dict] | None = None


def medpanel_request(system: str, user: str, schema: type[BaseModel], *, max_tokens: int,
                     images: list[Image] | None = None) -> Request:
    """medpanel's mode: temperature 0 and the model layer's bounded re-asks on an invalid reply."""
    return Request(system, Message(role="user", content=user, images=images or []), schema,
                   {"temperature": 0.0, "max_tokens": max_tokens})


async def ask(judge: Model, result: JudgeResult, request: Request) -> dict | None:
    """One judge call. Returns the verdict as a dict, or None with `result` marked failed (a call that
    failed for good, a reply still invalid after the re-asks, or one the release's checks refuse)."""
    try:
        reply = await judge.complete([Message(role="system", content=request.system), request.user],
                                     schema=request.schema, **request.options)
    except ModelCallError as exc:
        result.calls += 1
        if request.check is None or not isinstance(exc, StructuredOutputError):
            result.fail(f"{getattr(exc, 'kind', 'error')}: {exc.problem}")
            return None
        text = exc.last_text  # our schema check refused it; the release's own checks decide
    else:
        result.charge(reply)
        if request.check is None:
            parsed = reply.parsed
            return parsed.model_dump() if isinstance(parsed, BaseModel) else dict(parsed)
        text = reply.text
    try:
        return request.check(json.loads(text))  # the release reads the reply with json.loads: no fence, no prose
    except (ValueError, TypeError, KeyError) as exc:
        result.fail(f"invalid judge reply (a judge failure, not re-asked): {exc}")
        return None


async def judge_rubric(judge: Model, case: Case, rubric: str, *, mode: str, reference: str | None, missing: str,
                       candidate: str | None, floor: Mapping[str, Any], request: Callable[[str, str], Request],
                       read: Callable[[dict], dict[str, float | None]]) -> JudgeResult:
    """One rubric judging. `reference` is what the candidate is judged against (None or blank: unscored,
    naming the `missing` field); `floor` holds the scores and verdict of a format failure (no candidate);
    `request(reference, candidate)` builds the call and `read(verdict)` turns its verdict into scores."""
    if reference is None or not reference.strip():
        return failed(rubric, judge, f"case '{case.id}' has no {missing} to judge against", mode)
    if not candidate or not candidate.strip():
        return JudgeResult(rubric=rubric, status="format_failure", mode=mode, judge=judge.id, **floor)
    result = JudgeResult(rubric=rubric, status="ok", mode=mode, judge=judge.id)
    verdict = await ask(judge, result, request(reference, candidate))
    if verdict is not None:
        result.verdict, result.scores = verdict, read(verdict)
    return result


async def frozen_scope(judge: Model, result: JudgeResult, scopes: ScopeBook, key: str, request: Request) -> dict[str, str] | None:
    """The scope frozen under `key`, asked with `request` (which never shows a candidate) the first time.
    The judging that makes the scope call carries its cost; a failed call is not frozen, and leaves
    `result` failed (None)."""
    spent: list[JudgeResult] = []

    async def decide() -> dict[str, str] | None:
        probe = JudgeResult(rubric=result.rubric, status="ok", judge=judge.id)
        spent.append(probe)
        read = await ask(judge, probe, request)
        return DecisionScope.model_validate(read).model_dump() if read is not None else None

    scope = await scopes.freeze(key, decide)
    if spent:
        result.spent_like(spent[0])
    if scope is None:
        result.fail(f"the scope call failed: {spent[0].error if spent else 'see the concurrent judging of this reference'}")
    return scope
