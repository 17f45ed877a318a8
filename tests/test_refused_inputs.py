"""Input that used to be accepted silently is refused with exit 2 and the fix, before any model call."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import MEDPANEL, ROOT
from medpanel.errors import UsageError
from medpanel.protocols import get_protocol, protocol_names
from medpanel.protocols.base import build_settings


def _cli(cli_env, *args):
    return subprocess.run([MEDPANEL, *args], env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("models, said", [("", "is empty"), ("scripted:echo,,scripted:echo", "empty entry (position 2 of 3)"),
                                          ("scripted:echo,", "empty entry")])
def test_empty_model_entries_are_refused(cli_env, models, said):
    proc = _cli(cli_env, "bench", "examples", "-p", "board", "-m", models)
    assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr


def test_resume_refuses_options_it_would_ignore(cli_env):
    proc = _cli(cli_env, "bench", "examples/prostate", "-p", "board", "-m", "scripted:echo", "--run-id", "r1")
    assert proc.returncode == 0, proc.stderr
    proc = _cli(cli_env, "bench", "--resume", "r1", "--limit", "3", "-m", "local", "--set", "max_tokens=9")
    assert proc.returncode == 2 and "--models, --set, --limit" in proc.stderr and "Traceback" not in proc.stderr
    proc = _cli(cli_env, "bench", "--resume", "r1", "-c", "2")  # concurrency changes speed, not the run: allowed
    assert proc.returncode == 0, proc.stderr


def test_a_dataset_lacking_what_the_protocol_reads_is_refused_before_any_call(cli_env):
    proc = _cli(cli_env, "bench", "examples", "-p", "single", "-m", "scripted:Answer: A")
    assert proc.returncode == 2 and "cannot run the single protocol" in proc.stderr and "no options" in proc.stderr
    runs = _cli(cli_env, "runs", "--json")
    assert '"id"' not in runs.stdout  # nothing was started


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(protocol_names()),
       values=st.dictionaries(st.text(max_size=16), st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                                                              st.text(max_size=20), st.lists(st.integers(), max_size=3)), max_size=4))
def test_any_settings_give_valid_settings_or_a_usage_error(name, values):
    spec = get_protocol(name)
    try:
        built = build_settings(spec.settings, values, name)
    except UsageError as exc:
        assert exc.problem and exc.fix
    else:
        assert isinstance(built, spec.settings)
