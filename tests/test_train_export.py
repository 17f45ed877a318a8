"""Training data exported from stored debate and consult runs: real runs of scripted seats in a SQLite store,
then the records checked against the requests the seats really received."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest
from conftest import MEDPANEL, ROOT

from medpanel.cases import Case, Reference
from medpanel.errors import ModelCallError, UsageError
from medpanel.models import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel
from medpanel.protocols.consult import DISCHARGE_REQUEST, PHYSICIAN_SYSTEM
from medpanel.protocols.single import SYSTEM, question_prompt
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.store import Store
from medpanel.train.export import export_runs, split_export, write_export

OPTIONS = {"A": "alpha", "B": "beta", "C": "gamma", "D": "delta"}


def mcq(cid: str, gold: str, question: str | None = None) -> Case:
    return Case(id=cid, question=question or f"Which drug for {cid}?", options=OPTIONS, reference=Reference(answer=gold))


def write_cases(path, cases) -> str:
    path.write_text("".join(c.model_dump_json() + "\n" for c in cases))
    return str(path)


def seat(name: str, *script, cacheable: bool = False) -> ScriptedModel:
    """A seat answering call by call: a letter becomes a short rationale ending 'Answer: X'."""
    replies = [f"{name} reasons about call {i}.\nAnswer: {s}" if isinstance(s, str) and len(s) == 1 else s for i, s in enumerate(script)]
    return ScriptedModel(replies, name=name, cacheable=cacheable)


def sent(model: ScriptedModel, call: int) -> list[dict]:
    return [{"role": m.role, "content": m.content} for m in model.history[call].messages]


async def debate_run(store, cases, seats, dataset, **settings):
    runtime = Runtime(cache=store)
    for model in seats:  # the seats call through the run's runtime, so their calls are logged against the items
        model.runtime = runtime
    config = RunConfig(dataset=dataset, protocol="debate", models=[s.name for s in seats], concurrency=1, settings=settings)
    result = await run_benchmark(store, config, runtime, panel=Panel.of(list(seats), names=[s.name for s in seats]), cases=cases)
    return result.run_id


# Four questions, one item at a time (the seats' queues run across items in order):
#   q1 (gold B): B C C, then round 1 B B C -> vote B, right; x and y end on B, z on C
#   q2 (gold A): B B B at once -> consensus on the wrong answer
#   q3 (gold C): x gives no letter, y and z C; round 1 all C -> consensus, right
#   q4: y's model fails -> the item fails
SCRIPTS = {"x": ["B", "B", "B", "I cannot tell.", "C", "B"],
           "y": ["C", "B", "B", "C", "C", ModelCallError("server refused the request", kind="bad_request")],
           "z": ["C", "C", "B", "C", "C", "B"]}
CASES = [mcq("q1", "B"), mcq("q2", "A"), mcq("q3", "C"), mcq("q4", "B")]


@pytest.fixture
async def debated(store, tmp_path):
    seats = [seat(n, *s) for n, s in SCRIPTS.items()]
    run_id = await debate_run(store, CASES, seats, write_cases(tmp_path / "mcq.jsonl", CASES), max_rounds=1)
    return run_id, {s.name: s for s in seats}


async def test_winning_seats_give_their_last_call_and_reply_as_sft_conversations(store, debated):
    run_id, seats = debated
    export = export_runs(store, [run_id])
    by_id = {r["id"]: r for r in export.sft}
    assert sorted(by_id) == [f"{run_id}/q1/0/x", f"{run_id}/q1/0/y", f"{run_id}/q3/0/x", f"{run_id}/q3/0/y", f"{run_id}/q3/0/z"]
    # x's second call was q1's round 1: the messages it was sent, then what it said
    x_q1 = by_id[f"{run_id}/q1/0/x"]
    assert x_q1["messages"] == [*sent(seats["x"], 1), {"role": "assistant", "content": "x reasons about call 1.\nAnswer: B"}]
    assert [m["role"] for m in x_q1["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert x_q1["messages"][2]["content"] == "x reasons about call 0.\nAnswer: B"  # its own round-0 answer
    assert "Panelist 2 (round 0) answered C (gamma)" in x_q1["messages"][3]["content"]  # what its peers said
    assert x_q1["case"] == "q1" and x_q1["verified"] is False  # scripted fakes' requests are not logged
    # y changed its mind in round 1: its last call is the one that ended on the right answer
    assert by_id[f"{run_id}/q1/0/y"]["messages"] == [*sent(seats["y"], 1), {"role": "assistant", "content": "y reasons about call 1.\nAnswer: B"}]
    assert by_id[f"{run_id}/q3/0/x"]["messages"][2]["content"] == "I cannot tell."
    reasons = export.reasons()
    assert reasons["seat ended on a wrong or unparsed answer"] == 1  # q1's z
    assert reasons["accuracy below --min-score (no winning transcript)"] == 1  # q2
    assert reasons["failed item"] == 1  # q4
    assert reasons["unparsed answer (left out of pairs)"] == 1  # q3's x in round 0


async def test_round_zero_gives_right_over_wrong_pairs_on_one_shared_prompt(store, debated):
    run_id, seats = debated
    pairs = export_runs(store, [run_id]).preferences
    assert [p["id"] for p in pairs] == [f"{run_id}/q1/0/x > {run_id}/q1/0/y", f"{run_id}/q1/0/x > {run_id}/q1/0/z"]
    first = pairs[0]
    assert first["prompt"] == sent(seats["x"], 0) == sent(seats["y"], 0) == [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": question_prompt(CASES[0])}]
    assert first["chosen"] == [{"role": "assistant", "content": "x reasons about call 0.\nAnswer: B"}]
    assert first["rejected"] == [{"role": "assistant", "content": "y reasons about call 0.\nAnswer: C"}]
    assert (first["chosen_score"], first["rejected_score"], first["case"]) == (1.0, 0.0, "q1")
    # q2 (all wrong) and q3 (the only wrong reply unparsed) give no pair; later rounds' prompts differ per seat
    assert {p["case"] for p in pairs} == {"q1"}


async def test_prompts_are_checked_against_the_logged_requests(store, tmp_path):
    cases = [mcq("v1", "B")]
    seats = [seat("x", "B", cacheable=True), seat("y", "C", cacheable=True), seat("z", "B", cacheable=True)]
    run_id = await debate_run(store, cases, seats, write_cases(tmp_path / "v.jsonl", cases), max_rounds=0)
    export = export_runs(store, [run_id])
    assert [(r["id"], r["verified"]) for r in export.sft] == [(f"{run_id}/v1/0/x", True), (f"{run_id}/v1/0/z", True)]
    assert len(export.preferences) == 2
    # the dataset's question edited since the run: the rebuilt prompts are not what was sent, so nothing is exported
    changed = export_runs(store, [run_id], cases=[mcq("v1", "B", question="Another question?")])
    assert changed.sft == [] and changed.preferences == []
    assert changed.reasons() == {"a rebuilt prompt is not among the requests the store logged (the case or the prompts changed since the run)": 1}
    # and a changed answer key is caught by the run's own per-seat scores
    regraded = export_runs(store, [run_id], cases=[mcq("v1", "C")])
    assert regraded.reasons() == {"the dataset's case is not the one the run scored (its answer differs)": 1}


async def test_a_small_seat_is_rebuilt_in_its_compact_prompt(store, tmp_path):
    from medpanel.protocols.single import SMALL_SYSTEM

    cases = [mcq("m1", "B")]
    # the small seat gives a line of reasoning, then the letter under a grammar (two calls, one turn)
    small = ScriptedModel(["This one fits best.", {"answer": "B"}], name="x", small=True, cacheable=True)
    seats = [small, seat("y", "C", cacheable=True), seat("z", "B", cacheable=True)]
    run_id = await debate_run(store, cases, seats, write_cases(tmp_path / "m.jsonl", cases), max_rounds=0)
    export = export_runs(store, [run_id])
    x = next(r for r in export.sft if r["id"].endswith("/x"))
    assert x["verified"] is True and x["messages"][0] == {"role": "system", "content": SMALL_SYSTEM}
    assert x["messages"] == [*sent(small, 0), {"role": "assistant", "content": "This one fits best.\nAnswer: B"}]
    # its compact prompt is not the others' round 0: it pairs with no one
    assert [p["id"] for p in export.preferences] == [f"{run_id}/m1/0/z > {run_id}/m1/0/y"]


async def test_the_split_keeps_each_case_on_one_side_of_both_files(store, tmp_path):
    cases = [mcq(f"s{i:02d}", "B") for i in range(12)]
    right, wrong = (ScriptedModel(responder=lambda r, a=a: f"Reasoning.\nAnswer: {a}", name=n) for n, a in (("x", "B"), ("y", "C")))
    also_right = ScriptedModel(responder=lambda r: "Reasoning.\nAnswer: B", name="z")
    run_id = await debate_run(store, cases, [right, wrong, also_right], write_cases(tmp_path / "s.jsonl", cases), max_rounds=0)
    export = export_runs(store, [run_id])
    # x and z said the same to the same prompt: one SFT record per case, one pair per case
    assert len(export.sft) == 12 and len(export.preferences) == 12
    assert export.reasons() == {"the same conversation as an exported record": 12, "seat ended on a wrong or unparsed answer": 12}
    files, placed = split_export(export, validation=0.25, seed=3)
    sides = {name: {r["case"] for r in records} for name, records in files.items()}
    assert len(sides["sft_validation"]) == 3 and len(sides["sft_train"]) == 9
    assert not (sides["sft_train"] | sides["preferences_train"]) & (sides["sft_validation"] | sides["preferences_validation"])
    assert sides["sft_train"] == sides["preferences_train"] == {c for c, s in placed.items() if s == "train"}
    # a rebuild into the same folder keeps every case where it was, whatever the seed
    manifest = write_export(tmp_path / "out", export, validation=0.25, seed=3)
    again = write_export(tmp_path / "out", export, validation=0.5, seed=99)
    assert again["cases"] == manifest["cases"] == placed


# ---------------------------------------------------------------- consult


NOTE = {"history of present illness": "Three days of fever, dysuria and right flank pain.", "pertinent results": "Nitrites positive."}
PYELO = Case(id="pyelo", chief_complaint="Fever and right flank pain", note=NOTE, reference=Reference(codes=["N10", "R50.9"]))


async def consult_run(store, dataset, physician: ScriptedModel):
    assistant = ScriptedModel(responder=lambda r: "Fever, flank pain, positive nitrites.", name=f"assistant_{physician.name}", cacheable=True)
    runtime = Runtime(cache=store)
    physician.runtime = assistant.runtime = runtime
    config = RunConfig(dataset=dataset, protocol="consult", models=[physician.name, assistant.name], concurrency=1)
    result = await run_benchmark(store, config, runtime, panel=Panel.of([physician, assistant], names=["Physician", "Assistant"]),
                                 cases=[PYELO])
    return result.run_id


@pytest.fixture
async def consulted(store, tmp_path, shared_data):  # the ICD-10 scores need the code table in the shared data
    dataset = write_cases(tmp_path / "notes.jsonl", [PYELO])
    good = ScriptedModel([{"message": "Initial evaluation, please."}, {"action": "submit", "message": "Ready."},
                          {"diagnosis": "Acute pyelonephritis", "codes": ["N10", "R50.9"]}], name="good", cacheable=True)
    poor = ScriptedModel([{"message": "Initial evaluation, please."}, {"action": "ask", "message": "Any cough?"},
                          {"action": "submit", "message": "Ready."}, {"diagnosis": "Pneumonia", "codes": ["J18.9"]}], name="poor", cacheable=True)
    return [await consult_run(store, dataset, good), await consult_run(store, dataset, poor)], good, poor


async def test_a_consult_that_scored_well_gives_the_physicians_whole_dialogue(store, consulted):
    (good_run, poor_run), good, poor = consulted
    export = export_runs(store, [good_run, poor_run])
    (record,) = export.sft
    assert record["id"] == f"{good_run}/pyelo/0/Physician" and record["verified"] is True
    discharge = json.dumps({"diagnosis": "Acute pyelonephritis", "codes": ["N10", "R50.9"]})
    assert record["messages"] == [*sent(good, 2), {"role": "assistant", "content": discharge}]
    assert [m["role"] for m in record["messages"]] == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert record["messages"][0]["content"] == PHYSICIAN_SYSTEM and record["messages"][5]["content"] == DISCHARGE_REQUEST
    assert record["messages"][3]["content"].startswith("Assistant: Fever, flank pain, positive nitrites.")
    assert export.reasons()["code_f1 below --min-score (no winning transcript)"] == 1  # the pneumonia discharge


async def test_two_consults_of_a_case_pair_where_the_physicians_part(store, consulted):
    (good_run, poor_run), good, poor = consulted
    (pair,) = export_runs(store, [poor_run, good_run]).preferences
    assert pair["id"] == f"{good_run}/pyelo/0/Physician > {poor_run}/pyelo/0/Physician"
    # both asked for the evaluation and heard the same answer; then one submitted and the other asked again
    assert pair["prompt"] == sent(good, 1) == sent(poor, 1)
    assert pair["chosen"] == [{"role": "assistant", "content": json.dumps({"action": "submit", "message": "Ready."})}]
    assert pair["rejected"] == [{"role": "assistant", "content": json.dumps({"action": "ask", "message": "Any cough?"})}]
    assert pair["chosen_score"] == 1.0 and pair["rejected_score"] == 0.0
    assert export_runs(store, [good_run, poor_run], min_gap=1.0).preferences == []  # a gap must be above --min-gap
    assert len(export_runs(store, [good_run]).preferences) == 0  # one consult of a case: nothing to compare


# ---------------------------------------------------------------- the files, TRL and the command


def chatml_tokenizer():
    """A word-level tokenizer with a ChatML template: enough for TRL's chat formatting, built in milliseconds."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(WordLevel({"[UNK]": 0, "<|im_start|>": 1, "<|im_end|>": 2}, unk_token="[UNK]"))
    core.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", eos_token="<|im_end|>", bos_token="<|im_start|>")
    tokenizer.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return tokenizer


async def test_the_command_writes_files_datasets_and_trl_read(store, debated, cli_env, tmp_path):
    pytest.importorskip("trl")
    from datasets import load_dataset
    from trl.data_utils import is_conversational, maybe_apply_chat_template

    run_id, _ = debated
    env = {**cli_env, "MEDPANEL_STORE": str(store.path)}
    out = tmp_path / "export"
    done = subprocess.run([MEDPANEL, "train", "export", run_id[:8], "--out", str(out), "--validation", "0", "--json"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    manifest = json.loads(done.stdout)
    assert manifest["runs"][0]["id"] == run_id
    assert manifest["counts"] == {"sft_train": 5, "sft_validation": 0, "preferences_train": 2, "preferences_validation": 0, "verified_sft": 0}
    assert manifest["skipped"]["failed item"] == 1 and manifest["cases"] == {"q1": "train", "q3": "train"}
    assert sorted(manifest["files"]) == ["preferences_train.jsonl", "sft_train.jsonl"]  # an empty side is not written
    for name, entry in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == entry["sha256"]
    assert json.loads((out / "manifest.json").read_text()) == manifest
    sft = load_dataset("json", data_files=str(out / "sft_train.jsonl"), split="train")
    prefs = load_dataset("json", data_files=str(out / "preferences_train.jsonl"), split="train")
    assert len(sft) == 5 and len(prefs) == 2
    assert is_conversational(sft[0]) and is_conversational(prefs[0])
    tokenizer = chatml_tokenizer()
    text = maybe_apply_chat_template(sft[0], tokenizer)["text"]
    assert text.startswith("<|im_start|>system\n") and text.endswith(sft[0]["messages"][-1]["content"] + "<|im_end|>\n")
    formatted = prefs.map(maybe_apply_chat_template, fn_kwargs={"processing_class": tokenizer})
    assert formatted[0]["prompt"].endswith("<|im_start|>assistant\n")
    assert formatted[0]["chosen"] == prefs[0]["chosen"][0]["content"] + "<|im_end|>\n"
    assert formatted[0]["rejected"].endswith("Answer: C<|im_end|>\n")

    # 'last' resolves too, and a rebuild over the same folder writes the same files
    again = subprocess.run([MEDPANEL, "train", "export", "last", "--out", str(out), "--validation", "0", "--json"],
                           env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert again.returncode == 0 and json.loads(again.stdout)["files"] == manifest["files"]


async def test_bad_input_exits_2_with_the_problem_and_the_fix(store, tmp_path, cli_env):
    cases = [mcq("w1", "A")]
    wrong = await debate_run(store, cases, [seat("x", "B"), seat("y", "B")], write_cases(tmp_path / "w.jsonl", cases), max_rounds=0)
    board = RunConfig(dataset="examples", protocol="board", models=["scripted:x"])
    store.create_run("board-run", dataset="examples", protocol="board", models=board.models, settings=board.model_dump())
    env = {**cli_env, "MEDPANEL_STORE": str(store.path)}

    def export(*args):
        return subprocess.run([MEDPANEL, "train", "export", *args, "--out", str(tmp_path / "o")], env=env,
                              capture_output=True, text=True, timeout=120, cwd=ROOT)

    for args, problem in [(["no-such-run"], "No run matches 'no-such-run'"),
                          (["board-run"], "used the 'board' protocol"),
                          ([wrong], "Nothing to export from"),
                          ([wrong, "--score", "nope"], "has no score 'nope'")]:
        done = export(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert problem in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 2  # the problem, then the fix
    assert not (tmp_path / "o").exists()
    with pytest.raises(UsageError, match="not a share below 1"):
        split_export(export_runs(store, [wrong], min_score=0.0), validation=1.0)


def test_a_run_whose_dataset_is_gone_is_refused(tmp_path):
    db = Store(tmp_path / "gone.db")
    config = RunConfig(dataset=str(tmp_path / "missing.jsonl"), protocol="debate", models=["x", "y"])
    db.create_run("r1", dataset=config.dataset, protocol="debate", models=config.models, settings=config.model_dump())
    with pytest.raises(UsageError, match="Cannot read run r1's dataset") as info:
        export_runs(db, ["r1"])
    assert "folder the run was started in" in info.value.fix
    db.close()
