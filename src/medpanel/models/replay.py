"""Answers from a recorded transcript, in order: re-run a protocol over what was actually said.

Spec: replay:PATH[#SPEAKER]. PATH is a transcript in JSONL (medpanel.transcript.Event per line);
SPEAKER, when given, keeps only that speaker's turns.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

from medpanel.errors import UsageError
from medpanel.models.base import Generation, Model, Request, Usage
from medpanel.models.runtime import Runtime
from medpanel.transcript import Transcript


class ReplayModel(Model):
    provider = "replay"
    cacheable = False

    def __init__(self, transcript: Transcript, speaker: str = "", *, name: str = "", runtime: Runtime | None = None) -> None:
        super().__init__(name or speaker or "transcript", runtime)
        turns = transcript.turns(speaker or None)
        if not turns:
            raise UsageError(f"The recorded transcript has no turns{' by ' + speaker if speaker else ''} to replay.", "Check the speaker name after '#'.")
        self.turns = deque(turns)
        self.history: list[Request] = []

    @classmethod
    def from_spec(cls, spec, runtime: Runtime, **kwargs) -> "ReplayModel":
        path, _, speaker = spec.name.partition("#")
        if not path or not Path(path).exists():
            raise UsageError(f"Replay transcript '{path}' not found.", "Write replay:PATH.jsonl[#SPEAKER] with an existing transcript file.")
        try:
            transcript = Transcript.from_jsonl(path)
        except Exception as exc:
            raise UsageError(f"Cannot read transcript {path}: {exc}", "It must be JSONL, one transcript event per line.") from None
        return cls(transcript, speaker, name=spec.name, runtime=runtime, **kwargs)

    async def generate(self, request: Request) -> Generation:
        self.history.append(request)
        if not self.turns:
            raise UsageError(f"Replay '{self.name}' has no recorded turns left (call {len(self.history)}).", "The protocol asked more often than the recording answered.")
        turn = self.turns.popleft()
        return Generation(
            text=turn.text,
            usage=Usage(input_tokens=turn.input_tokens, output_tokens=turn.output_tokens),
            finish_reason="stop",
            model=turn.model or self.id,
        )
