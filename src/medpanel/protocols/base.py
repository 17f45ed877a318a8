"""What every protocol shares: the panel of seated models, the outcome, and the registry entry."""

from __future__ import annotations

import asyncio
import difflib
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from medpanel.cases.model import Case
from medpanel.errors import BudgetExceeded, ModelCallError, UsageError
from medpanel.models.base import Model
from medpanel.scoring.metrics import MetricKind
from medpanel.scoring.scorer import Scorer
from medpanel.transcript import Transcript


class Outcome(BaseModel):
    """What a protocol returns: its answer (choice, conclusion, discharge) and how it got there."""

    status: str = "ok"  # ok | unfinished (e.g. a turn bound was reached before a conclusion)
    answer: str | None = None  # the short answer: an option letter, a conclusion, a diagnosis
    data: dict[str, Any] = Field(default_factory=dict)
    transcript: Transcript = Field(default_factory=Transcript)


class Settings(BaseModel):
    """A protocol's settings: plain data stored with the run. A key that names no setting is an error:
    dropping it would store a setting the run never used (`rounds=1` where the field is `max_rounds`)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    # Token settings whose None means "fit the seat": name -> (budget of a small model, of any other).
    budgets: ClassVar[dict[str, tuple[int, int]]] = {}

    def tokens_for(self, model: Model, name: str = "max_tokens", times: int = 1) -> int:
        """max_tokens for one call by `model`: the setting `name` (times `times`) when given, else the
        budget that fits the model (see Model.token_budget); `times` scales a call worth several turns."""
        small, full = self.budgets[name]
        requested = getattr(self, name)
        return model.token_budget(None if requested is None else requested * times, small=small * times, full=full * times)


def setting_names(settings: type[BaseModel]) -> list[str]:
    """The keys a run may set: every field that is stored (not the live hooks, which are excluded)."""
    return [name for name, info in settings.model_fields.items() if not info.exclude]


def build_settings(settings: type[BaseModel], values: dict[str, Any], protocol: str) -> BaseModel:
    """Settings from plain values (--set, a stored run), or a UsageError: an unknown key is named with the
    closest real ones, and every invalid value with its problem."""
    names = setting_names(settings)
    unknown = [key for key in values if key not in names]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, names, n=2, cutoff=0.6)
            hints.append(f"'{key}'" + (f" (did you mean {' or '.join(close)}?)" if close else ""))
        raise UsageError(f"The {protocol} protocol has no setting {', '.join(hints)}.", f"Its settings are: {', '.join(names)}.")
    try:
        return settings.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors()[:5])
        raise UsageError(f"Invalid settings for the {protocol} protocol: {problems}.", f"Its settings are: {', '.join(names)}.") from None


def seat_labels(seats: Any) -> dict[str, str]:
    """What prompts call each seat: "Panelist 1", "Panelist 2"... in seat order. A seat's name is its model
    spec (a server URL, a key's env name): it stays in the transcript, never in what a model is shown, so
    a prompt (and its cache key) is the same wherever the server runs."""
    return {seat: f"Panelist {i}" for i, seat in enumerate(seats, 1)}


# The panel's function roles besides its seats. Any other role name is a seat a protocol gives a title
# (the live board's "Radiologist"); every role is built by the runner from the run's config.
FUNCTION_ROLES = ("patient", "moderator", "judge")


@dataclass
class Panel:
    """Seats at the table, in order (seat name -> model; the name is what the transcript calls the
    speaker), and the named roles beside them (patient, moderator, judge, a titled seat -> model).
    The runner builds every model here from the run's config and records it; a protocol builds none."""

    seats: dict[str, Model] = field(default_factory=dict)
    roles: dict[str, Model] = field(default_factory=dict)

    @classmethod
    def of(cls, models: list[Model], names: list[str] | None = None, roles: dict[str, Model] | None = None) -> "Panel":
        names = names or [m.id for m in models]
        seats: dict[str, Model] = {}
        for name, model in zip(names, models):
            unique, n = name, 2
            while unique in seats:  # the same model seated twice gets #2, #3 ...
                unique, n = f"{name}#{n}", n + 1
            seats[unique] = model
        return cls(seats, dict(roles or {}))

    def first(self) -> tuple[str, Model]:
        if not self.seats:
            raise UsageError("The panel is empty.", "Give at least one model with --models.")
        return next(iter(self.seats.items()))

    def role(self, name: str, default: Model | None = None) -> Model | None:
        """The model in role `name`, else `default`."""
        return self.roles.get(name, default)

    def titled_seats(self) -> dict[str, Model]:
        """Roles that are seats with a title (not patient, moderator or judge), in config order."""
        return {name: model for name, model in self.roles.items() if name not in FUNCTION_ROLES}

    def models(self) -> list[Model]:
        """Every distinct model on the panel, seats then roles (to close them once at the end)."""
        return list(dict.fromkeys([*self.seats.values(), *self.roles.values()]))

    def __len__(self) -> int:
        return len(self.seats)


async def gather_seats(calls: list[Awaitable[Any]], seats: list[str], where: str, models: dict[str, Model] | None = None) -> list[Any]:
    """Await parallel calls of several seats. Every call is awaited even when one fails (nothing is left
    running or spending); then a budget stop passes through, or the first failure in seat order is raised
    naming its seat (and its model, when `models` is given)."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    failures = [(seat, r) for seat, r in zip(seats, results, strict=True) if isinstance(r, BaseException)]
    budget = next((exc for _, exc in failures if isinstance(exc, BudgetExceeded)), None)
    if budget is not None:
        raise budget
    if failures:
        seat, exc = failures[0]
        if isinstance(exc, ModelCallError):
            model_id = models[seat].id if models and seat in models else ""
            who = f"Seat '{seat}'" + (f" ({model_id})" if model_id else "")
            raise ModelCallError(f"{who} failed {where}: {exc.problem}", exc.fix, kind=exc.kind, model=exc.model or model_id) from exc
        raise exc  # a usage error or a bug: as it is
    return results


ProtocolFn = Callable[..., Awaitable[Outcome]]  # (case, panel, settings, context=None) -> Outcome


@dataclass(frozen=True)
class ProtocolSpec:
    name: str
    run: ProtocolFn
    settings: type[BaseModel]
    scorers: tuple[Scorer, ...]
    description: str
    min_models: int = 1
    # The items a case yields for this protocol (e.g. one per specialist question); default: the case itself.
    expand: Callable[[Case], list[Case]] | None = None
    # Case fields every item must have (checked by the runner before any call, so a dataset that cannot
    # run this protocol is refused up front instead of failing item by item).
    needs: tuple[str, ...] = ()
    # Roles the protocol uses besides the seats, with the spec each defaults to when the run names none:
    # a model spec, "@seat" (the first seat's spec) or "@ROLE" (that role's spec). Absent: optional.
    role_defaults: dict[str, str] = field(default_factory=dict)

    def metric_kind(self, name: str) -> MetricKind | None:
        """The kind one of this protocol's scorers declares for score `name`, if any does."""
        for scorer in self.scorers:
            kind = scorer.declares(name)
            if kind is not None:
                return kind
        return None
