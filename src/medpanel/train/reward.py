"""The GRPO reward: each sampled meeting scored by `BOARD_REWARD`, the scorer `bench --set reward=...` runs,
so training and benchmarking share one code path (scoring/judges/scorers.py, scoring/reward.py).

A completion becomes a board Outcome (its text as the raw meeting, its token count, whether it hit the
response budget) and goes through the scorer with the panel's judge role: the format, repetition and
overlength terms are computed locally, and the judges are asked only when the format leaves something to
judge. The judge is any model spec through the model layer: its calls run concurrently for a batch, are
cached in the store (temperature 0: a repeated meeting costs nothing) and logged in the spend ledger under
the training run, one item per step and case.

Every scored sample is appended to OUT/rewards.jsonl (phase, the trainer's global step when it was sampled,
case, sample, reward and its terms, tokens, the completion), for checking a run sample by sample.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any, Mapping

from medpanel.cases import Case
from medpanel.context import RunContext
from medpanel.errors import MedpanelError
from medpanel.models.base import Model
from medpanel.models.runtime import call_scope
from medpanel.protocols.base import Outcome
from medpanel.protocols.board import BoardSettings
from medpanel.scoring.board_format import parse_board_response
from medpanel.scoring.judges import BOARD_REWARD
from medpanel.scoring.scorer import ScoreContext

TERMS = ("reward", "reward_format", "reward_match", "reward_alignment", "reward_decisions", "reward_consistency",
         "reward_judged", "reward_judge_failed")


def completion_text(completion: Any) -> str:
    """A TRL completion (conversational: a list of messages; standard: a string) as plain text."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion if m.get("role") == "assistant")


def board_outcome(text: str, tokens: int | None, truncated: bool, length_limit: int | None) -> Outcome:
    """A sampled meeting as the board protocol's outcome, so the scorer reads it as it reads a run's."""
    parsed = parse_board_response(text)
    return Outcome(answer=parsed.conclusion, data={"raw": text, "output_tokens": tokens, "truncated": truncated,
                                                   "length_limit": length_limit, "parse_status": parsed.status})


async def score_sample(case: Case, text: str, judge: Model, settings: BoardSettings, context: RunContext, *,
                       tokens: int | None = None, truncated: bool = False, length_limit: int | None = None) -> dict[str, float | None]:
    """The reward scores of one sampled meeting: exactly what a board run with `settings.reward` stores."""
    outcome = board_outcome(text, tokens, truncated, length_limit)
    return await BOARD_REWARD.score(case, outcome, ScoreContext(settings=settings, roles={"judge": judge}, run=context,
                                                                transcript=outcome.transcript))


class JudgeSilent(MedpanelError):
    """The judge scored none of the samples it was asked about, several batches in a row: the run would go on
    without a signal (every advantage 0), so it stops instead."""

    exit_code = 4
    kind = "judge_failed"


class BoardReward:
    """TRL's reward function (an async callable: GRPOTrainer awaits the batch's rewards at once).

    `cases` maps the dataset's `case_id` column to its case; `eos_ids` decide whether a completion ended or
    was cut at `length_limit` (cut: the released reward fails it closed). Identical samples of one batch are
    scored once; at most `concurrency` judge calls are in flight. `silent_batches` batches in a row in which
    the judge scored nothing it was asked about stop the run (JudgeSilent)."""

    def __init__(self, cases: Mapping[str, Case], judge: Model, *, preset: str = "released_code", run_id: str = "training",
                 length_limit: int | None = None, eos_ids: set[int] | frozenset[int] = frozenset(), log_path: Path | None = None,
                 judge_prompt_files: Mapping[str, str] | None = None, concurrency: int = 8, silent_batches: int = 3) -> None:
        self.__name__ = "board_reward"  # TRL names the metric after it
        self.cases, self.judge, self.run_id = dict(cases), judge, run_id
        self.settings = BoardSettings(reward=preset, judge_prompt_files=dict(judge_prompt_files or {}))
        self.length_limit, self.eos_ids, self.log_path = length_limit, set(eos_ids), log_path
        self.context = RunContext()  # one scope book for the whole run, as in a benchmark run
        self.concurrency, self.silent_batches = max(1, concurrency), silent_batches
        self.calls = 0  # batches scored
        self.distinct = 0  # samples scored (identical ones in a batch count once)
        self.silent = 0  # batches in a row whose judged samples all went unscored
        self.phase: Any = lambda: "train"  # the trainer sets it: "eval" while it scores validation prompts

    def _truncated(self, ids: list[int] | None) -> bool:
        if not ids or self.length_limit is None:
            return False
        return len(ids) >= self.length_limit and ids[-1] not in self.eos_ids

    async def _one(self, gate: asyncio.Semaphore, item: str, index: int, case_id: str, text: str,
                   ids: list[int] | None) -> dict[str, float | None]:
        case = self.cases.get(case_id)
        if case is None:  # the dataset and the cases are built together (train data); a mismatch is a bug
            raise KeyError(f"no case '{case_id}' for a training prompt")
        async with gate:
            call_scope.set((self.run_id, item, index))  # this task's calls, in the spend ledger
            return await score_sample(case, text, self.judge, self.settings, self.context, tokens=len(ids) if ids is not None else None,
                                      truncated=self._truncated(ids), length_limit=self.length_limit)

    async def __call__(self, prompts: list, completions: list, completion_ids: list | None = None, case_id: list | None = None,
                       trainer_state: Any = None, log_metric: Any = None, **_: Any) -> list[float | None]:
        step = int(getattr(trainer_state, "global_step", 0) or 0)
        phase = self.phase()
        texts = [completion_text(c) for c in completions]
        ids = list(completion_ids) if completion_ids is not None else [None] * len(texts)
        cases = list(case_id or [])
        if len(cases) != len(texts):
            raise ValueError(f"{len(texts)} completions but {len(cases)} case ids: the dataset needs a case_id column")
        gate = asyncio.Semaphore(self.concurrency)
        first: dict[tuple, int] = {}  # identical samples (case, text, length, cut) share one scoring
        keys = [(c, t, len(d) if d is not None else None, self._truncated(d)) for c, t, d in zip(cases, texts, ids)]
        for i, key in enumerate(keys):
            first.setdefault(key, i)
        jobs = {i: self._one(gate, f"{phase}-step-{step}/{keys[i][0]}", i, keys[i][0], texts[i], ids[i]) for i in sorted(set(first.values()))}
        done = dict(zip(jobs, await asyncio.gather(*jobs.values())))
        scored = [done[first[key]] for key in keys]
        self.calls += 1
        self.distinct += len(done)
        self._watch(list(done.values()))
        if log_metric is not None:  # each term's batch mean beside TRL's own reward mean
            for term in TERMS[1:]:
                values = [s[term] for s in scored if s.get(term) is not None]
                if values:
                    log_metric(term, sum(values) / len(values))
        if self.log_path is not None:
            with self.log_path.open("a", encoding="utf-8") as f:
                for i, (c, t, s) in enumerate(zip(cases, texts, scored)):
                    f.write(json.dumps({"phase": phase, "step": step, "case": c, "sample": i, **{k: s.get(k) for k in TERMS},
                                        "tokens": len(ids[i]) if ids[i] is not None else None, "completion": t}, ensure_ascii=False) + "\n")
        return [s["reward"] if s.get("reward") is not None and math.isfinite(s["reward"]) else None for s in scored]

    def _watch(self, scored: list[dict]) -> None:
        asked = [s for s in scored if s.get("reward_judged") or s.get("reward_judge_failed")]
        if asked and all(s.get("reward_judge_failed") for s in asked):
            self.silent += 1
            if self.silent >= self.silent_batches:
                raise JudgeSilent(f"The judge {getattr(self.judge, 'id', '')} scored none of the samples it was asked about in "
                                  f"{self.silent} batches in a row, so training had no reward signal.",
                                  "Check the judge (`medpanel chat` with its spec) and resume with --resume.")
        elif asked:
            self.silent = 0
