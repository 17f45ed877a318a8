"""The four-decision scope book: which dimensions a reference conclusion puts in scope, decided once
(in a call that never sees a candidate) and frozen, so every candidate judged against that reference is
scored on the same dimensions. One book serves a whole run (`ctx.shared("scope_book", ScopeBook)`)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path
from typing import Awaitable, Callable

from pydantic import ValidationError

from medpanel.errors import UsageError
from medpanel.scoring.judges.schemas import DecisionScope


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
