"""`medpanel curate --executor ray`: the offline stages of every recording as Ray tasks; the rest on the driver.

Why: the offline stages (audio = Whisper, speakers = the voice encoder, slides = frames and OCR, align) are
the compute-heavy part of curation, and recordings are independent of each other, so a cluster curates
many recordings at once. The model stages are network-bound and must go through the driver's runtime (its
store's cache and spend ledger, its caps), so they stay on the driver (the `medpanel curate` process), as
does `write`, which reads every recording.

What runs where:
- driver: finding and claiming the recordings and checking the chosen stages' inputs (as in-process), the
  decision to skip a stage (its file up to date) and the removal of the files of the stages after one that
  reruns, the model stages, status.json, and `write`.
- workers: one Ray task per (recording, offline stage). The driver submits a stage when the stages it
  reads from (pipeline.NEEDS) have finished: `audio` and `slides` at once, `speakers` after `audio`,
  `align` after both. A worker reads the recording and writes the stage's file into OUT/work/<recording>/.
  The recordings' offline stages run in parallel across the cluster (at most one recording per cluster
  CPU in flight, and at least two, so the first ones finish first); the model stages run one recording at a time, in the
  recordings' order, each as soon as its offline stages are done (so a queue-like model, e.g. a
  `scripted:FILE.yaml`, answers in the in-process order).

Resources (`task_resources`): every task takes one CPU. The stages whose model can run on a GPU, `audio`
(faster-whisper) and `speakers` with the resemblyzer voice encoder, also request `--gpus-per-task` GPUs,
by default 1 when a node has a GPU and 0 when none has: a CPU-only cluster never gets a GPU request, which
it could never schedule. A task lands on one node, so each task's shape must fit one live node (checked
before anything runs). A worker given a GPU loads those models on CUDA; GPU tasks run with max_calls=1, so
the worker exits after one task and never keeps GPU memory or serves a task given another GPU. `slides`,
`align` and pyannote diarization (built on the CPU by curate/speakers.py) request none.

OUT (and every recording) must be at the same absolute path on every node, on a filesystem they all share:
both are made absolute (os.path.abspath, symlinks kept) before they are sent. A worker that cannot see
them, or sees a source.json other than the driver's (a stale copy of OUT), stops the run with that said
(exit 2) rather than writing into a folder of its own; and the driver checks, after each answer, that it
reads the very file the worker wrote (a short retry for NFS attribute caching), else it stops the same way.

Faults: a worker killed mid-stage (kill -9, out of memory, its node lost), or a stage past its deadline
(MEDPANEL_CURATE_STAGE_TIMEOUT_S, default 2 h: then it is cancelled, its worker killed), is seen by the
driver, which submits that (recording, stage) again, MAX_ATTEMPTS (3) tries in all, then the recording is
recorded failed at that stage (WorkerLost). Ray's own task retries are off, so only the driver resubmits. A stage file is written
aside under a name of the attempt's own and renamed over (pipeline.write_json), so a dead attempt leaves
no half-written stage file, and a presumed-dead attempt still running on a lost node cannot mix its
bytes with its retry's. A stage that raises fails its recording exactly as in-process (state, stage,
error in status.json; exit 4), and the other recordings go on. A problem every recording would have (a
package missing on a node, medpanel not importable there, tesseract missing, OUT not shared) stops the
whole run at once, whichever recording met it first (exit 2).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from medpanel.curate.pipeline import (NEEDS, OFFLINE, STAGES, CurateReport, CurateSettings, Progress, Recording, Tools,
                                      chosen, curate, finish, open_recordings, read_json, record_failure, run_recording, write_json)
from medpanel.errors import MedpanelError, MissingExtraError, UsageError

# The driver's cluster helpers come from ray_cluster.py (import_ray, connect with its address probe, MAX_ATTEMPTS,
# the lost-worker errors), shared with `bench --executor ray` and imported where the driver uses them, so a
# worker importing this module for run_stage_task loads no Ray code it does not run.

GPU_STAGES = ("audio", "speakers")  # the stages whose model can run on a GPU (speakers: the resemblyzer encoder)
STAGE_TIMEOUT_ENV = "MEDPANEL_CURATE_STAGE_TIMEOUT_S"
STAGE_TIMEOUT_S = 2 * 3600.0  # one stage of one recording: Whisper on a CPU takes minutes per hour of audio
CONFIRM_S = 10.0  # how long the driver waits to see a worker's file (NFS caches attributes for a few seconds)
SHARED_FIX = ("Put --out and the recordings on a shared filesystem (NFS, a cluster filesystem) mounted at the same path on "
              "every node, the driver's included.")
CLIENT_REFUSAL = ("a Ray Client address cannot be used; the driver reads the stage files the workers write, so it must run "
                  "on a node that shares OUT's filesystem.",
                  "Run `medpanel curate` on a node of the cluster, with the head's HOST:PORT (e.g. --address 10.0.0.5:6379).")


def stage_timeout_from_env() -> float:
    text = os.environ.get(STAGE_TIMEOUT_ENV, "").strip()
    if not text:
        return STAGE_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{STAGE_TIMEOUT_ENV}={text!r} is not a number of seconds above 0.",
                         f"Set it to e.g. 7200 (two hours per stage of one recording), or unset it for {STAGE_TIMEOUT_S:g} s.")
    return value


# ---------------------------------------------------------------- resources

def check_gpus_per_task(gpus_per_task: float | None) -> None:
    """Refuse a --gpus-per-task that is no number of GPUs Ray can give one task."""
    if gpus_per_task is None or gpus_per_task == 0:
        return
    if not math.isfinite(gpus_per_task) or gpus_per_task < 0:
        raise UsageError(f"--gpus-per-task {gpus_per_task:g} is not a number of GPUs.", "Give 0 (CPU only), a fraction such as 0.5, or a whole number.")
    if gpus_per_task > 1 and gpus_per_task != int(gpus_per_task):
        raise UsageError(f"--gpus-per-task {gpus_per_task:g}: Ray shares a GPU only as a fraction of one; above 1 it must be whole.",
                         "Give e.g. 0.5 (two tasks per GPU), 1 or 2.")


def live_nodes(nodes: list[dict]) -> list[dict[str, float]]:
    """The resources of each live node, from ray.nodes()."""
    return [dict(n.get("Resources") or {}) for n in nodes if n.get("Alive")]


def cancel(ray, ref) -> None:
    """Cancel a stage's task, if it was submitted; a cluster already gone has nothing left to cancel."""
    if ref is None:
        return
    try:
        ray.cancel(ref, force=True)
    except Exception:  # noqa: BLE001  (the run is stopping or retrying either way)
        pass


def thread_env() -> dict:
    """Task options that give workers the driver's OMP_NUM_THREADS, where it has one. Ray sets 1 in a one-CPU
    task that has none, and Whisper's word timestamps under one OpenMP thread differ from those under
    several in the second decimal: a stage's file would then depend on where it ran."""
    threads = os.environ.get("OMP_NUM_THREADS")
    return {"runtime_env": {"env_vars": {"OMP_NUM_THREADS": threads}}} if threads else {}


def task_resources(stage: str, settings: CurateSettings, nodes: list[dict[str, float]], gpus_per_task: float | None = None) -> dict[str, float]:
    """The Ray resources of one task of `stage`: one CPU, and GPUs for a stage whose model uses one. The rule:
    a GPU stage requests `gpus_per_task` when given (0: CPU only), else 1 GPU when a node has one (and a CPU)
    and 0 when none has, so a CPU-only cluster can always schedule every task. `nodes`: live_nodes()."""
    check_gpus_per_task(gpus_per_task)
    on_gpu = stage in GPU_STAGES and not (stage == "speakers" and settings.diarization_model)  # pyannote runs on the CPU
    if not on_gpu:
        gpus = 0.0
    elif gpus_per_task is not None:
        gpus = float(gpus_per_task)
    else:
        gpus = 1.0 if any(n.get("GPU", 0) >= 1 and n.get("CPU", 0) >= 1 for n in nodes) else 0.0
    return {"num_cpus": 1, "num_gpus": gpus}


def check_fits(resources: dict[str, dict[str, float]], nodes: list[dict[str, float]]) -> None:
    """Refuse a task shape no single live node has (a task runs on one node: Ray would queue it forever)."""
    for stage, need in resources.items():
        if any(n.get("CPU", 0) >= need["num_cpus"] and n.get("GPU", 0) >= need["num_gpus"] for n in nodes):
            continue
        gpus = need["num_gpus"]
        if not gpus:
            raise UsageError(f"No live node of the Ray cluster has a CPU for the {stage} tasks.",
                             "Add a node with `ray start --address HEAD:PORT`, or start the head with CPUs.")
        most = max((n.get("GPU", 0) for n in nodes if n.get("CPU", 0) >= 1), default=0.0)
        where = ("has no GPU" if not any(n.get("GPU", 0) for n in nodes) else
                 f"has no node with 1 CPU and {gpus:g} GPU(s) (the most on one node is {most:g})")
        raise UsageError(f"--gpus-per-task {gpus:g}: the Ray cluster {where}, so the {stage} tasks could never be scheduled.",
                         "Drop --gpus-per-task (a GPU is requested only where a node has one), give 0 for CPU only, "
                         "or at most the GPUs of one node, or add GPU nodes.")


# ---------------------------------------------------------------- the worker side

class WorkerTools(Tools):
    """The offline stages' models in one worker process, on its GPU when Ray gave it one and the build sees CUDA."""

    def __init__(self, settings: CurateSettings, gpu_ids: tuple) -> None:
        super().__init__(settings, None)
        self.gpu_ids = gpu_ids

    def whisper(self):
        if self._whisper is None and self.gpu_ids and _cuda_for("ctranslate2"):
            self.device["whisper"] = "cuda"
        return super().whisper()

    def encoder(self):
        if self._encoder is None and self.gpu_ids and _cuda_for("torch"):
            self.device["encoder"] = "cuda"
        return super().encoder()


def _cuda_for(package: str) -> bool:
    try:
        if package == "ctranslate2":
            import ctranslate2

            return ctranslate2.get_cuda_device_count() > 0
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # a CPU-only build: the model loads on the CPU
        return False


_TOOLS: list[tuple[str, WorkerTools]] = []  # at most one: a CPU worker keeps its loaded models for the next recording


def _worker_tools(settings: CurateSettings, gpu_ids: tuple) -> WorkerTools:
    # Keyed on the GPUs too: models loaded on one GPU are never used by a task given another (GPU tasks also
    # run with max_calls=1, so their worker exits after one task and frees the GPU's memory).
    key = json.dumps([asdict(settings), list(gpu_ids)], sort_keys=True, default=str)
    if not (_TOOLS and _TOOLS[0][0] == key):
        _TOOLS[:] = [(key, WorkerTools(settings, gpu_ids))]
    return _TOOLS[0][1]


def run_stage_task(rid: str, source: str, out: str, settings: CurateSettings, stage: str, fingerprint: dict | None, tag: str) -> dict:
    """One Ray task: one offline stage of one recording, its file written into OUT. Answers {"message": ...,
    "digest": ...} when done, {"error": ...} when the stage raised (the recording fails), {"stop": ...} for a
    problem every recording on this node would have (a missing package or tesseract, OUT or the recording not
    visible here, a stale copy of OUT)."""
    import ray

    from medpanel.curate.slides import ocr_available

    node = ray.util.get_node_ip_address()
    where = {"pid": os.getpid(), "node": node, "resources": dict(ray.get_runtime_context().get_assigned_resources())}
    marker = Path(out) / "work" / rid / "source.json"  # the driver claimed the folder (wrote it) before submitting
    try:
        seen = read_json(marker) if marker.is_file() else None
    except (OSError, ValueError):
        seen = None
    if seen is None or not Path(source).is_file():
        missing = source if seen is not None else marker.parent
        return {**where, "stop": [f"{missing} is not visible on the Ray node {node}: OUT and the recordings must be on a "
                                  "filesystem every node shares, at the same path.", SHARED_FIX]}
    if seen != fingerprint:
        return {**where, "stop": [f"{marker} on the Ray node {node} is not the one the driver wrote for {rid} (a copy of OUT, "
                                  "not the folder the driver sees): OUT must be on a filesystem every node shares, at the same path.",
                                  SHARED_FIX]}
    if stage == "slides" and settings.visual.ocr and not ocr_available():
        # Without it the slides would have no text on this node and text on others: which node ran would change slides.json.
        return {**where, "stop": [f"tesseract is not installed on the Ray node {node}, so its slides would have no text.",
                                  "Install tesseract-ocr on every node (e.g. apt-get install tesseract-ocr), then run the same "
                                  "command again: finished stages are kept."]}
    try:
        tools = _worker_tools(settings, tuple(ray.get_gpu_ids()))
        recording = Recording(rid, Path(source), Path(out), tools)
        recording.part_tag = tag
        started = time.perf_counter()
        message = getattr(recording, f"run_{stage}")()
        seconds = round(time.perf_counter() - started, 3)
        digest = hashlib.sha256(recording.path(stage).read_bytes()).hexdigest()  # the driver checks it sees this very file
        device = tools.device.get({"audio": "whisper", "speakers": "encoder"}.get(stage, ""), "cpu")
        return {**where, "message": message, "seconds": seconds, "device": device, "digest": digest}
    except MissingExtraError as exc:
        return {**where, "stop": [f"{exc.problem} (on the Ray node {node})", exc.fix]}
    except Exception as exc:  # the stage's own failure, as in-process: this recording fails
        return {**where, "error": f"{type(exc).__name__}: {exc}"}


# ---------------------------------------------------------------- the driver side

@dataclass
class StageStats:
    tasks: int = 0  # stage tasks that answered
    workers_lost: int = 0  # attempts whose worker died or that ran past the stage deadline
    timed_out: int = 0  # of those, attempts cancelled at the deadline
    resubmitted: int = 0  # (recording, stage) submitted again after a lost attempt
    pids: set = field(default_factory=set)
    gpu_tasks: int = 0  # tasks whose model ran on a GPU
    assigned: list = field(default_factory=list)  # (stage, the resources Ray gave the task), per answer


class RayStages:
    """The cluster side of `curate_on_ray`: `prepare` (connects, and refuses a task shape no node fits, before
    anything runs), `run_offline` per recording, `shutdown` to end a connection it started."""

    def __init__(self, address: str | None = None, *, gpus_per_task: float | None = None, num_cpus: int | None = None,
                 stage_timeout_s: float | None = None, confirm_s: float = CONFIRM_S) -> None:
        from medpanel.ray_cluster import import_ray

        self.ray = import_ray()  # without ray: MissingExtraError, the CLI's problem and fix, exit 2
        check_gpus_per_task(gpus_per_task)
        self.address, self.gpus_per_task, self.num_cpus = address, gpus_per_task, num_cpus
        self.stage_timeout_s = stage_timeout_s if stage_timeout_s is not None else stage_timeout_from_env()
        self.confirm_s = confirm_s
        self.owned = self.connected = False
        self.resources: dict[str, dict[str, float]] = {}
        self.stats = StageStats()

    def prepare(self, stages: list[str], settings: CurateSettings) -> None:
        from medpanel.ray_cluster import connect, require_cpu

        ray = self.ray
        if not self.connected:
            self.owned = connect(self.address, CLIENT_REFUSAL, self.num_cpus) or self.owned
            self.connected = True
            # GPU tasks: max_calls=1, as Ray's default for a function declared with GPUs (here they come via .options).
            self._tasks = {False: ray.remote(run_stage_task), True: ray.remote(max_calls=1)(run_stage_task)}
        require_cpu(ray)
        nodes = live_nodes(ray.nodes())
        self.resources = {s: task_resources(s, settings, nodes, self.gpus_per_task) for s in OFFLINE if s in stages}
        check_fits(self.resources, nodes)

    def shutdown(self) -> None:
        from medpanel.ray_cluster import disconnect

        self.owned = disconnect(self.ray, self.owned)
        self.connected = False

    def window(self) -> asyncio.Semaphore:
        """How many recordings have offline stages in flight: one per cluster CPU (at least two), so every CPU
        can be busy while the first recordings finish first. FIFO: recordings start in their order."""
        return asyncio.Semaphore(max(2, int(self.ray.cluster_resources().get("CPU", 1))))

    async def run_offline(self, recording: Recording, stages: list[str], progress: Progress, redo: bool,
                          window: asyncio.Semaphore) -> bool:
        """The chosen offline stages of one recording on the cluster, in NEEDS order; False when one failed
        (recording.result says which and why, as Recording.run would). Raises a stop (UsageError) or a cluster
        failure (MedpanelError): those end the whole run."""
        mine = [s for s in OFFLINE if s in stages]
        if not mine:
            return True
        failures: dict[str, str] = {}
        started: dict[str, asyncio.Future] = {}

        async def after_needs(stage: str) -> bool:
            for need in NEEDS[stage]:
                if need in started and not await started[need]:
                    return False  # an input failed: this stage does not run
            return await self._stage(recording, stage, progress, redo, failures)

        async with window:
            for stage in mine:
                started[stage] = asyncio.ensure_future(after_needs(stage))
            try:
                await asyncio.gather(*started.values())
            finally:
                for task in started.values():
                    task.cancel()
                await asyncio.gather(*started.values(), return_exceptions=True)
        result = recording.result
        order = {s: n for n, s in enumerate(STAGES)}  # in pipeline order, as in-process, whatever finished first
        result.ran.sort(key=order.__getitem__)
        result.skipped.sort(key=order.__getitem__)
        result.seconds = dict(sorted(result.seconds.items(), key=lambda kv: order[kv[0]]))
        if failures:
            result.failed_stage = min(failures, key=order.__getitem__)  # the first in order, as in-process
            record_failure(recording, failures[result.failed_stage], progress)
            return False
        result.failed_stage = None
        return True

    async def _stage(self, recording: Recording, stage: str, progress: Progress, redo: bool, failures: dict[str, str]) -> bool:
        try:
            if not recording.begin(stage, progress, redo):  # skip, or announce and remove later stages' files, as in-process
                return True
        except OSError as exc:  # a later stage's file that cannot be removed: this recording fails, as in-process
            failures[stage] = f"{type(exc).__name__}: {exc}"
            return False
        try:
            answer = await self._submit(recording, stage, progress)
        finally:
            recording.sweep_parts(stage)  # a lost attempt's file beside, never renamed
        if "error" in answer:
            failures[stage] = answer["error"]
            return False
        await self._confirm(recording, stage, answer)
        on = f"{answer['device']}, " if answer["device"] != "cpu" else ""
        recording.finished(stage, answer["seconds"], answer["message"], progress, f", {on}node {answer['node']} pid {answer['pid']}")
        return True

    async def _confirm(self, recording: Recording, stage: str, answer: dict) -> None:
        """Stop unless this process reads the very file the worker wrote: else OUT is not shared with that node,
        and a later stage would say misleadingly that this one has not run."""
        path = recording.path(stage)
        deadline = time.monotonic() + self.confirm_s
        while True:
            try:
                if hashlib.sha256(path.read_bytes()).hexdigest() == answer["digest"]:
                    return
            except OSError:
                pass
            if time.monotonic() >= deadline:
                raise UsageError(f"{recording.rid}: the Ray node {answer['node']} wrote {path}, but this machine does not see that "
                                 f"file after {self.confirm_s:g} s: OUT is not on a filesystem the driver and that node share.", SHARED_FIX)
            await asyncio.sleep(0.25)

    async def _submit(self, recording: Recording, stage: str, progress: Progress) -> dict:
        """The stage's answer, its task submitted again when its worker dies or it runs past the stage deadline
        (MAX_ATTEMPTS tries in all). Raises a worker's stop, a node that cannot import medpanel, a cluster failure."""
        from medpanel.ray_cluster import MAX_ATTEMPTS, first_line, lost_worker_errors

        ray = self.ray
        lost = lost_worker_errors(ray)
        resources = self.resources[stage]
        task = self._tasks[resources["num_gpus"] > 0]
        source = os.path.abspath(recording.source)  # as OUT: absolute, symlinks kept (they may differ between nodes)
        why = ""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            tag = f"{os.getpid()}-{time.monotonic_ns()}-{attempt}"
            # Ray's own retries off: only the driver resubmits, so it counts the tries and says so.
            ref = None
            try:
                ref = task.options(name=f"curate:{stage}:{recording.rid}", max_retries=0, **resources, **thread_env()).remote(
                    recording.rid, source, str(recording.folder.parent.parent), recording.tools.settings, stage, recording.fingerprint, tag)
                answer = await asyncio.wait_for(asyncio.wrap_future(ref.future()), self.stage_timeout_s)
            except asyncio.CancelledError:
                cancel(ray, ref)  # the run stopped: stop the stage (its file is written whole or not at all)
                raise
            except asyncio.TimeoutError:
                cancel(ray, ref)  # kills its worker: a stuck stage must not hold the CPU (or GPU) for good
                self.stats.workers_lost += 1
                self.stats.timed_out += 1
                why = f"it ran past the stage deadline of {self.stage_timeout_s:g} s, {STAGE_TIMEOUT_ENV}"
            except lost as exc:
                self.stats.workers_lost += 1
                why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            except ray.exceptions.RayTaskError as exc:  # the task broke outside the stage
                node = import_failure_node(exc)
                if node is not None:  # every task on that node would fail alike: stop, not fail each recording
                    raise UsageError(f"The Ray node {node} cannot import what the curate tasks need: {first_line(exc)}.",
                                     "Install medpanel the same way on every node (the same version, with the ray and curate "
                                     "extras), then run the same command again: finished stages are kept.") from None
                return {"error": f"The Ray task failed outside the stage: {first_line(exc)}"}
            except (ray.exceptions.RayError, ConnectionError) as exc:  # the cluster cannot run tasks: the run stops, finished stages kept
                raise MedpanelError(f"The Ray cluster could not run {recording.rid}'s {stage} stage: {first_line(exc)}",
                                    "Check the cluster with `ray status`, then run the same command again: finished stages are kept.") from None
            else:
                self.stats.tasks += 1
                self.stats.pids.add(answer["pid"])
                self.stats.assigned.append((stage, answer.get("resources", {})))
                self.stats.gpu_tasks += answer.get("device") == "cuda"
                if "stop" in answer:
                    raise UsageError(*answer["stop"])
                return answer
            if attempt < MAX_ATTEMPTS:
                self.stats.resubmitted += 1
                progress(recording.rid, stage, f"its Ray attempt was lost ({why}): submitted again, try {attempt + 1} of {MAX_ATTEMPTS}")
        return {"error": f"WorkerLost: its Ray attempt was lost {MAX_ATTEMPTS} times (last: {why})."}


def import_failure_node(exc: BaseException) -> str | None:
    """The node of a task that failed to import (medpanel, or a package it needs, missing there), else None.
    Ray reports a module that cannot be loaded on the worker as RayTaskError(RaySystemError) with the
    ImportError only in its text, and the node only in its header (`ray::f() (pid=..., ip=...)`)."""
    cause = getattr(exc, "cause", None)
    text = str(exc)
    if not (isinstance(exc, ImportError) or isinstance(cause, ImportError)
            or re.search(r"\b(ImportError|ModuleNotFoundError|No module named)\b", text)):
        return None
    found = re.search(r"\bip=([^),\s]+)", text)
    return getattr(exc, "ip", None) or (found.group(1) if found else "?")


async def curate_on_ray(source: Path, out: Path, *, stages: list[str] | None = None, settings: CurateSettings | None = None,
                        make_model: Callable[[], Any] | None = None, progress: Progress | None = None, redo: bool = False,
                        cluster: RayStages | None = None) -> CurateReport:
    """pipeline.curate with the offline stages on a Ray cluster (`cluster`, default: a local instance started
    and stopped here). Same files, same cases, same failures as in-process. A stop raised for any recording
    (see run_stage_task) cancels everything at once and is raised here."""
    settings = settings or CurateSettings()
    stages = chosen(stages)
    progress = progress or (lambda rid, stage, message: None)
    out = Path(os.path.abspath(out))  # workers get absolute paths: their working folder is not the driver's
    if not any(s in OFFLINE for s in stages):  # nothing for a cluster to do: no connection is made
        return await curate(Path(source), out, stages=stages, settings=settings, make_model=make_model, progress=progress, redo=redo)
    mine = cluster is None
    cluster = cluster or RayStages()
    try:
        cluster.prepare(stages, settings)  # a bad address, a task no node fits: refused before any recording is touched
        work = open_recordings(source, out, stages, Tools(settings, make_model), progress, redo)
        window = cluster.window()
        rest = [s for s in stages if s not in OFFLINE]
        offline = [asyncio.ensure_future(cluster.run_offline(recording, stages, progress, redo, window)) for recording in work]
        results = []

        async def drive() -> None:
            for recording, task in zip(work, offline):  # the model stages one recording at a time, in order
                if await task:
                    results.append(await run_recording(recording, rest, progress, redo))
                else:
                    write_json(recording.folder / "status.json", asdict(recording.result))
                    results.append(recording.result)

        driver = asyncio.ensure_future(drive())
        stopped: list[BaseException] = []

        def first_stop(task: asyncio.Future) -> None:  # a stop for a later recording ends the run now, not when reached
            if not task.cancelled() and task.exception() is not None and not stopped:
                stopped.append(task.exception())
                driver.cancel()

        for task in offline:
            task.add_done_callback(first_stop)
        try:
            await driver
        except asyncio.CancelledError:
            if stopped:
                raise stopped[0] from None
            raise
        finally:
            for task in (driver, *offline):
                task.cancel()
            await asyncio.gather(driver, *offline, return_exceptions=True)
        return finish(out, stages, settings, results, progress)
    finally:
        if mine:
            cluster.shutdown()
