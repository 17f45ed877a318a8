"""Model spec strings: parsing, lazy providers, and clear errors."""

from __future__ import annotations

import pytest

from medpanel.errors import UsageError
from medpanel.models import build_model, parse_spec
from medpanel.models.human import HumanModel
from medpanel.models.replay import ReplayModel
from medpanel.models.scripted import ScriptedModel
from medpanel.transcript import Transcript


def test_parse_openai_spec_with_url_and_params():
    spec = parse_spec("openai:my-model@http://127.0.0.1:8000/v1?vision=true&key_env=K")
    assert (spec.provider, spec.name, spec.base_url, spec.params) == ("openai", "my-model", "http://127.0.0.1:8000/v1", {"vision": "true", "key_env": "K"})
    assert parse_spec("local").provider == "local"
    local = parse_spec("local?n_ctx=4096&threads=2")
    assert (local.provider, local.name, local.params) == ("local", "", {"n_ctx": "4096", "threads": "2"})


@pytest.mark.parametrize("bad, message", [
    ("", "Empty model spec"),
    ("gpt4", "Unknown model provider 'gpt4'"),
    ("openai:", "names no model"),
    ("openai:m@ftp://x", "not an http"),
])
def test_bad_specs_say_what_to_do(bad, message):
    with pytest.raises(UsageError, match=message) as info:
        parse_spec(bad)
    assert info.value.fix


def test_build_scripted_from_spec(tmp_path):
    assert isinstance(build_model("scripted:echo"), ScriptedModel)
    replies = tmp_path / "r.yaml"
    replies.write_text("- first\n- {answer: B}\n")
    model = build_model(f"scripted:{replies}")
    assert list(model.queue) == ["first", {"answer": "B"}]
    with pytest.raises(UsageError, match="must hold a list"):
        (tmp_path / "bad.yaml").write_text("a: 1\n")
        build_model(f"scripted:{tmp_path / 'bad.yaml'}")


async def test_replay_answers_a_speakers_recorded_turns_in_order(tmp_path):
    t = Transcript()
    t.record("turn", "I choose A", speaker="GPT", model="openai:o1-mini", input_tokens=5, output_tokens=3)
    t.record("turn", "I choose B", speaker="Qwen")
    t.record("turn", "Now C", speaker="GPT")
    path = tmp_path / "t.jsonl"
    t.to_jsonl(path)
    model = build_model(f"replay:{path}#GPT")
    assert isinstance(model, ReplayModel)
    first = await model.complete("round 1")
    assert (first.text, first.usage.output_tokens) == ("I choose A", 3)
    assert (await model.complete("round 2")).text == "Now C"
    with pytest.raises(UsageError, match="no recorded turns left"):
        await model.complete("round 3")
    with pytest.raises(UsageError, match="no turns by Nobody"):
        build_model(f"replay:{path}#Nobody")
    with pytest.raises(UsageError, match="not found"):
        build_model("replay:/nonexistent.jsonl")


def test_human_spec_names_the_seat():
    model = build_model("human:Medical Oncologist")
    assert isinstance(model, HumanModel) and model.name == "Medical Oncologist" and not model.cacheable
