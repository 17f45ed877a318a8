"""The curation pipeline: stages with files between them, resumable per recording and per stage.

Layout under the output folder:

    work/<recording>/transcript.json   audio     Whisper segments with word times
                     utterances.json   speakers  who said what when
                     slides.json       slides    distinct slides, their showings, OCR text (crops in slides/)
                     aligned.json      align     the slide on screen for each utterance
                     roles.json        roles     speaker -> role               (model)
                     cases.json        cases     the cases' spans              (model)
                     captions.json     captions  kept slides with captions     (model)
                     extracted.json    extract   summary, questions, discussion, conclusion per case (model)
                     deleaked.json     deleak    the same, de-leaked, with the edits' report (model + validator)
                     status.json       done / failed (with the stage and error), seconds per stage
    cases/<split>/<case id>/case.yaml  write     every recording's cases, split 60/10/30 by recording
    split.json                         write     which recordings and cases went where

Each stage file is written whole or not at all (written aside, then renamed), and records the settings it
was made with. A rerun skips a stage whose file exists with the same settings, reruns one whose settings
changed, and removes the files of every later stage that read from a stage it reruns. Model calls go
through the store's cache, so a stage cut short by a kill replays its finished calls for free. A recording
that fails is marked failed with its stage and error, and the others go on.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from medpanel.curate.align import Linked, Utterance, link_utterances
from medpanel.curate.case_writer import CuratedCase, CuratedSlide, SpecialistQuestion, safe_name, write_case
from medpanel.curate.slides import VisualSettings
from medpanel.curate.speakers import DiarizeSettings
from medpanel.errors import BudgetExceeded, MissingExtraError, UsageError

STAGES = ("audio", "speakers", "slides", "align", "roles", "cases", "captions", "extract", "deleak", "write")
OFFLINE = ("audio", "speakers", "slides", "align")
MODEL_STAGES = ("roles", "cases", "captions", "extract", "deleak")
FILES = {"audio": "transcript.json", "speakers": "utterances.json", "slides": "slides.json", "align": "aligned.json",
         "roles": "roles.json", "cases": "cases.json", "captions": "captions.json", "extract": "extracted.json",
         "deleak": "deleaked.json"}
NEEDS = {"audio": (), "speakers": ("audio",), "slides": (), "align": ("speakers", "slides"), "roles": ("speakers",),
         "cases": ("roles", "speakers"), "captions": ("slides",), "extract": ("align", "roles", "cases", "captions"),
         "deleak": ("extract", "captions"), "write": ("deleak",)}
MIN_SHARE = 0.25  # of an utterance a slide must cover to be linked to it
MEDIA = {".mp4", ".mkv", ".webm", ".mov", ".avi", ".m4v", ".mpg", ".mpeg", ".wav", ".mp3", ".m4a", ".flac", ".ogg"}


@dataclass
class CurateSettings:
    whisper_model: str | None = None  # a CTranslate2 folder; None: the shipped tiny.en
    language: str | None = "en"
    diarization_model: str | None = None  # a local pyannote pipeline folder; None: the resemblyzer fallback
    diarize: DiarizeSettings = field(default_factory=DiarizeSettings)
    visual: VisualSettings = field(default_factory=VisualSettings)
    model: str = "local"  # the model spec of every model stage
    seed: int = 0

    def stage_key(self, stage: str) -> dict:
        """The settings a stage's output depends on: a change reruns that stage."""
        if stage == "audio":
            return {"whisper_model": self.whisper_model, "language": self.language}
        if stage == "speakers":
            return {"diarization_model": self.diarization_model, **asdict(self.diarize)}
        if stage == "slides":
            return asdict(self.visual)
        if stage == "align":
            return {"min_share": MIN_SHARE}
        if stage in MODEL_STAGES:
            return {"model": self.model, "code": model_stages_version()}
        return {}


@functools.cache  # read once a process: every stage key of every recording asks for it
def model_stages_version() -> str:
    """A hash of the model stages' code (prompts, answer shapes, checks, the validator): after an edit the
    model stages run again, and the calls whose requests did not change are served from the cache."""
    import hashlib

    from medpanel.curate import deleak, deleak_pass, extract, prompts, understand

    digest = hashlib.sha256()
    for module in (prompts, understand, extract, deleak, deleak_pass):
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()[:12]


def dependents(stage: str) -> list[str]:
    """Every stage that reads, directly or not, from `stage`."""
    out: list[str] = []
    for later in STAGES:
        if later not in out and any(n == stage or n in out for n in NEEDS[later]):
            out.append(later)
    return out


def recordings(path: Path) -> list[Path]:
    """The recordings to curate: the file itself, or a folder's media files (not recursive, hidden files
    left out), sorted."""
    if path.is_file():
        if path.suffix.lower() not in MEDIA:
            raise UsageError(f"{path} is not a recording ({path.suffix or 'no suffix'}).",
                             f"Give a video or audio file ({', '.join(sorted(MEDIA))}), or a folder of them.")
        return [path]
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in MEDIA and not p.name.startswith("."))
        if not found:
            raise UsageError(f"No recordings in {path}.", f"Put video or audio files ({', '.join(sorted(MEDIA))}) in it, or name one file.")
        return found
    raise UsageError(f"{path} does not exist.", "Give a recording or a folder of recordings.")


def recording_ids(paths: list[Path]) -> dict[str, Path]:
    """A folder-safe id per recording: its file name's stem, or, for every file whose stem another
    shares, the stem with its suffix (so an id never depends on the order files are listed in)."""
    def stem(p: Path) -> str:
        return safe_name(p.stem, "recording")

    counts: dict[str, int] = {}
    for p in paths:
        counts[stem(p)] = counts.get(stem(p), 0) + 1
    out: dict[str, Path] = {}
    for p in paths:
        rid = stem(p) if counts[stem(p)] == 1 else f"{stem(p)}_{safe_name(p.suffix.lower(), 'file')}"
        base, n = rid, 2
        while rid in out:
            rid, n = f"{base}_{n}", n + 1
        out[rid] = p
    return out


def fingerprint(source: Path) -> dict:
    """What identifies a recording's file: a replaced or edited file is curated afresh."""
    stat = source.stat()
    return {"name": source.name, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def write_json(path: Path, data: Any, tag: str = "") -> None:
    """Whole or not at all: written beside, then renamed over. `tag` names the file beside (NAME.TAG.part),
    so two writers of one file (a Ray attempt presumed dead and its retry) never write into the same one."""
    tmp = path.with_name(path.name + (f".{tag}" if tag else "") + ".part")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


class Tools:
    """What the stages load once and share across recordings: Whisper, the voice encoder, the model."""

    def __init__(self, settings: CurateSettings, make_model: Callable[[], Any] | None) -> None:
        self.settings = settings
        self._make_model = make_model
        self._whisper = self._encoder = self._model = None
        self.device = {"whisper": "cpu", "encoder": "cpu"}  # where each model loads (a Ray worker given a GPU picks per model)

    def whisper(self):
        if self._whisper is None:
            from medpanel.curate.transcribe import load_whisper

            self._whisper = load_whisper(Path(self.settings.whisper_model) if self.settings.whisper_model else None,
                                         device=self.device["whisper"])
        return self._whisper

    def encoder(self):
        if self._encoder is None:
            from medpanel.curate.speakers import load_encoder

            self._encoder = load_encoder(self.device["encoder"])
        return self._encoder

    def model(self):
        if self._model is None:
            if self._make_model is None:
                raise UsageError("The model stages need a model.", "Pass --model SPEC, or run only the offline stages (--stages offline).")
            self._model = self._make_model()
        return self._model


@dataclass
class RecordingResult:
    recording: str
    source: str
    state: str  # done / failed
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    failed_stage: str | None = None
    error: str | None = None


Progress = Callable[[str, str, str], None]  # (recording, stage, message)


class Recording:
    """One recording's work folder and its stages."""

    def __init__(self, rid: str, source: Path, out: Path, tools: Tools) -> None:
        self.rid, self.source, self.tools = rid, source, tools
        self.folder = out / "work" / rid
        self.folder.mkdir(parents=True, exist_ok=True)
        self.result = RecordingResult(rid, str(source), "done")
        self.part_tag = ""  # see write_json: a Ray worker sets its attempt's
        self.fingerprint: dict | None = None  # the source's, as claim() wrote it to source.json

    def claim(self) -> bool:
        """Make the work folder this file's: stage files made from another file (a replaced recording, or
        one that had this id before) are removed. True when they were."""
        marker = self.folder / "source.json"
        mine = fingerprint(self.source)
        stale = False
        if marker.is_file():
            try:
                stale = read_json(marker) != mine
            except (OSError, ValueError):
                stale = True
        elif any(self.path(s).exists() for s in FILES):
            stale = True
        if stale:
            for stage in FILES:
                self.path(stage).unlink(missing_ok=True)
            shutil.rmtree(self.folder / "slides", ignore_errors=True)
        write_json(marker, mine)
        self.fingerprint = mine
        self.sweep_parts()
        return stale

    def sweep_parts(self, stage: str | None = None) -> None:
        """Remove files written beside and never renamed (a killed run's, or a cancelled Ray attempt's: ray.cancel
        does not wait for the worker to die): every one, or only `stage`'s (the others may be in flight).
        Best effort: a file that cannot be removed is only left behind."""
        try:
            strays = list(self.folder.glob(f"{FILES[stage]}.*.part" if stage else "*.part"))
            if stage in (None, "slides"):
                strays += (self.folder / "slides").glob("*.part")
        except OSError:
            return
        for stray in strays:
            try:
                stray.unlink(missing_ok=True)
            except OSError:
                pass

    def path(self, stage: str) -> Path:
        return self.folder / FILES[stage]

    def load(self, stage: str) -> Any:
        path = self.path(stage)
        if not path.is_file():
            raise UsageError(f"{self.rid}: the {stage} stage has not run ({path.name} missing).", f"Include {stage} in --stages.")
        return read_json(path)["data"]

    def up_to_date(self, stage: str) -> bool:
        path = self.path(stage)
        if not path.is_file():
            return False
        try:
            stored = read_json(path)
        except (OSError, ValueError):
            return False  # a damaged file is made again
        # Compared as stored: JSON turns a tuple setting into a list.
        return isinstance(stored, dict) and stored.get("settings") == json.loads(json.dumps(self.tools.settings.stage_key(stage)))

    def save(self, stage: str, data: Any) -> None:
        write_json(self.path(stage), {"stage": stage, "settings": self.tools.settings.stage_key(stage), "data": data}, self.part_tag)

    def invalidate_after(self, stage: str) -> None:
        for later in dependents(stage):
            if later in FILES:
                self.path(later).unlink(missing_ok=True)

    # Shared by Recording.run and the Ray driver (curate/ray_stages.py), so both skip, invalidate and record alike.
    def begin(self, stage: str, progress: Progress, redo: bool) -> bool:
        """False when the stage is up to date (recorded as skipped); else it is announced and the files of the
        stages that read from it are removed (an OSError doing so fails this recording, at this stage)."""
        if not redo and self.up_to_date(stage):
            self.result.skipped.append(stage)
            return False
        progress(self.rid, stage, "running")
        self.invalidate_after(stage)
        return True

    def finished(self, stage: str, seconds: float, message: str, progress: Progress, where: str = "") -> None:
        self.result.seconds[stage] = round(seconds, 3)
        self.result.ran.append(stage)
        progress(self.rid, stage, f"{message} ({seconds:.1f} s{where})")

    # ------------------------------------------------------------------ the stages

    def run_audio(self) -> str:
        from medpanel.curate.transcribe import decode_audio, segments_to_json, transcribe

        audio = decode_audio(self.source)
        segments = transcribe(audio, self.tools.whisper(), language=self.tools.settings.language)
        self.save("audio", {"duration": round(len(audio) / 16000, 3), "segments": segments_to_json(segments)})
        return f"{len(segments)} segments, {sum(len(s.words) for s in segments)} words"

    def run_speakers(self) -> str:
        from medpanel.curate.speakers import diarize_fallback, diarize_pyannote, utterances
        from medpanel.curate.transcribe import decode_audio, segments_from_json

        segments = segments_from_json(self.load("audio")["segments"])
        audio = decode_audio(self.source)
        s = self.tools.settings
        if s.diarization_model:
            labelled = diarize_pyannote(self.source, audio, segments, Path(s.diarization_model), s.diarize)
        else:
            labelled = diarize_fallback(audio, segments, s.diarize, self.tools.encoder())
        said = utterances(labelled)
        self.save("speakers", {"diarizer": "pyannote" if s.diarization_model else "resemblyzer",
                               "utterances": [asdict(u) for u in said]})
        return f"{len(said)} utterances, {len({u.speaker for u in said})} speakers"

    def run_slides(self) -> str:
        from medpanel.curate.slides import find_slides, slides_to_json

        found = find_slides(self.source, self.folder, self.tools.settings.visual)
        self.save("slides", slides_to_json(found))
        return f"{len(found)} distinct slides, {sum(len(s.showings) for s in found)} showings"

    def utterances(self) -> list[Utterance]:
        return [Utterance(**u) for u in self.load("speakers")["utterances"]]

    def run_align(self) -> str:
        from medpanel.curate.slides import showings, slides_from_json

        # A slide on screen for under a quarter of an utterance was not what it was about: with showings'
        # edges placed to half a second, a long utterance would otherwise take the slide put up as it ended.
        links = link_utterances(self.utterances(), showings(slides_from_json(self.load("slides"))), min_share=MIN_SHARE)
        self.save("align", [{"slide_id": link.slide_id, "overlap": round(link.overlap, 3)} for link in links])
        return f"{sum(1 for link in links if link.slide_id)} of {len(links)} utterances over a slide"

    async def run_roles(self) -> str:
        from medpanel.curate.understand import infer_roles

        roles = await infer_roles(self.tools.model(), self.utterances())
        self.save("roles", roles)
        return ", ".join(f"{k}={v}" for k, v in roles.items())

    async def run_cases(self) -> str:
        from medpanel.curate.understand import segment_cases

        spans = await segment_cases(self.tools.model(), self.utterances(), self.load("roles"))
        self.save("cases", [asdict(s) for s in spans])
        return f"{len(spans)} case(s)"

    async def run_captions(self) -> str:
        from medpanel.curate.understand import caption_slide

        out = {}
        for slide in self.load("slides"):
            caption = await caption_slide(self.tools.model(), slide["slide_id"], slide.get("text", ""), str(self.folder / slide["image"]))
            out[slide["slide_id"]] = asdict(caption)
        self.save("captions", out)
        return f"{sum(1 for c in out.values() if c['kept'])} of {len(out)} slides kept"

    def links(self) -> list[Linked]:
        return [Linked(u, a["slide_id"], a["overlap"]) for u, a in zip(self.utterances(), self.load("align"))]

    async def run_extract(self) -> str:
        from medpanel.curate.extract import case_slides, extract_case, turns
        from medpanel.curate.understand import CaseSpan

        captions = {k: c["caption"] for k, c in self.load("captions").items() if c["kept"]}
        shown = [(s["slide_id"], a, b) for s in self.load("slides") if s["slide_id"] in captions for a, b in s["showings"]]
        links, roles = self.links(), self.load("roles")
        cases = []
        for n, span in enumerate((CaseSpan(**c) for c in self.load("cases")), 1):
            discussion = turns(links, roles, span)
            for t in discussion:
                t.slide_ids = [s for s in t.slide_ids if s in captions]
            ids = case_slides(discussion, shown, span)
            cases.append((await extract_case(self.tools.model(), f"{self.rid}-{n:02d}", span, discussion, ids, captions)).to_json())
        self.save("extract", cases)
        return f"{len(cases)} case(s), {sum(len(c['questions']) for c in cases)} question(s)"

    async def run_deleak(self) -> str:
        from medpanel.curate.deleak_pass import deleak_case, edits_to_json
        from medpanel.curate.extract import Extracted

        captions = {k: c["caption"] for k, c in self.load("captions").items() if c["kept"]}
        out = []
        for data in self.load("extract"):
            case, case_captions, edits = await deleak_case(self.tools.model(), Extracted.from_json(data), captions)
            out.append({"case": case.to_json(), "captions": {s: case_captions[s] for s in case.slide_ids if s in case_captions},
                        "edits": edits_to_json(edits)})
        self.save("deleak", out)
        cut = sum(1 for c in out for e in c["edits"] if e["action"] in ("cut", "trimmed", "paraphrased", "dropped"))
        refused = sum(1 for c in out for e in c["edits"] if e["action"] == "refused")
        return f"{cut} edit(s) applied, {refused} refused by the validator"

    def check_inputs(self, stages: list[str], redo: bool) -> None:
        """Refuse, before anything runs, a stage whose input stage is not chosen and either not finished
        or about to be removed (a chosen stage it reads from will rerun)."""
        rerun = [s for s in stages if redo or not self.up_to_date(s)]
        removed = {later for s in rerun for later in dependents(s)}
        for stage in stages:
            for need in NEEDS[stage]:
                if need in stages:
                    continue
                if not self.up_to_date(need):
                    why = "is missing or was made with other settings"
                elif need in removed:
                    why = f"would be removed when {next(s for s in rerun if need in dependents(s))} reruns"
                else:
                    continue
                raise UsageError(f"{self.rid}: the {stage} stage reads the {need} stage's output, which {why}.",
                                 f"Add {need} to --stages (or leave --stages out to run them all).")

    async def run(self, stages: list[str], progress: Progress, redo: bool = False) -> RecordingResult:
        """Run the stages in order; on a failure the exception propagates with `self.result` saying
        which stage failed and what had finished."""
        result = self.result
        for stage in stages:
            if stage == "write":
                continue
            result.failed_stage = stage
            started = time.perf_counter()
            if not self.begin(stage, progress, redo):
                continue
            done = getattr(self, f"run_{stage}")()
            message = (await done) if hasattr(done, "__await__") else done
            await asyncio.sleep(0)  # a Ctrl-C during an offline stage (no await inside) stops here, not after every recording
            self.finished(stage, time.perf_counter() - started, message, progress)
        result.failed_stage = None
        return result


CASES_MARK = ".medpanel-curate"  # inside OUT/cases: the folder is this pipeline's to replace


def write_cases(out: Path, seed: int = 0) -> tuple[dict, dict[str, str]]:
    """Every de-leaked recording under out/work (this run's and earlier ones'), split by recording, as
    case folders under out/cases/<split>/; returns the manifest and the recordings that failed to write
    (id -> error). A recording placed by an earlier run keeps its split, and so does one absent now
    (listed as held), so no meeting moves between train and test across runs. Two work folders made
    from one file (its id changed when a file with the same stem arrived) are written once."""
    from medpanel.curate.split import SPLITS, assign_recordings

    manifest_path, cases_dir = out / "split.json", out / "cases"
    if cases_dir.exists() and not (cases_dir / CASES_MARK).exists():
        raise UsageError(f"{cases_dir} exists but was not written by medpanel curate.",
                         "Give --out a folder of its own, or move that cases folder away.")
    previous: dict[str, str] = {}
    for path in (cases_dir / "split.json", manifest_path):  # the copy inside cases/ is the one a kill cannot leave stale
        try:
            previous = {r: name for name, recs in read_json(path).get("recordings", {}).items() for r in recs}
            break
        except (OSError, ValueError, AttributeError, TypeError):
            continue
    failed: dict[str, str] = {}
    found: dict[str, tuple[Path, list]] = {}
    sources: dict[str, str] = {}
    folders = sorted((p for p in (out / "work").glob("*") if p.is_dir()), key=lambda p: -(p / "source.json").stat().st_mtime_ns
                     if (p / "source.json").exists() else 0)
    for folder in folders:  # newest claim first: of two folders of one file, the current id's wins
        path = folder / FILES["deleak"]
        if not path.is_file():
            continue
        try:
            source = (folder / "source.json").read_text() if (folder / "source.json").exists() else folder.name
            if source in sources:
                continue
            sources[source] = folder.name
            found[folder.name] = (folder, read_json(path)["data"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            failed[folder.name] = f"cannot read {path.name}: {exc}"
    where = assign_recordings([*found, *(r for r in previous if r not in found and r not in failed)], seed, previous)
    staging = out / "cases.part"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    (staging / CASES_MARK).write_text("written by medpanel curate; replaced whole by its write stage\n")
    placed: dict[str, list[str]] = {name: [] for name in SPLITS}
    for rid in sorted(found):
        folder, items = found[rid]
        written: list[Path] = []
        try:
            for item in items:
                case = curated_case(rid, folder, item)
                written.append(staging / where[rid] / case.id)
                write_case(case, written[-1])
                placed[where[rid]].append(case.id)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # a damaged or stale stage file: that recording only
            for path in written:
                shutil.rmtree(path, ignore_errors=True)
            placed[where[rid]] = [c for c in placed[where[rid]] if not c.startswith(f"{rid}-")]
            failed[rid] = f"{type(exc).__name__}: {exc}"
    recordings = {name: sorted(r for r, n in where.items() if n == name) for name in SPLITS}
    held = sorted(r for r in where if r not in found or r in failed)
    manifest = {"seed": seed, "recordings": recordings, "held": held, "cases": placed}
    write_json(staging / "split.json", manifest)  # the manifest moves in with the cases, in one rename
    if cases_dir.exists():
        shutil.rmtree(cases_dir)
    os.replace(staging, cases_dir)
    write_json(manifest_path, manifest)
    return manifest, failed


def curated_case(rid: str, folder: Path, item: dict) -> CuratedCase:
    case, captions = item["case"], item["captions"]
    if not str(case.get("summary") or "").strip():
        raise ValueError(f"case {case.get('case_id')} has no summary for the panel to read")
    slides = [CuratedSlide(folder / "slides" / f"{s}.png", captions[s]) for s in case["slide_ids"] if s in captions]
    questions = [SpecialistQuestion(q["question"], q["target_role"], q["answer"], q["type"]) for q in case["questions"]]
    edits = item["edits"]
    metadata = {"recording": rid, "start_s": case["span"]["start"], "end_s": case["span"]["end"], "source": "medpanel curate",
                "deleak": {a: sum(1 for e in edits if e["action"] == a) for a in sorted({e["action"] for e in edits})}}
    return CuratedCase(case["case_id"], case["summary"], slides, questions, [(t["role"], t["text"]) for t in case["discussion"]],
                       case["conclusion"], metadata)


@dataclass
class CurateReport:
    results: list[RecordingResult]
    split: dict | None = None

    @property
    def failed(self) -> list[RecordingResult]:
        return [r for r in self.results if r.state == "failed"]


def chosen(stages: list[str] | None) -> list[str]:
    """The stages to run, in pipeline order (default: all)."""
    return [s for s in STAGES if s in (stages or STAGES)]


def open_recordings(source: Path, out: Path, stages: list[str], tools: Tools, progress: Progress, redo: bool) -> list[Recording]:
    """The output folder made, every recording's work folder claimed and its chosen stages' inputs checked:
    everything refused before any stage runs."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "work").mkdir(exist_ok=True)
    except OSError as exc:
        raise UsageError(f"Cannot make the output folder {out}: {exc.strerror}.", "Give --out a folder you can write to.") from None
    work = [Recording(rid, path, out, tools) for rid, path in recording_ids(recordings(source)).items()]
    for recording in work:
        if recording.claim():
            progress(recording.rid, "-", "the recording changed since its stage files were made: starting it afresh")
        recording.check_inputs([s for s in stages if s != "write"], redo)
    return work


def record_failure(recording: Recording, error: str, progress: Progress) -> None:
    result = recording.result
    result.state, result.error = "failed", error
    progress(recording.rid, result.failed_stage or "?", f"failed: {error}")


async def run_recording(recording: Recording, stages: list[str], progress: Progress, redo: bool) -> RecordingResult:
    """One recording's stages, its failure recorded (not raised) and its status.json written."""
    try:
        await recording.run(stages, progress, redo)
    except (BudgetExceeded, MissingExtraError, KeyboardInterrupt):
        raise  # a cap, a missing package: every recording would fail the same way
    except Exception as exc:  # any other failure of one recording: recorded, and the next goes on
        record_failure(recording, f"{type(exc).__name__}: {exc}", progress)
    write_json(recording.folder / "status.json", asdict(recording.result))
    return recording.result


def finish(out: Path, stages: list[str], settings: CurateSettings, results: list[RecordingResult], progress: Progress) -> CurateReport:
    """The write stage (when chosen) over every recording's files, its failures added to `results`."""
    report = CurateReport(results)
    if "write" in stages:
        report.split, failed = write_cases(out, settings.seed)
        for rid, error in failed.items():
            result = next((r for r in results if r.recording == rid), None)
            if result is None:  # a recording of an earlier run, not in this one's source
                result = RecordingResult(rid, "", "failed")
                results.append(result)
            result.state, result.failed_stage, result.error = "failed", "write", error
            progress(rid, "write", f"failed: {error}")
        progress("*", "write", f"{sum(len(v) for v in report.split['cases'].values())} case(s) written")
    return report


async def curate(source: Path, out: Path, *, stages: list[str] | None = None, settings: CurateSettings | None = None,
                 make_model: Callable[[], Any] | None = None, progress: Progress | None = None, redo: bool = False) -> CurateReport:
    """Run `stages` (default: all) on every recording under `source`, into `out`. A recording's failure is
    recorded in its status.json and the next goes on; a spending cap stops the whole run.
    (curate/ray_stages.py runs the same steps with the offline stages on a Ray cluster.)"""
    settings = settings or CurateSettings()
    stages = chosen(stages)
    progress = progress or (lambda rid, stage, message: None)
    work = open_recordings(source, out, stages, Tools(settings, make_model), progress, redo)
    results = [await run_recording(recording, stages, progress, redo) for recording in work]
    return finish(out, stages, settings, results, progress)
