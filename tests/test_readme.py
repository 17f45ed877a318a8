"""The README's set-up commands and examples are true: its console examples and Python snippet run."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys


from conftest import MEDPANEL, ROOT, needs_local_model

README = (ROOT / "README.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def console_lines() -> list[str]:
    return [line[2:] for block in blocks("console") for line in block.splitlines() if line.startswith("$ ")]


def test_readme_opens_with_the_two_setup_commands():
    first_block = blocks("bash")[0].strip().splitlines()
    assert len(first_block) == 2
    assert README.index("```bash") < README.index("\n## ")  # before anything else
    assert first_block[0].endswith("medpanel board examples/prostate")
    # the whole suite: pytest with options only (its workers), never a selection of tests
    runner, _, options = first_block[1].rpartition(".venv/bin/pytest")
    assert runner and all(word.startswith("-") or word in ("auto", "loadfile") for word in options.split()), first_block[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pytest" in ci and "README.md" in ci  # CI runs the README's own test command


def test_console_examples_run(cli_env, shared_data):
    needs_local_model()
    before = set(_untracked())
    lines = console_lines()
    assert len(lines) >= 7
    # What is checked is that each example works, not how fast: on a CI machine whose other test worker
    # keeps both cores busy, the chat example once passed its 120 s deadline. Every call gets 5 minutes
    # (under the 10 a command may take here, so a stuck call still ends in medpanel's own error).
    cli_env.setdefault("MEDPANEL_TIMEOUT", "300")
    for line in lines:
        command, _, comment = line.partition("   # ")
        expected = int(m.group(1)) if (m := re.search(r"exits (\d+)", comment)) else 0
        argv = shlex.split(command)
        assert argv[0] == "medpanel"
        proc = subprocess.run([MEDPANEL, *argv[1:]], env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert proc.returncode == expected, f"{line}\n{proc.stdout}\n{proc.stderr}"
    assert set(_untracked()) <= before, "README examples must not leave files in the project"


def _untracked() -> list[str]:
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True, text=True).stdout
    return [line[3:] for line in out.splitlines() if line.startswith("??")]


def test_python_snippet_runs(cli_env):
    needs_local_model()
    (snippet,) = blocks("python")
    proc = subprocess.run([sys.executable, "-c", snippet], env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "answer=" in proc.stdout
