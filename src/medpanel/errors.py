"""Typed errors. Each says what went wrong and how to fix it, so the CLI can print it without a traceback."""

from __future__ import annotations


class MedpanelError(Exception):
    """Base of every error medpanel raises on purpose. `fix` tells the user what to do about it."""

    exit_code = 1

    def __init__(self, problem: str, fix: str = "") -> None:
        from medpanel.redact import redact  # a server may echo the API key into the message

        self.problem = problem = redact(problem)
        self.fix = fix = redact(fix)
        super().__init__(f"{problem} {fix}".strip())


class UsageError(MedpanelError):
    """Bad input from the user: unknown model spec, unreadable file, invalid case. Exit status 2."""

    exit_code = 2


class MissingExtraError(UsageError):
    """An optional backend's package is not installed."""

    def __init__(self, feature: str, extra: str, package: str) -> None:
        super().__init__(
            f"{feature} needs the '{package}' package, which is not installed.",
            f"Install it with: pip install 'medpanel[{extra}]'",
        )


class ModelCallError(MedpanelError):
    """A model call failed for good (after any retries). `kind` classifies it for reports."""

    def __init__(self, problem: str, fix: str = "", *, kind: str = "error", model: str = "") -> None:
        self.kind = kind
        self.model = model
        super().__init__(problem, fix)


class TransientModelError(ModelCallError):
    """A failure worth retrying: rate limit, server error, timeout, broken body."""

    def __init__(self, problem: str, *, kind: str, model: str = "", retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(problem, kind=kind, model=model)


class StructuredOutputError(ModelCallError):
    """The model never produced a reply that validates against the requested schema."""

    def __init__(self, problem: str, *, model: str = "", last_text: str = "", fix: str = "Try a larger model, or raise --max-reasks.") -> None:
        self.last_text = last_text
        super().__init__(problem, fix, kind="invalid_output", model=model)


class BudgetExceeded(MedpanelError):
    """A hard cap on calls, tokens or dollars was reached. The run stops loudly with what was spent."""

    exit_code = 3

    def __init__(self, cap: str, limit: float, spent: dict) -> None:
        self.cap = cap
        self.limit = limit
        self.spent = spent
        spent_text = ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in spent.items())
        super().__init__(
            f"Budget cap reached: {cap} limit {limit:g}. Spent so far: {spent_text}.",
            "Raise the cap (--max-calls / --max-tokens-total / --max-dollars) and resume the run with --resume RUN_ID.",
        )
