"""Hard caps on a run's model calls, tokens and dollars, shared by every model in the run."""

from __future__ import annotations

from dataclasses import dataclass, field

from medpanel.errors import BudgetExceeded


@dataclass
class Budget:
    max_calls: int | None = None
    max_tokens: int | None = None
    max_dollars: float | None = None
    calls: int = 0
    cached_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    dollars: float = 0.0
    _tripped: BudgetExceeded | None = field(default=None, repr=False)

    def spent(self) -> dict:
        return {
            "calls": self.calls,
            "cached_calls": self.cached_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "dollars": round(self.dollars, 6),
        }

    def before_call(self) -> None:
        """Refuse a new (uncached) call once any cap is reached; counts the call as started."""
        if self._tripped is None:
            if self.max_calls is not None and self.calls >= self.max_calls:
                self._tripped = BudgetExceeded("calls", self.max_calls, self.spent())
            elif self.max_tokens is not None and self.input_tokens + self.output_tokens >= self.max_tokens:
                self._tripped = BudgetExceeded("tokens", self.max_tokens, self.spent())
            elif self.max_dollars is not None and self.dollars >= self.max_dollars:
                self._tripped = BudgetExceeded("dollars", self.max_dollars, self.spent())
        if self._tripped is not None:
            raise BudgetExceeded(self._tripped.cap, self._tripped.limit, self.spent())
        self.calls += 1

    def charge(self, input_tokens: int, output_tokens: int, dollars: float) -> None:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.dollars += dollars

    @property
    def exceeded(self) -> BudgetExceeded | None:
        return self._tripped
