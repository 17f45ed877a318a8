"""Audio track, second half: who spoke each word, and the utterances that follow from it.

Two diarizers:
- pyannote (the paper's): used when `pyannote.audio` is installed and a local pipeline folder is given
  (`--diarization-model`), configured for 1 to 10 speakers.
- The CPU fallback, the default: Whisper's segments are cut into chunks at pauses between words (and at
  most `chunk_s` long), each chunk of at least `min_chunk_s` is embedded with resemblyzer's voice encoder
  (its weights ship inside the package), and the embeddings are clustered agglomeratively (cosine
  distance, average linkage) with a distance threshold, bounded to 1..10 speakers. A shorter chunk (its
  voice is too brief to embed reliably) joins the cluster whose centroid is nearest; one under 0.3 s
  takes the speaker of the clustered chunk nearest in time. On synthetic voices the same speaker's chunks sit at cosine distance < 0.15 and
  different speakers' at > 0.2 (bench/bench_curate.py measures the error rate).

Either way each word takes the speaker of the time it was said, and an utterance is a maximal run of one
speaker's words, so a speaker change inside a Whisper segment splits it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from medpanel.curate.align import Utterance
from medpanel.curate.transcribe import RATE, Segment, Word
from medpanel.errors import MissingExtraError, UsageError

MIN_SPEAKERS, MAX_SPEAKERS = 1, 10


@dataclass(frozen=True)
class DiarizeSettings:
    threshold: float = 0.2  # cosine distance at which two clusters stop merging
    pause_s: float = 0.3  # a gap between words at least this long may end a chunk
    chunk_s: float = 4.0
    min_chunk_s: float = 1.5  # shorter chunks are not clustered: they join the nearest voice
    min_speakers: int = MIN_SPEAKERS
    max_speakers: int = MAX_SPEAKERS


def chunks(segments: Sequence[Segment], settings: DiarizeSettings) -> list[list[Word]]:
    """Runs of words to embed: a segment cut where words pause, and a run longer than chunk_s cut into
    equal parts (so no short tail is left to be misheard as another voice)."""
    runs: list[list[Word]] = []
    for segment in segments:
        run: list[Word] = []
        for word in segment.words:
            if run and word.start - run[-1].end >= settings.pause_s:
                runs.append(run)
                run = []
            run.append(word)
        if run:
            runs.append(run)
    out: list[list[Word]] = []
    for run in runs:
        parts = min(len(run), max(1, math.ceil((run[-1].end - run[0].start) / settings.chunk_s)))
        size, extra = divmod(len(run), parts)  # part sizes differ by one word at most
        at = 0
        for k in range(parts):
            take = size + (1 if k < extra else 0)
            out.append(run[at:at + take])
            at += take
    return out


def load_encoder(device: str = "cpu"):
    """resemblyzer's voice encoder on `device` ("cpu", or "cuda" on a Ray worker given a GPU)."""
    try:
        with warnings.catch_warnings():  # its VAD dependency imports the deprecated pkg_resources
            warnings.simplefilter("ignore")
            from resemblyzer import VoiceEncoder
    except ImportError:
        raise MissingExtraError("speaker diarization", "curate", "resemblyzer") from None
    return VoiceEncoder(device, verbose=False)


def cluster(embeddings: Any, settings: DiarizeSettings) -> list[int]:
    """Cluster labels 0..k-1 for unit-norm embeddings, k bounded to [min_speakers, max_speakers]."""
    import numpy as np
    from sklearn.cluster import AgglomerativeClustering

    n = len(embeddings)
    if n == 0:
        return []
    if n == 1:
        return [0]

    def fit(**kw) -> list[int]:
        return list(AgglomerativeClustering(metric="cosine", linkage="average", **kw).fit_predict(np.asarray(embeddings)))

    labels = fit(n_clusters=None, distance_threshold=settings.threshold)
    k = len(set(labels))
    if k > settings.max_speakers:
        labels = fit(n_clusters=settings.max_speakers)
    elif k < settings.min_speakers <= n:
        labels = fit(n_clusters=settings.min_speakers)
    return labels


def diarize_fallback(audio: Any, segments: Sequence[Segment], settings: DiarizeSettings, encoder: Any = None) -> list[tuple[Word, int]]:
    """Each word with a speaker number (0-based, in order of first appearance)."""
    import numpy as np

    runs = chunks(segments, settings)
    if not runs:
        return []
    encoder = encoder or load_encoder()
    long = [i for i, r in enumerate(runs) if r[-1].end - r[0].start >= settings.min_chunk_s]
    if not long:  # nothing long enough to tell voices apart: one speaker
        return [(w, 0) for r in runs for w in r]
    vectors = []
    for i in long:
        clip = audio[int(runs[i][0].start * RATE):int(runs[i][-1].end * RATE) + 1]
        vectors.append(encoder.embed_utterance(clip))
    vectors = np.asarray(vectors)
    labels = cluster(vectors, settings)
    centroids = np.asarray([vectors[[j for j, lab in enumerate(labels) if lab == k]].mean(axis=0) for k in range(max(labels) + 1)])
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)  # cosine: a tight cluster's longer mean must not win
    speaker = dict(zip(long, labels))
    for i, run in enumerate(runs):
        if i not in speaker:
            clip = audio[int(run[0].start * RATE):int(run[-1].end * RATE) + 1]
            if len(clip) >= RATE * 0.3:
                speaker[i] = int(np.argmax(centroids @ encoder.embed_utterance(clip)))
            else:  # too short to embed: the speaker of the long chunk nearest in time (midpoint to midpoint)
                mid = (run[0].start + run[-1].end) / 2
                speaker[i] = speaker[min(long, key=lambda j: abs((runs[j][0].start + runs[j][-1].end) / 2 - mid))]
    return _first_appearance([(w, int(speaker[i])) for i, r in enumerate(runs) for w in r])


def diarize_pyannote(path: Path, audio: Any, segments: Sequence[Segment], model: Path, settings: DiarizeSettings) -> list[tuple[Word, int]]:
    """pyannote's pipeline from a local folder; each word takes the speaker whose turn covers its midpoint
    (else the nearest turn)."""
    try:
        import torch
        from pyannote.audio import Pipeline
    except ImportError:
        raise MissingExtraError("pyannote diarization", "curate", "pyannote.audio") from None
    if not Path(model).exists():
        raise UsageError(f"No pyannote pipeline at {model}.", "Give --diarization-model a local pipeline folder, or leave it out for the CPU fallback.")
    pipeline = Pipeline.from_pretrained(str(model))
    waveform = torch.from_numpy(audio).unsqueeze(0)
    annotation = pipeline({"waveform": waveform, "sample_rate": RATE},
                          min_speakers=settings.min_speakers, max_speakers=settings.max_speakers)
    turns = [(turn.start, turn.end, label) for turn, _, label in annotation.itertracks(yield_label=True)]
    names: dict[str, int] = {}
    out = []
    for segment in segments:
        for word in segment.words:
            mid = (word.start + word.end) / 2
            if not turns:
                label = "0"
            else:
                label = min(turns, key=lambda t: 0 if t[0] <= mid < t[1] else min(abs(mid - t[0]), abs(mid - t[1])))[2]
            out.append((word, names.setdefault(label, len(names))))
    return out


def _first_appearance(labelled: list[tuple[Word, int]]) -> list[tuple[Word, int]]:
    order: dict[int, int] = {}
    for _, k in labelled:
        order.setdefault(k, len(order))
    return [(w, order[k]) for w, k in labelled]


def speaker_name(number: int) -> str:
    return f"S{number + 1}"


def utterances(labelled: Sequence[tuple[Word, int]], *, pause_s: float = 1.5) -> list[Utterance]:
    """Maximal runs of one speaker's words (a pause of pause_s or more also ends one)."""
    out: list[Utterance] = []
    run: list[Word] = []
    who = -1
    for word, k in labelled:
        if run and (k != who or word.start - run[-1].end >= pause_s):
            out.append(Utterance(run[0].start, run[-1].end, speaker_name(who), " ".join(w.text for w in run)))
            run = []
        run.append(word)
        who = k
    if run:
        out.append(Utterance(run[0].start, run[-1].end, speaker_name(who), " ".join(w.text for w in run)))
    return out
