"""A scripted fake model that ships with the package, for tests and examples.

    model = ScriptedModel(["first reply", {"answer": "B"}, RuntimeError("boom")])
    model.enqueue("another")
    ...
    model.history   # the Requests it received, in order
    ScriptedModel(small=True) / ScriptedModel(reasoning=True)   # budgets as for such a model

From a spec: `scripted:replies.yaml` holds a list of replies consumed in order, or a mapping
`{by_schema: {SCHEMA_NAME: reply, ...}, default: reply}` answering each request by the name of the schema
it asks for (a scripted judge).

Replies are consumed in order. Each may be a string, a dict or list (sent as JSON text), an exception
(raised, to simulate failure), or a function of the Request returning any of these. With no queue,
a `responder` function (default: echo the last user message) answers.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from pathlib import Path
from typing import Any, Callable

import yaml

from medpanel.errors import UsageError
from medpanel.models.base import Generation, Model, Request, Usage
from medpanel.models.runtime import Runtime

Script = Any  # str | dict | list | BaseException | Callable[[Request], Any]


def echo(request: Request) -> str:
    users = [m.content for m in request.messages if m.role == "user"]
    return users[-1] if users else ""


class ScriptedModel(Model):
    provider = "scripted"
    supports_vision = True
    cacheable = False

    def __init__(
        self,
        replies: list[Script] | None = None,
        *,
        name: str = "fake",
        responder: Callable[[Request], Any] | None = None,
        delay_s: float = 0.0,
        cacheable: bool = False,
        small: bool = False,
        reasoning: bool = False,
        runtime: Runtime | None = None,
    ) -> None:
        super().__init__(name, runtime)
        self.cacheable = cacheable  # off by default: a queue's next reply is not a function of the request
        # So a test can sit a fake in a small or a reasoning model's seat and see the budget it gets.
        self.small = small
        self.reasoning = reasoning
        self.queue: deque[Script] = deque(replies or [])
        self.responder = responder if responder is not None else (None if replies else echo)
        self.delay_s = delay_s
        self.history: list[Request] = []

    @classmethod
    def from_spec(cls, spec, runtime: Runtime, **kwargs) -> "ScriptedModel":
        arg = spec.name
        if arg in ("", "echo"):
            return cls(name="echo", responder=echo, runtime=runtime, **kwargs)
        path = Path(arg)
        if path.suffix in (".json", ".yaml", ".yml"):
            try:
                data = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError) as exc:
                raise UsageError(f"Cannot read scripted replies from {path}: {exc}", "Give a YAML/JSON list of replies.") from None
            if isinstance(data, dict) and isinstance(data.get("by_schema"), dict):  # a judge: one reply per schema asked for
                replies, default = data["by_schema"], data.get("default")
                return cls(name=path.stem, responder=lambda r: replies.get(r.schema_name or "", default if default is not None else echo(r)),
                           runtime=runtime, **kwargs)
            if not isinstance(data, list):
                raise UsageError(f"Scripted replies file {path} must hold a list (or a mapping with 'by_schema').",
                                 "Write one reply per list entry, or by_schema: {SCHEMA_NAME: reply} for a judge.")
            return cls(data, name=path.stem, runtime=runtime, **kwargs)
        return cls(name="constant", responder=lambda _r, text=arg: text, runtime=runtime, **kwargs)

    def enqueue(self, *replies: Script) -> "ScriptedModel":
        self.queue.extend(replies)
        return self

    async def generate(self, request: Request) -> Generation:
        self.history.append(request)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.queue:
            item = self.queue.popleft()
        elif self.responder is not None:
            item = self.responder
        else:
            raise UsageError(f"Scripted model '{self.name}' has no replies left (call {len(self.history)}).", "Enqueue more replies or give a responder.")
        if callable(item) and not isinstance(item, BaseException):
            item = item(request)
        if isinstance(item, BaseException):
            raise item
        text = item if isinstance(item, str) else json.dumps(item)
        prompt_words = sum(len(m.content.split()) for m in request.messages)
        return Generation(text=text, usage=Usage(input_tokens=prompt_words, output_tokens=len(text.split())), finish_reason="stop", model=self.id)
