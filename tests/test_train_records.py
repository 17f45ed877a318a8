"""Training runs in the store and their report: each logged step kept once (a resume replaces it), the curves
read from the store, the page escaped, and `medpanel train runs` / `medpanel report ID` over them."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import MEDPANEL, ROOT

from medpanel.errors import UsageError
from medpanel.runs.store import Store
from medpanel.train import records
from medpanel.train.report import render_markdown, training_html, training_report


def fake_run(store: Store, out, run_id: str = "grpo-20261202-000000-abcdef") -> str:
    records.start_run(store, run_id, kind="grpo", out=out, settings={"judge": "<script>alert(1)</script>", "steps": 3},
                      data={"train_sha256": "ab" * 32}, seed=7)
    for step, reward in ((1, -0.3), (2, 0.1), (3, 0.4)):
        records.add_step(store, run_id, step, {"loss": 0.01 * step, "reward": reward, "reward_format": reward - 0.5})
    records.add_step(store, run_id, 2, {"loss": 0.5, "reward": 0.2, "reward_format": -0.3})  # step 2 again, after a resume
    records.add_step(store, run_id, 3, {"eval_reward": 0.35, "eval_loss": float("nan")}, "eval")
    records.finish_run(store, run_id, "done", {"best_checkpoint": str(out / "checkpoint-3"), "best_validation_reward": 0.35})
    return run_id


def test_steps_are_stored_once_and_the_report_reads_the_curves(tmp_path):
    store = Store(tmp_path / "s.db")
    run_id = fake_run(store, tmp_path / "out")
    run = records.training_run(store, run_id)
    assert run["status"] == "done" and run["seed"] == 7 and run["data"]["train_sha256"] == "ab" * 32
    assert [(s["step"], s["phase"]) for s in run["steps"]] == [(1, "train"), (2, "train"), (3, "eval"), (3, "train")]
    assert run["steps"][2]["metrics"]["eval_loss"] is None  # NaN stored as null, not as invalid JSON
    report = training_report(store, run_id)
    assert report["curves"]["reward"] == [(1, -0.3), (2, 0.2), (3, 0.4)]  # the resumed step 2 replaced the first
    assert report["curves"]["validation reward"] == [(3, 0.35)] and "validation loss" not in report["curves"]
    text = render_markdown(report)
    assert "| step | loss | reward | format term | validation reward |" in text and "| 2 | 0.5 | 0.2 | -0.3 |  |" in text
    page = training_html(report, plot=False)
    assert "<script>alert" not in page and "&lt;script&gt;" in page
    assert records.resolve_training_run(store, "grpo-2026") == run_id and records.resolve_training_run(store, "sft-") is None
    fake_run(store, tmp_path / "other", "grpo-20261202-000001-123456")
    with pytest.raises(UsageError, match="matches 2"):
        records.resolve_training_run(store, "grpo-2026")


def test_a_run_id_lives_in_its_output_folder(tmp_path):
    first = records.run_id_for(tmp_path / "out", "sft")
    assert first.startswith("sft-") and records.run_id_for(tmp_path / "out", "sft") == first  # a resume keeps it
    assert records.run_id_for(tmp_path / "elsewhere", "sft") != first


def test_the_cli_lists_training_runs_and_reports_one(tmp_path, cli_env):
    store = Store(tmp_path / "cli.db")
    run_id = fake_run(store, tmp_path / "out")
    env = {**cli_env, "MEDPANEL_STORE": str(tmp_path / "cli.db")}
    listed = subprocess.run([MEDPANEL, "train", "runs", "--json"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and json.loads(listed.stdout) == [{"id": run_id, "kind": "grpo", "status": "done", "steps": 3,
                                                                       "out": str(tmp_path / "out")}]
    page = tmp_path / "r.html"
    shown = subprocess.run([MEDPANEL, "report", run_id[:10], "--html", str(page)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    html = page.read_text()
    assert "<svg" in html and "validation reward" in html and "<script>alert" not in html
    folder = subprocess.run([MEDPANEL, "report", run_id, "--out", str(tmp_path / "rep"), "--json"], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert folder.returncode == 0 and (tmp_path / "rep" / "curves.png").is_file() and json.loads(folder.stdout)["steps"] == 3
    both = subprocess.run([MEDPANEL, "report", run_id, "last"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert both.returncode == 2 and "on its own" in both.stderr
    (tmp_path / "a-file").write_text("x")
    unwritable = subprocess.run([MEDPANEL, "report", run_id, "--out", str(tmp_path / "a-file")], env=env, cwd=ROOT, capture_output=True,
                                text=True, timeout=60)
    assert unwritable.returncode == 2 and "Cannot write the report" in unwritable.stderr and "Traceback" not in unwritable.stderr


def test_training_commands_without_the_train_extra_say_how_to_install_it(tmp_path, cli_env):
    """A fresh `pip install -e .[local]` has no transformers/trl: one line with the install command, exit 2."""
    import sys

    data = tmp_path / "data"
    built = subprocess.run([MEDPANEL, "train", "data", "examples", "--out", str(data), "--validation", "0.2"], env=cli_env, cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    judge = f"scripted:{ROOT / 'examples' / 'training' / 'scripted_judge.yaml'}"
    for command in (["grpo", str(data), "--out", str(tmp_path / "g"), "--judge", judge], ["sft", str(data), "--out", str(tmp_path / "s")]):
        code = ("import sys; sys.modules['transformers'] = None; sys.modules['trl'] = None; from medpanel.cli import main; "
                f"sys.argv = ['medpanel', 'train', *{command!r}]; main()")
        proc = subprocess.run([sys.executable, "-c", code], env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "medpanel[train]" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
