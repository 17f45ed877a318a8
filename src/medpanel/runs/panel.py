"""The run's panel: its seats and named roles, resolved from the config and built once, by the runner only.

A role is named in `RunConfig.roles` (`judge`, `patient`, `moderator`, or a seat title such as
`Radiologist`) as a model spec; a protocol's own defaults fill the roles a run left out (OSCE: the
patient is the embedded model, the moderator the first seat, the judge the moderator). The resolved
roles are stored with the run, so `show` and the report name every model the run used.
"""

from __future__ import annotations

from typing import Any

from medpanel.context import RunContext
from medpanel.errors import UsageError
from medpanel.models import Runtime, build_model
from medpanel.models.base import Model
from medpanel.protocols.base import FUNCTION_ROLES, Panel, ProtocolSpec

# Settings keys that named models before roles were recorded apart; read from old stored runs only.
_OLD_ROLE_SETTINGS = ("patient", "moderator", "judge")


def human_spec(role: str, spec: str) -> str:
    """`human` in a role's place means a person in that role: `human:<Title>` (a function role is capitalised)."""
    return f"human:{role if role not in FUNCTION_ROLES else role.capitalize()}" if spec.strip() == "human" else spec


def resolve_roles(spec: ProtocolSpec, seats: list[str], given: dict[str, str]) -> dict[str, str]:
    """Every role the run uses, as specs: the given ones, then the protocol's defaults for those left out.
    Function roles come first in one fixed order, then titled seats in the order given."""
    roles = {role: human_spec(role, value) for role, value in given.items() if value}
    for role, default in spec.role_defaults.items():
        if role in roles:
            continue
        if default == "@seat":
            value = seats[0] if seats else None
        elif default.startswith("@"):
            value = roles.get(default[1:])
        else:
            value = default
        if value:
            roles[role] = human_spec(role, value)
    ordered = {role: roles[role] for role in FUNCTION_ROLES if role in roles}
    return ordered | {role: value for role, value in roles.items() if role not in ordered}


def migrate_config(values: dict[str, Any]) -> dict[str, Any]:
    """A stored config written before roles were recorded apart: model specs held in the protocol's
    settings (judge, patient, moderator; the live board's seats and humans) become roles."""
    settings = dict(values.get("settings") or {})
    roles = dict(values.get("roles") or {})
    moved = False
    seats = list(values.get("models") or [])
    for key in _OLD_ROLE_SETTINGS:
        if key in settings:
            value = settings.pop(key)
            moved = True
            if isinstance(value, str) and value.strip().isdigit() and 1 <= int(value) <= len(seats):
                value = seats[int(value) - 1]  # the long form named its moderator seat by position
            if isinstance(value, str) and value:
                roles.setdefault(key, value)
    if isinstance(settings.get("seats"), dict):
        for role, value in settings.pop("seats").items():
            roles.setdefault("moderator" if role == "Moderator" else role, value)
        moved = True
    if isinstance(settings.get("humans"), list):
        for role in settings.pop("humans"):
            roles.setdefault(role, f"human:{role}")
        moved = True
    return {**values, "settings": settings, "roles": roles} if moved else values


def build_panel(specs: list[str], runtime: Runtime, roles: dict[str, str] | None = None, context: RunContext | None = None) -> Panel:
    """The seats (one model per spec, in order) and the roles (see build_roles)."""
    if not specs:
        raise UsageError("No models given.", "Pass --models, e.g. --models local or --models openai:gpt-4o-mini.")
    panel = Panel.of([person_or_model(s, s.partition(":")[2], runtime, context) for s in specs], names=specs)
    build_roles(panel, roles or {}, runtime, context, specs)
    return panel


def person_or_model(spec: str, title: str, runtime: Runtime, context: RunContext | None) -> Model:
    """The model for `spec`; a person's seat (`human:<Title>`) is built by the context's `human_seat` when it
    has one (the web page), else at the terminal."""
    if spec.startswith("human:") and context is not None and context.human_seat is not None:
        return context.human_seat(title, runtime)
    return build_model(spec, runtime)


def build_roles(panel: Panel, roles: dict[str, str], runtime: Runtime, context: RunContext | None = None,
                seat_specs: list[str] | None = None) -> None:
    """Add to `panel` every role it lacks. A role whose spec is a seat's shares that seat's model, two roles
    with one spec share one model, and a person's seat is built by the context's `human_seat` when it has
    one (the web page), else at the terminal."""
    by_spec: dict[str, Model] = {}
    for spec, model in zip(seat_specs or list(panel.seats), panel.seats.values()):
        by_spec.setdefault(spec, model)
    for role, spec in roles.items():
        if role in panel.roles:
            continue
        if spec not in by_spec:
            by_spec[spec] = person_or_model(spec, spec.partition(":")[2] or role, runtime, context)
        panel.roles[role] = by_spec[spec]


def run_roles(run: dict) -> dict[str, str]:
    """A stored run's roles, with its protocol's defaults spelled out (older runs: read from their settings,
    see migrate_config), so a default and the same model named explicitly compare equal."""
    from medpanel.protocols import PROTOCOLS, get_protocol

    config = migrate_config(run.get("settings") or {})
    given = config.get("roles") or {}
    if run.get("protocol") not in PROTOCOLS:
        return given
    return resolve_roles(get_protocol(run["protocol"]), list(run.get("models") or config.get("models") or []), given)
