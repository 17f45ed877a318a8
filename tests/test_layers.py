"""The layering holds: a lower layer never imports a higher one (function-level imports included).

    core (errors, transcript, context, ...) < models < cases, scoring < protocols < runs, replay < cli

Imports under `if TYPE_CHECKING:` are for annotations only and are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import medpanel

SRC = Path(medpanel.__file__).parent

# package -> packages it must never import
FORBIDDEN = {
    "core": {"models", "cases", "scoring", "protocols", "runs", "replay", "cli", "web", "curate", "train"},
    "models": {"protocols", "runs", "replay", "cli", "scoring", "web", "curate", "train"},
    # cases may read a record with a scoring parser (an OpenTumorBoard conversation, an OSCE answer)
    "cases": {"protocols", "runs", "replay", "cli", "web", "curate", "train"},
    "scoring": {"protocols", "runs", "replay", "cli", "web", "curate", "train"},
    "protocols": {"runs", "replay", "cli", "web", "curate", "train"},
    # human rating sits beside runs: it reads runs, scoring, protocols, models and cases
    "rating": {"cli", "web", "curate", "train"},
    "runs": {"cli", "web", "curate", "train"},
    # the web app is a front end beside the CLI: it calls the library, never the CLI
    "web": {"cli", "curate", "train"},
    "curate": {"runs", "cli", "web", "train"},
    # training reads cases, protocols (the prompt), scoring (the reward) and curation's split; never a front end
    "train": {"cli", "web"},
}
# Top-level modules that belong to the core: everything may use them, they use nothing above.
CORE = {"errors", "transcript", "context", "reply_text", "literal", "redact", "event_loop", "ray_cluster"}


def layer_of(path: Path, root: Path) -> str:
    parts = path.relative_to(root).parts
    if len(parts) == 1:
        return "core" if path.stem in CORE else "top"
    return parts[0]


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imported_packages(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, first package under medpanel) of every medpanel import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_lines(tree)
    package = list(path.relative_to(root).parent.parts)
    found = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this file's package
                base = package[: len(package) - node.level + 1]
                names = [".".join(["medpanel", *base, *(node.module.split(".") if node.module else [])])]
            else:
                names = [node.module or ""]
                if node.module == "medpanel":
                    names = [f"medpanel.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "medpanel" and len(parts) > 1:
                found.append((node.lineno, parts[1]))
    return found


def violations(root: Path) -> list[str]:
    problems = []
    for path in sorted(root.rglob("*.py")):
        layer = layer_of(path, root)
        banned = FORBIDDEN.get(layer, set())
        for line, target in imported_packages(path, root):
            target_layer = "core" if target in CORE else target
            if target_layer in banned:
                problems.append(f"{path.relative_to(root)}:{line} ({layer}) imports medpanel.{target}")
    return problems


def test_no_lower_layer_imports_a_higher_one():
    assert violations(SRC) == []


def test_the_walk_finds_a_violation_where_there_is_one(tmp_path):
    # The check itself can fail: plant one upward import of each form in a copy of the layout.
    root = tmp_path / "medpanel"
    (root / "scoring").mkdir(parents=True)
    (root / "protocols").mkdir()
    (root / "scoring" / "bad.py").write_text("def f():\n    from medpanel.protocols import base\n")
    (root / "protocols" / "worse.py").write_text("from ..runs import runner\nimport medpanel.cli.common\n")
    (root / "protocols" / "fine.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from medpanel.runs import store\n")
    (root / "transcript.py").write_text("from medpanel import models\n")
    found = violations(root)
    assert found == [
        "protocols/worse.py:1 (protocols) imports medpanel.runs",
        "protocols/worse.py:2 (protocols) imports medpanel.cli",
        "scoring/bad.py:2 (scoring) imports medpanel.protocols",
        "transcript.py:1 (core) imports medpanel.models",
    ]
