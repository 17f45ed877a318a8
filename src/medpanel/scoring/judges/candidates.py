"""The text each judge grades, read from a protocol's outcome and its transcript.

Scorers read these the same way during a run and when a stored run is judged afterwards (the stored
outcome and events are all there is then), so both paths grade the same text:

* a board's response: the tagged meeting the protocol kept (`data.raw`), else rebuilt from its turns;
* a board's conclusion, read leniently from that response (`split_response`);
* a Specialist Turn's raw reply (its answer turn), and the answer the release's reader finds in it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping

from medpanel.reply_text import strip_reasoning
from medpanel.scoring.board_format import extract_conclusion, render_board


def response_text(outcome: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> str:
    """A board's response in the tagged format: the raw text it stored, or (a run stored without it)
    its discussion turns and conclusion rebuilt from the events."""
    raw = (outcome.get("data") or {}).get("raw")
    if raw:
        return raw
    turns = [e for e in events if e.get("kind") == "turn" and e.get("phase") == "discussion"]
    return render_board(((e.get("speaker") or e.get("role"), e.get("text", "")) for e in turns), outcome.get("answer") or None)


def split_response(response: str) -> tuple[str | None, str]:
    """(conclusion or None, how it was found) of a board response, read as the benchmark's evaluation
    reads it (think block and code fence removed, lenient tags); None is a format failure."""
    conclusion, how = extract_conclusion(response or "")
    return conclusion or None, how


def raw_answer(events: Iterable[Mapping[str, Any]]) -> str | None:
    """The Specialist Turn's raw reply: the text of its last answer turn (None when there is none)."""
    raws = [e.get("text") for e in events if e.get("kind") == "turn" and e.get("phase") == "answer"]
    return raws[-1] if raws else None


_RELEASED_WRAPPER = re.compile(r'^\s*\{\s*"answer"\s*:\s*"', re.I | re.S)  # key compared case-blind
_RELEASED_ESCAPE = re.compile(r'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})')
_RELEASED_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescape_fragment(text: str) -> str:
    """JSON string escapes decoded, nothing else touched (for a reply cut off inside its JSON string)."""
    def one(match: re.Match[str]) -> str:
        body = match.group(0)[1:]
        return chr(int(body[1:], 16)) if body.startswith("u") else _RELEASED_ESCAPES[body]
    return _RELEASED_ESCAPE.sub(one, text)


def released_answer_text(raw: str | None) -> str | None:
    """The answer as the benchmark's evaluation reads a raw Specialist Turn reply (its
    `extract_answer_text`); None is a format failure. Only a whole-reply JSON object whose "answer"
    is a string counts as JSON; a reply that opens '{"answer": "' but was cut off keeps the text
    after that opening (a trailing brace and quote dropped, escapes decoded); any other reply that
    starts with '{' or '[' is a format failure; anything else is the answer verbatim, so prose
    around a JSON object stays in. A closed reasoning block is removed first (the release reads a
    reasoning model's final response only) and reasoning that never closes is no answer."""
    if raw is None:
        return None
    stripped = strip_reasoning(raw)
    if stripped.unclosed_reasoning:
        return None
    text = stripped.text.strip()
    if not text:
        return None
    if text.startswith("```"):  # a fence: its first line and a closing line of only ``` are dropped
        lines = text.splitlines()[1:]
        if lines and lines[-1].strip() == "```":
            lines = lines[:-1]
        text = "\n".join(lines).strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if isinstance(value, dict) and isinstance(value.get("answer"), str):
        return value["answer"].strip() or None
    opening = _RELEASED_WRAPPER.match(text)
    if opening:
        rest = text[opening.end():].strip()
        rest = rest[:-1].rstrip() if rest.endswith("}") else rest
        rest = rest[:-1] if rest.endswith('"') else rest
        return _unescape_fragment(rest).strip() or None
    if text.startswith(("{", "[")) or text == '""':
        return None
    return text or None  # a fence around nothing is no answer either
