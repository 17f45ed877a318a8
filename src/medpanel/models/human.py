"""A person in any seat: they read what the agent in that seat would be shown, and type the answer.

The terminal is the first front end; the web app plugs in another `ask` function with the same shape.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from typing import Callable, TextIO

from medpanel.errors import UsageError
from medpanel.models.base import Generation, Model, Request, Usage
from medpanel.models.runtime import Runtime

Ask = Callable[[str], str]  # shows a prompt, returns what the person typed


class TerminalIO:
    """Reads a person's answer from a terminal: one or more lines, finished by an empty line."""

    def __init__(self, stdin: TextIO | None = None, stdout: TextIO | None = None) -> None:
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout

    def show(self, text: str) -> None:
        from medpanel.literal import visible  # what the seat is shown came from models and the case: no control reaches the terminal

        self.stdout.write(visible(text) + "\n")
        self.stdout.flush()

    def ask_line(self, prompt: str) -> str:
        """One line: for a form field, where Enter ends the answer."""
        self.stdout.write(prompt)
        self.stdout.flush()
        return self.stdin.readline().rstrip("\n")

    def ask(self, prompt: str) -> str:
        self.stdout.write(prompt)
        self.stdout.flush()
        lines: list[str] = []
        while True:
            line = self.stdin.readline()
            if line == "":  # end of input: take what we have rather than wait forever
                break
            line = line.rstrip("\n")
            if not line and lines:
                break
            if line:
                lines.append(line)
        return "\n".join(lines)


class HumanModel(Model):
    provider = "human"
    supports_vision = True  # a person sees the slides themselves (paths are shown)
    cacheable = False

    def __init__(self, seat: str = "", *, io: TerminalIO | None = None, runtime: Runtime | None = None) -> None:
        super().__init__(seat, runtime)
        self.io = io or TerminalIO()

    @classmethod
    def from_spec(cls, spec, runtime: Runtime, **kwargs) -> "HumanModel":
        return cls(spec.name, runtime=runtime, **kwargs)

    @property
    def id(self) -> str:
        return "human"

    async def generate(self, request: Request) -> Generation:
        return await asyncio.to_thread(self._converse, request)

    def _converse(self, request: Request) -> Generation:
        seat = f" as {self.name}" if self.name else ""
        last_user = next((m for m in reversed(request.messages) if m.role == "user"), None)
        self.io.show(f"\n--- Your turn{seat} ---")
        if last_user is not None:
            self.io.show(last_user.content)
            for i, img in enumerate(last_user.images, 1):
                self.io.show(f"[Image {i}: {img.caption}] {img.path or img.url}")
        if request.schema is None:
            text = self.io.ask("(type your answer; an empty line ends it)\n> ")
        else:
            text = json.dumps(self._fill_schema(request.schema))
        if not text.strip():
            raise UsageError(f"No answer was typed{seat}.", "Type an answer, then press Enter on an empty line.")
        return Generation(text=text, usage=Usage(output_tokens=len(text.split())), finish_reason="stop", model="human")

    def _fill_schema(self, schema: dict) -> dict:
        """Ask for each top-level field in turn; lists are typed comma-separated, numbers as numbers."""
        typed: dict[str, str] = {}
        for field in form_fields(schema):
            hint = f" (one of: {', '.join(field.choices)})" if field.choices else ""
            hint += " (comma-separated)" if field.kind == "array" else ""
            typed[field.name] = self.io.ask_line(f"{field.title}{hint} (one line):\n> ")
        return form_answers(schema, typed)


@dataclass(frozen=True)
class FormField:
    """One top-level field of a structured answer, as a person fills it in (a terminal line, a web form field)."""

    name: str
    title: str
    kind: str  # string | integer | number | boolean | array
    choices: tuple[str, ...] = ()


def form_fields(schema: dict) -> list[FormField]:
    return [FormField(name, str(prop.get("title", name)), str(prop.get("type", "string")), tuple(map(str, prop.get("enum", ()))))
            for name, prop in (schema.get("properties") or {}).items()]


def form_answers(schema: dict, typed: dict[str, str]) -> dict:
    """What a person typed per field, as the schema's types: lists comma-separated, numbers as numbers. A value
    that is not of its type is passed on as typed, so validation asks again with the reason."""
    answers: dict = {}
    for field in form_fields(schema):
        raw = str(typed.get(field.name, "")).strip()
        if field.kind == "array":
            answers[field.name] = [part.strip() for part in raw.split(",") if part.strip()]
        elif field.kind in ("integer", "number"):
            try:
                answers[field.name] = int(raw) if field.kind == "integer" else float(raw)
            except ValueError:
                answers[field.name] = raw
        elif field.kind == "boolean":
            answers[field.name] = raw.lower() in ("y", "yes", "true", "1", "on")
        else:
            answers[field.name] = raw
    return answers
