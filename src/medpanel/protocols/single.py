"""Single model, multiple choice: the baseline every panel has to beat.

Every multiple-choice protocol (single, debate, vote, self-consistency) asks a seat through `answer`.
A model that is not small answers in free text ending 'Answer: X' (the paper's format, read by
read_choice). A small model (`model.small`, the embedded one) would often never state a letter, so it
gives one line of reasoning after a compact prompt with a worked example, then the letter under a grammar
(a schema whose only field is an enum of the option letters): its answer always parses. The turn's text is
then 'reasoning\nAnswer: X', read the same way.

A case with a conversation (HealthBench) is answered instead: the seat writes the conversation's next
assistant turn, sent as the chat it is, with no system prompt added (as simple-evals samples it); the
panel's judge grades it against the rubric afterwards (scoring/healthbench_grader.py).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, create_model

from medpanel.cases.model import Case
from medpanel.context import RunContext, quiet
from medpanel.models.base import Model, Reply, Usage
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec, Settings
from medpanel.scoring.exact import exact_match, read_choice
from medpanel.scoring.healthbench_grader import HEALTHBENCH_GRADER, GraderSettings
from medpanel.scoring.metrics import PROPORTION
from medpanel.scoring.scorer import pure

SYSTEM = (
    "You are a physician answering a multiple-choice exam question. Think briefly, then finish "
    "with a line of the form 'Answer: X', where X is the letter of the single best option."
)


# The small-model profile: one line of reasoning, then the letter (see the module docstring).
SMALL_SYSTEM = (
    "You are a physician answering a multiple-choice exam question. Say in one short sentence which option is "
    "best and why.\n\nExample:\nQuestion: Which vitamin deficiency causes scurvy?\nOptions:\nA. Vitamin A\nB. Vitamin C\n"
    "Reasoning: Scurvy comes from too little vitamin C, so B."
)
SMALL_LETTER = "Now the letter of the single best option."

# max_tokens when not set: (a small model such as the embedded one, any other); the debate and vote use the
# same, so their round 0 and this protocol share the cache. Reasoning models get REASONING_ALLOWANCE more.
ANSWER_BUDGET = (512, 2048)


class SingleSettings(Settings, GraderSettings):
    budgets: ClassVar[dict[str, tuple[int, int]]] = {"max_tokens": ANSWER_BUDGET}

    temperature: float = 0.0
    max_tokens: int | None = Field(default=None, ge=16)  # None: fit the seat


def question_prompt(case: Case) -> str:
    return f"{case.question}\n\nOptions:\n{case.options_text()}"


def answer_messages(case: Case, small: bool = False) -> list[dict[str, str]]:
    """A seat's first call: the question under the paper's prompt, or the compact one on a small model."""
    return [{"role": "system", "content": SMALL_SYSTEM if small else SYSTEM}, {"role": "user", "content": question_prompt(case)}]


def letter_schema(letters: tuple[str, ...]) -> type[BaseModel]:
    """A reply that can only be one of the option letters (no description: a small model copies them)."""
    return create_model("Choice", answer=(Literal[letters], ...))  # type: ignore[valid-type]


def joined(first: Reply, second: Reply, text: str) -> Reply:
    """One answer made of two calls: `text`, both calls' costs and times, the second's finish."""
    usage = Usage(input_tokens=first.usage.input_tokens + second.usage.input_tokens,
                  output_tokens=first.usage.output_tokens + second.usage.output_tokens)
    return second.model_copy(update={"text": text, "usage": usage, "latency_s": first.latency_s + second.latency_s,
                                     "cost_usd": first.cost_usd + second.cost_usd, "cached": first.cached and second.cached,
                                     "truncated": first.truncated or second.truncated})


async def answer(model: Model, messages: list[dict[str, str]], case: Case, **options: Any) -> Reply:
    """One seat's answer to `messages` (see the module docstring): free text, or on a small model one line
    of reasoning and then the letter under a grammar, given back as one reply whose text ends 'Answer: X'."""
    if not model.small:
        return await model.complete(messages, **options)
    reasoning = await model.complete(messages, stop=["\n"], **options)
    line = " ".join(reasoning.text.split()) or "No reasoning given."
    if read_choice(line, case.options).parsed:  # it said which: one call was enough
        return reasoning.model_copy(update={"text": line})
    letters = tuple(case.options) or tuple("ABCDE")
    chosen = await model.complete([*messages, {"role": "assistant", "content": line}, {"role": "user", "content": SMALL_LETTER}],
                                  schema=letter_schema(letters), **options)
    return joined(reasoning, chosen, f"{line}\nAnswer: {chosen.parsed.answer}")


async def run(case: Case, panel: Panel, settings: SingleSettings, context: RunContext | None = None) -> Outcome:
    context = quiet(context)
    if case.conversation:
        return await reply_to_conversation(case, panel, settings, context)
    case.require("question", "options", protocol="single")
    seat, model = panel.first()
    reply = await answer(model, answer_messages(case, model.small), case, temperature=settings.temperature,
                         max_tokens=settings.tokens_for(model))
    read = read_choice(reply.text, case.options)  # with option texts, as the debate and vote read it
    transcript = context.transcript()
    transcript.record("turn", reply=reply, speaker=seat, role="answerer", phase="answer", data=read.as_data())
    transcript.record("decision", read.choice or "", data=read.as_data())
    return Outcome(answer=read.choice, transcript=transcript, data={**case.groups(), "parsed": read.parsed, "answer_status": read.status})


async def reply_to_conversation(case: Case, panel: Panel, settings: SingleSettings, context: RunContext) -> Outcome:
    """The first seat's next turn in the case's conversation (see the module docstring)."""
    seat, model = panel.first()
    reply = await model.complete(case.conversation_messages(), temperature=settings.temperature, max_tokens=settings.tokens_for(model))
    transcript = context.transcript()
    transcript.record("turn", reply=reply, speaker=seat, role="answerer", phase="answer")
    answer = reply.text.strip()
    transcript.record("decision", answer, speaker=seat)
    return Outcome(answer=answer, transcript=transcript, data=case.groups())  # e.g. theme, for show --by


def score(case: Case, outcome: Outcome) -> dict[str, float | None]:
    if case.conversation:  # graded by the rubric grader, not by a letter
        return {}
    return {"accuracy": exact_match(outcome.answer, case.reference.answer), "parsed": 1.0 if outcome.answer else 0.0}


SPEC = ProtocolSpec(name="single", run=run, settings=SingleSettings,
                    scorers=(pure("single", score, {"accuracy": PROPORTION, "parsed": PROPORTION}), HEALTHBENCH_GRADER),
                    needs=("question", "options|conversation"),
                    description="one model answers a multiple-choice question, or the last turn of a conversation (HealthBench)")
