"""Conventions every command keeps: each option readable from a MEDPANEL_ variable, and --json everywhere."""

from __future__ import annotations

import typer

from medpanel.cli import app


def all_commands(group, prefix: str = "medpanel"):
    if hasattr(group, "commands"):  # a group (Typer vendors its own click, so no isinstance checks)
        for name, sub in group.commands.items():
            yield from all_commands(sub, f"{prefix} {name}")
    else:
        yield prefix, group


def test_every_option_has_a_medpanel_environment_variable():
    root = typer.main.get_command(app)
    missing = []
    for name, command in all_commands(root):
        for param in command.params:
            if param.param_type_name == "option" and param.name != "help":
                envvars = param.envvar if isinstance(param.envvar, (list, tuple)) else [param.envvar]
                if not any(e and e.startswith("MEDPANEL_") for e in envvars):
                    missing.append(f"{name} {param.opts[0]}")
    assert not missing, "options without a MEDPANEL_ environment variable: " + ", ".join(missing)


def test_every_command_offers_json_output():
    root = typer.main.get_command(app)
    without = [name for name, command in all_commands(root) if not any("--json" in getattr(p, "opts", []) for p in command.params)]
    assert not without, "commands without --json: " + ", ".join(without)
