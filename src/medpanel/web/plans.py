"""The start form, read into a `Plan`: which case, which protocol, which model in which seat, and the seat a
person takes. The same names as the CLI: a person is the spec `human:<Title>`, a board's titled seat a role."""

from __future__ import annotations

from pathlib import Path

from medpanel.cases import load_case
from medpanel.cases.loaders import load_dataset
from medpanel.cases.model import Case
from medpanel.errors import UsageError
from medpanel.protocols import get_protocol
from medpanel.protocols.board_live import CATALOGUE, MODERATOR
from medpanel.web.live import Plan

PROTOCOLS = {
    "board-live": "Tumor board, live: a moderator gives the floor to each specialist",
    "board": "Tumor board, written by one model (OpenTumorBoard)",
    "consult": "Consult: physician and assistant (MedSyn)",
    "debate": "Debate: answer, debate disagreements, vote (MCC)",
    "single": "One model answers",
    "osce": "OSCE diagnostic dialogue with a patient",
}
MAX_TURNS = 12


def seat_choices(protocol: str) -> list[str]:
    """The seats a person can take in `protocol`."""
    return {"board-live": [MODERATOR, *CATALOGUE], "consult": ["Physician", "Assistant"], "osce": ["Patient", "Doctor"]}.get(protocol, [])


def all_seat_choices() -> dict[str, list[str]]:
    return {name: seat_choices(name) for name in PROTOCOLS}


def case_folders(cases_dir: Path | None) -> list[str]:
    if cases_dir is None or not cases_dir.is_dir():
        return []
    return sorted(p.name for p in cases_dir.iterdir() if p.is_dir() and any((p / n).exists() for n in ("case.yaml", "case.yml", "case.json")))


def pick_case(cases_dir: Path | None, folder: str, dataset: str) -> tuple[Case, str]:
    """The case named on the form: one of the offered folders, or one item of a dataset (`medqa:3`)."""
    if folder:
        if folder not in case_folders(cases_dir):  # only what the page offered: no path from the form is followed
            raise UsageError(f"'{folder}' is not one of the cases offered here.", "Pick a case from the list.")
        path = Path(cases_dir) / folder  # type: ignore[arg-type]
        return load_case(path), str(path)
    dataset = dataset.strip()
    if not dataset:
        raise UsageError("No case was chosen.", "Pick a case, name one item of a dataset (e.g. medqa:3, codiesp:0, agentclinic:0), or upload one.")
    if ":" not in dataset:
        raise UsageError(f"'{dataset}' names a whole dataset, not one case.", f"Name one item, e.g. {dataset}:0.")
    cases = load_dataset(dataset)
    if len(cases) != 1:
        raise UsageError(f"'{dataset}' names {len(cases)} cases, not one.", "Name one item, e.g. medqa:0.")
    return cases[0], dataset


def model_list(text: str, default: str) -> list[str]:
    models = [m.strip() for m in text.replace("\n", ",").split(",") if m.strip()]
    return models or [default]


def check_models(specs: list[str], allowed: list[str]) -> None:
    """Only the models the server offers: a spec names a server (which would be sent the API key), a key's
    variable or a file, so a page never picks one freely. A person's seat is chosen as a seat, never as a spec."""
    for spec in specs:
        if spec not in allowed:
            raise UsageError(f"The model '{spec[:80]}' is not offered by this server.",
                             f"Choose from: {', '.join(allowed)} (the server's admin adds others with --allow-model).")


def assignments(text: str, form: str, example: str) -> dict[str, str]:
    """'LEFT=RIGHT' lines, one seat each (`form` names them in the error, e.g. ROLE=MODEL)."""
    pairs: dict[str, str] = {}
    for line in filter(str.strip, text.splitlines()):
        left, sep, right = (part.strip() for part in line.partition("="))
        if not sep or not left or not right:
            raise UsageError(f"'{line.strip()[:80]}' is not {form}.", f"Write one seat per line, e.g. {example}.")
        if left in pairs:
            raise UsageError(f"The {left[:80]} is given twice.", "Give each seat once.")
        pairs[left] = right
    return pairs


def seat_models(text: str) -> dict[str, str]:
    """'ROLE=MODEL' lines: a board role given its own model."""
    return {"moderator" if role.lower() == "moderator" else role: spec
            for role, spec in assignments(text, "ROLE=MODEL", "Radiologist=local").items()}


def seat_people(text: str) -> dict[str, str]:
    """'SEAT=PERSON' lines: a colleague (a user of this server) seated by the one who starts the deliberation."""
    return assignments(text, "SEAT=PERSON", "Urologist=Dr Ada Lee")


def seat_person(protocol: str, seat: str, models: list[str], roles: dict[str, str], first_model: str) -> list[str]:
    """Put a person in `seat`, as the CLI names one (`human:<Title>`): a role of the board or the OSCE's patient, or
    one of the consult's two chairs or the OSCE's doctors (seats). Returns the seats; `roles` is changed in place."""
    if protocol == "board-live":
        roles["moderator" if seat == MODERATOR else seat] = f"human:{seat}"
    elif seat == "Patient":
        roles["patient"] = "human:Patient"
    elif seat in ("Physician", "Assistant"):  # the consult's chairs are its two seats: a person's chair beside a model's
        chairs = [models[0], models[1] if len(models) > 1 else models[0]]
        chairs[0 if seat == "Physician" else 1] = f"human:{seat}"
        return chairs
    elif seat == "Doctor":  # the OSCE's doctor is the panel: one person; the triage and the grading stay with a model
        roles["moderator"] = roles["judge"] = first_model
        return ["human:Doctor"]
    return models


def make_plan(case: Case, dataset: str, protocol: str, models: list[str], seat: str, seats_text: str, max_turns: int,
              people_text: str = "", me: str = "local") -> Plan:
    """The plan; `seat` is the starter's own (they are `me`), `people_text` seats colleagues (SEAT=PERSON lines)."""
    if protocol not in PROTOCOLS:
        raise UsageError(f"Unknown protocol '{protocol}'.", f"Choose one of: {', '.join(PROTOCOLS)}.")
    people = seat_people(people_text)
    if seat.strip():
        if seat.strip() in people:
            raise UsageError(f"The {seat.strip()} is both your seat and {people[seat.strip()]}'s.", "Seat one person per seat.")
        people = {seat.strip(): me, **people}
    for name in people:
        if name not in seat_choices(protocol):
            choices = ", ".join(seat_choices(protocol)) or "none (only models deliberate)"
            raise UsageError(f"There is no seat '{name[:80]}' in {protocol}.", f"Seats a person can take here: {choices}.")
    if not 1 <= max_turns <= MAX_TURNS:
        raise UsageError(f"{max_turns} turns is outside 1 to {MAX_TURNS}.", "Choose a smaller number of turns.")
    spec = get_protocol(protocol)
    roles = seat_models(seats_text) if protocol == "board-live" else {}
    settings = {"max_turns": max_turns} if "max_turns" in spec.settings.model_fields else {}
    first_model = models[0]
    for name in people:
        models = seat_person(protocol, name, models, roles, first_model)
    return Plan(case=case, protocol=protocol, models=models, roles=roles, settings=settings, seat=seat.strip() or None,
                dataset=dataset, people=people)
