"""HealthBench's released JSONL, read as simple-evals reads it (docs/healthbench.md).

The benchmark files (main, hard, consensus) hold one conversation per line:

    {"prompt": [{"role": "user", "content": "..."}, ...],
     "rubrics": [{"criterion": "...", "points": 7, "tags": ["level:example", "axis:accuracy"]}, ...],
     "example_tags": ["theme:emergency_referrals", ...], "prompt_id": "..."}

Each becomes a Case: the prompt is its `conversation` (the panel answers the last turn), the rubric its
`reference.rubric`, never shown to the panel. Example tags of the form KEY:VALUE become outcome fields a run
can be broken down by (`medpanel show RUN --by theme`). Fields the release adds (ideal completions, a canary)
are not needed and not read.

A `developer` message is read as a system message (models/messages.py knows system, user and assistant).

The meta-evaluation file holds one graded completion per line (prompt, completion, rubric: the criterion
text, category, binary_labels: the physicians' met / not-met, anonymized_physician_ids, prompt_id,
completion_id); it is read by `meta_rows` for `medpanel score healthbench-meta`.

The data is not shipped with medpanel: a missing file says where to download it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from medpanel.cases.model import Case, Criterion, Reference, Turn
from medpanel.errors import UsageError

DOWNLOADS = {
    "main (5,000 conversations)": "https://openaipublic.blob.core.windows.net/simple-evals/healthbench/2025-05-07-06-14-12_oss_eval.jsonl",
    "hard (1,000)": "https://openaipublic.blob.core.windows.net/simple-evals/healthbench/hard_2025-05-08-21-00-10.jsonl",
    "consensus (3,671)": "https://openaipublic.blob.core.windows.net/simple-evals/healthbench/consensus_2025-05-09-20-00-46.jsonl",
    "meta-evaluation": "https://openaipublic.blob.core.windows.net/simple-evals/healthbench/2025-05-07-06-14-12_oss_meta_eval.jsonl",
}
ROLES = ("system", "developer", "user", "assistant")
SHAPE = "HealthBench's released JSONL (docs/healthbench.md)"


def where_to_get_it() -> str:
    listed = "; ".join(f"{name}: {url}" for name, url in DOWNLOADS.items())
    return f"HealthBench is not shipped with medpanel. Download its JSONL files from OpenAI's simple-evals ({listed}), then name the file."


def _existing(path: Path, what: str) -> Path:
    if not path.is_file():
        raise UsageError(f"HealthBench {what} file {path} not found.", where_to_get_it())
    return path


class _Line:
    """Where a record came from, for error messages that name the file and line."""

    def __init__(self, path: Path, line_no: int) -> None:
        self.at = f"{path}:{line_no}"

    def fail(self, problem: str, fix: str = f"Use {SHAPE}, or fix that line.") -> UsageError:
        return UsageError(f"{self.at}: {problem}", fix)

    def text(self, value: object, name: str, *, empty: bool = False) -> str:
        if not isinstance(value, str) or (not empty and not value.strip()):
            raise self.fail(f"{name} must be a non-empty string, not {_shown(value)}.")
        return value

    def objects(self, value: object, name: str, item: str, fields: str) -> list[dict]:
        """A non-empty list of objects with `fields`, or the error naming the first entry that is not one."""
        if not isinstance(value, list) or not value:
            raise self.fail(f"'{name}' must be a non-empty list of {{{fields}}}, not {_shown(value)}.")
        for i, entry in enumerate(value, 1):
            if not isinstance(entry, dict):
                raise self.fail(f"{item} {i} must be an object with {fields}, not {_shown(entry)}.")
        return value

    def tags(self, value: object, name: str) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(t, str) and t for t in value):
            raise self.fail(f"{name} must be a list of strings such as \"axis:accuracy\", not {_shown(value)}.")
        repeated = sorted({t for t in value if value.count(t) > 1})
        if repeated:  # the release refuses these too: a repeated tag would be counted twice
            raise self.fail(f"{name} repeats {', '.join(repeated)}.", "Give each tag once.")
        return list(value)


def _shown(value: object) -> str:
    return "nothing" if value is None else f"a {type(value).__name__}" if not isinstance(value, str) else repr(value[:60])


def _conversation(record: dict, line: _Line) -> list[Turn]:
    """The prompt's turns; a `developer` message (OpenAI's newer name for the system message) becomes a system
    turn, the role every provider's chat takes."""
    turns = []
    for i, message in enumerate(line.objects(record.get("prompt"), "prompt", "prompt message", "role, content"), 1):
        role = message.get("role")
        if role not in ROLES:
            raise line.fail(f"prompt message {i} has role {_shown(role)}; a role is one of {', '.join(ROLES)}.")
        turns.append(Turn(role="system" if role == "developer" else role,
                          text=line.text(message.get("content"), f"prompt message {i}'s content", empty=True)))
    if turns[-1].role != "user":
        raise line.fail(f"the prompt ends with a {turns[-1].role} message; the panel answers the user's last turn.",
                        "End the conversation with the user's message, as HealthBench's prompts do.")
    return turns


def points_of(value: object, line: _Line, where: str) -> float:
    """A criterion's points: a finite number (negative for an undesirable behaviour), never a boolean."""
    if value is None:
        raise line.fail(f"{where} has no points.", "Give every criterion its points, e.g. \"points\": 5 (negative for something to avoid).")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise line.fail(f"{where} has points {_shown(value)}; points are a number such as 5 or -3.")
    return float(value)


def _rubric(record: dict, line: _Line) -> list[Criterion]:
    rubric = []
    for i, item in enumerate(line.objects(record.get("rubrics"), "rubrics", "criterion", "criterion, points, tags"), 1):
        where = f"criterion {i}"
        rubric.append(Criterion(criterion=line.text(item.get("criterion"), f"{where}'s 'criterion'"),
                                points=points_of(item.get("points"), line, where), tags=line.tags(item.get("tags"), f"{where}'s tags")))
    if not any(c.points > 0 for c in rubric):  # the score divides by the positive points
        raise line.fail("no criterion has positive points, so no score can be computed.", "Give at least one criterion positive points.")
    return rubric


def tag_groups(tags: list[str]) -> dict[str, str]:
    """KEY:VALUE example tags as fields to break scores down by ({"theme": "emergency_referrals"}); a key
    given twice keeps both values, joined with '+'."""
    groups: dict[str, str] = {}
    for tag in tags:
        key, sep, value = tag.partition(":")
        if sep and key and value:
            groups[key] = f"{groups[key]}+{value}" if key in groups else value
    return groups


def example_case(record: dict, path: Path, line_no: int) -> Case:
    """One conversation of a benchmark file as a Case (see the module doc)."""
    line = _Line(path, line_no)
    if "binary_labels" in record and "rubrics" not in record:
        raise line.fail("this is a line of the meta-evaluation file (it has binary_labels), not of a benchmark file.",
                        "Grade the grader with it: medpanel score healthbench-meta FILE --judge SPEC.")
    conversation = _conversation(record, line)
    if not conversation[-1].text.strip():  # earlier turns may be empty; the one the panel answers may not
        raise line.fail(f"the last user message (prompt message {len(conversation)}) is empty: there is nothing to answer.",
                        "Give the user's last message its text, or drop that line.")
    rubric = _rubric(record, line)
    example_tags = line.tags(record.get("example_tags"), "'example_tags'")
    return Case(id=line.text(record.get("prompt_id"), "'prompt_id'"), source=path.name, conversation=conversation,
                question=next(t.text for t in reversed(conversation) if t.role == "user"), reference=Reference(rubric=rubric),
                metadata={"example_tags": example_tags, "groups": tag_groups(example_tags)})


def load_healthbench(file: str) -> Iterator[Case]:
    """The cases of a HealthBench benchmark file (main, hard or consensus), checked line by line."""
    from medpanel.cases.loaders import jsonl_records

    if not file:
        raise UsageError("healthbench: needs a file, as healthbench:PATH.", where_to_get_it())
    path = _existing(Path(file).expanduser(), "benchmark")
    seen: dict[str, int] = {}
    for line_no, record in jsonl_records(path):
        case = example_case(record, path, line_no)
        if case.id in seen:
            raise UsageError(f"{path}:{line_no}: prompt_id {case.id!r} was already used on line {seen[case.id]}.", "Give every conversation its own prompt_id.")
        seen[case.id] = line_no
        yield case


@dataclass(frozen=True)
class MetaRow:
    """One line of the meta-evaluation file: a completion, one criterion, and the physicians' labels."""

    conversation: list[Turn]
    completion: str
    criterion: str
    category: str
    labels: list[bool]  # one per physician: did the completion meet the criterion?
    physicians: list[str]  # anonymized ids, aligned with labels (empty when the file has none)
    prompt_id: str
    completion_id: str


def _meta_row(record: dict, line: _Line) -> MetaRow:
    labels = record.get("binary_labels")
    if not isinstance(labels, list) or not labels or not all(isinstance(v, bool) for v in labels):
        raise line.fail(f"'binary_labels' must be a non-empty list of true/false, not {_shown(labels)}.")
    physicians = record.get("anonymized_physician_ids") or []
    if not isinstance(physicians, list) or (physicians and len(physicians) != len(labels)) or not all(isinstance(p, str) for p in physicians):
        raise line.fail("'anonymized_physician_ids' must list one id (a string) per label in binary_labels.")
    return MetaRow(conversation=_conversation(record, line), completion=line.text(record.get("completion"), "'completion'", empty=True),
                   criterion=line.text(record.get("rubric"), "'rubric'"), category=line.text(record.get("category"), "'category'"),
                   labels=list(labels), physicians=list(physicians), prompt_id=str(record.get("prompt_id") or ""),
                   completion_id=str(record.get("completion_id") or ""))


def meta_rows(file: str | Path) -> list[MetaRow]:
    """Every line of a HealthBench meta-evaluation file, checked."""
    from medpanel.cases.loaders import jsonl_records

    path = _existing(Path(file).expanduser(), "meta-evaluation")
    rows = []
    for line_no, record in jsonl_records(path):
        line = _Line(path, line_no)
        if "rubrics" in record and "binary_labels" not in record:
            raise line.fail("this is a line of a benchmark file (it has rubrics), not of the meta-evaluation file.",
                            f"Use the meta-evaluation file: {DOWNLOADS['meta-evaluation']}.")
        rows.append(_meta_row(record, line))
    if not rows:
        raise UsageError(f"{path} holds no meta-evaluation rows.", f"Use the meta-evaluation file: {DOWNLOADS['meta-evaluation']}.")
    return rows
