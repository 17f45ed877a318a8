"""`medpanel curate --executor ray` (curate/ray_stages.py) on a real local Ray cluster (4 CPUs, started here once):
the offline stages as Ray tasks give the in-process stage files and cases; a worker killed mid-stage is
submitted again and the run finishes with whole files; a stage past its deadline is cancelled, and after
three tries its recording fails (WorkerLost); --redo and a settings change invalidate later stages as
in-process; a stop (OUT not shared, a stale OUT, tesseract or medpanel missing on a node) ends the run at
once; a broken recording fails alone (exit 4); bad input is exit 2 without a traceback; the GPU request
follows the nodes' resources (0 on a CPU-only one) or the user's --gpus-per-task. Model stages run on the
scripted curator (curate_support), on the driver. Every Ray run has a time limit (RUN_LIMIT_S), so a
regression fails instead of hanging."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import MEDPANEL, ROOT
from curate_support import copy_meeting, curator_body, require_media, scripted_curator

from medpanel.curate.pipeline import FILES, CurateSettings, curate, fingerprint
from medpanel.curate.slides import VisualSettings
from medpanel.errors import UsageError

ray = pytest.importorskip("ray")
from medpanel.curate.ray_stages import (RayStages, check_fits, curate_on_ray, import_failure_node, run_stage_task,  # noqa: E402
                                        task_resources)

RUN_LIMIT_S = 120  # any one Ray curate run here takes seconds; past this it is hung


def on_ray(source: Path, out: Path, **kwargs):
    """curate_on_ray, bounded: a hang fails the test (the wait_for cancels the run, which cancels its tasks)."""
    return asyncio.run(asyncio.wait_for(curate_on_ray(source, out, **kwargs), RUN_LIMIT_S))

pytestmark = pytest.mark.slow

# The smallest meeting that still has one case, one slide and three voices: about 15 s of audio.
SCRIPT = [[("moderator", "Our first patient is a 62 year old woman with a new lung mass.", None),
           ("radiologist", "The chest scan shows a 3 centimeter mass in the right upper lobe.", "s1"),
           ("oncologist", "I would recommend surgery first and then adjuvant therapy.", None)]]



@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> Path:
    require_media()
    from medpanel.testing.meeting import build_meeting

    video, _ = build_meeting(tmp_path_factory.mktemp("meeting"), script=SCRIPT)
    folder = tmp_path_factory.mktemp("recordings")
    copy_meeting(video, folder, "a_meeting")
    copy_meeting(video, folder, "b_meeting")
    return folder


@pytest.fixture(scope="module")
def reference(recordings, tmp_path_factory) -> Path:
    """The in-process curation every Ray run is compared with."""
    out = tmp_path_factory.mktemp("in_process")
    report = asyncio.run(curate(recordings, out, make_model=scripted_curator))
    assert [r.state for r in report.results] == ["done", "done"], report.results
    return out


def stage_files(out: Path, rid: str) -> dict[str, dict]:
    return {stage: json.loads((out / "work" / rid / name).read_text()) for stage, name in FILES.items()}


def status(out: Path, rid: str) -> dict:
    data = json.loads((out / "work" / rid / "status.json").read_text())
    data["seconds"] = sorted(data["seconds"])  # which stages were timed; the times differ
    return data


def case_tree(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out / "cases")): p.read_bytes() for p in sorted((out / "cases").rglob("*")) if p.is_file()}


def our_workers(title: str) -> list[int]:
    """Processes of this test's Ray cluster (children of its raylet) whose title starts with `title`."""
    raylet = ray._private.worker._global_node.all_processes["raylet"][0].process.pid
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                name = fh.read().split(b"\0")[0].decode(errors="replace")
            with open(f"/proc/{entry}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == raylet and name.startswith(title):
            found.append(int(entry))
    return found


@pytest.fixture(scope="module")
def ray_run(cluster, recordings, tmp_path_factory):
    """One full Ray curation of both recordings: (out, its RayStages, its progress log, its report)."""
    out = tmp_path_factory.mktemp("ray_run") / "ray"
    stages = RayStages(cluster)
    log: list[tuple[str, str, str]] = []
    report = on_ray(recordings, out, make_model=scripted_curator, cluster=stages, progress=lambda *a: log.append(a))
    return out, stages, log, report


def test_ray_gives_the_in_process_stage_files_and_cases(cluster, recordings, reference, ray_run):
    out, stages, log, report = ray_run
    assert [(r.recording, r.state) for r in report.results] == [("a_meeting", "done"), ("b_meeting", "done")]
    for rid in ("a_meeting", "b_meeting"):
        assert stage_files(out, rid) == stage_files(reference, rid)  # data and settings, every stage
        assert status(out, rid) == status(reference, rid)  # same stages ran, in the same order
        assert sorted(p.name for p in (out / "work" / rid / "slides").iterdir()) == sorted(p.name for p in (reference / "work" / rid / "slides").iterdir())
    assert case_tree(out) == case_tree(reference)  # the same cases, byte for byte, in the same splits
    assert json.loads((out / "split.json").read_text()) == json.loads((reference / "split.json").read_text())
    # The offline stages ran in worker processes (several: the two recordings at once), the model stages here.
    assert stages.stats.tasks == 8 and len(stages.stats.pids) >= 2 and os.getpid() not in stages.stats.pids
    assert stages.stats.gpu_tasks == 0 and stages.stats.workers_lost == 0
    # What Ray actually gave each task on this CPU-only cluster: one CPU, no GPU.
    assert len(stages.stats.assigned) == 8
    assert all(res.get("CPU") == 1 and not res.get("GPU") for _stage, res in stages.stats.assigned), stages.stats.assigned
    assert [m for rid, s, m in log if s == "roles" and m != "running"][0].endswith("s)")  # the model stage's own line, no node
    assert any("node" in m for rid, s, m in log if s == "audio" and m != "running")
    # A second run finds every stage up to date: nothing is submitted. Files a cancelled attempt left beside
    # (ray.cancel does not wait for its worker to die) are swept when the recordings are opened.
    strays = [out / "work" / "a_meeting" / "transcript.json.123-456-1.part", out / "work" / "b_meeting" / "slides" / "slide_01.png.9-ab.part"]
    for stray in strays:
        stray.write_text("half")
    again = RayStages(cluster)
    rerun = on_ray(recordings, out, make_model=scripted_curator, cluster=again)
    assert all(r.ran == [] and r.state == "done" for r in rerun.results) and again.stats.tasks == 0
    assert not any(stray.exists() for stray in strays)


def test_a_settings_change_and_redo_invalidate_later_stages_on_ray(cluster, recordings, ray_run, tmp_path):
    out = tmp_path / "ray"
    shutil.copytree(ray_run[0], out)
    work = out / "work"
    transcript = (work / "a_meeting" / FILES["audio"]).stat().st_mtime_ns
    other = CurateSettings(visual=VisualSettings(every_s=4.0))
    stages = RayStages(cluster)
    report = on_ray(recordings, out, stages=["slides"], settings=other, cluster=stages)
    for r in report.results:
        assert (r.state, r.ran) == ("done", ["slides"]), r
        folder = work / r.recording
        assert json.loads((folder / FILES["slides"]).read_text())["settings"]["every_s"] == 4.0
        for later in ("align", "captions", "extract", "deleak"):  # what read from slides is removed, as in-process
            assert not (folder / FILES[later]).exists(), (r.recording, later)
        assert (folder / FILES["speakers"]).exists() and (folder / FILES["roles"]).exists()  # not downstream: kept
    assert (work / "a_meeting" / FILES["audio"]).stat().st_mtime_ns == transcript
    # --redo reruns an up-to-date stage and removes its dependents' files; a file that cannot be removed (here a
    # folder in its place) fails that recording only, at that stage, as in-process, and the other goes on.
    (work / "a_meeting" / FILES["extract"]).write_text("{}")
    (work / "b_meeting" / FILES["extract"]).mkdir()
    report = on_ray(recordings, out, stages=["align"], settings=other, redo=True, cluster=RayStages(cluster))
    by = {r.recording: r for r in report.results}
    assert (by["a_meeting"].state, by["a_meeting"].ran) == ("done", ["align"])
    assert not (work / "a_meeting" / FILES["extract"]).exists()
    assert (by["b_meeting"].state, by["b_meeting"].failed_stage) == ("failed", "align")
    assert "IsADirectoryError" in by["b_meeting"].error
    assert json.loads((work / "b_meeting" / "status.json").read_text())["failed_stage"] == "align"


def test_a_stage_past_its_deadline_is_cancelled_and_after_three_tries_the_recording_fails(cluster, recordings, tmp_path):
    folder = tmp_path / "one"
    copy_meeting(recordings / "a_meeting.mp4", folder, "a_meeting")
    stages = RayStages(cluster, stage_timeout_s=0.05)  # far below what finding slides takes
    log: list[tuple[str, str, str]] = []
    started = time.monotonic()
    report = on_ray(folder, tmp_path / "out", stages=["slides"], cluster=stages, progress=lambda *a: log.append(a))
    result = report.results[0]
    assert (result.state, result.failed_stage) == ("failed", "slides")
    assert result.error.startswith("WorkerLost:") and "stage deadline of 0.05 s" in result.error
    assert stages.stats.timed_out == stages.stats.workers_lost == 3 and stages.stats.resubmitted == 2
    assert sum("submitted again" in m for _r, _s, m in log) == 2
    assert not (tmp_path / "out" / "work" / "a_meeting" / FILES["slides"]).exists()
    assert time.monotonic() - started < 60


def test_a_stop_for_a_later_recording_ends_the_run_at_once(cluster, recordings, tmp_path):
    folder = tmp_path / "recordings"
    copy_meeting(recordings / "a_meeting.mp4", folder, "a_meeting")
    copy_meeting(recordings / "a_meeting.mp4", folder, "b_meeting")
    out = tmp_path / "out"

    def progress(rid: str, stage: str, message: str) -> None:
        if (rid, stage, message) == ("a_meeting", "audio", "running"):  # after the claim, before b's tasks go out
            (folder / "b_meeting.mp4").unlink()  # as if b's recording were not on the nodes' filesystem

    started = time.monotonic()
    with pytest.raises(UsageError, match="b_meeting.mp4 is not visible on the Ray node") as stopped:
        on_ray(folder, out, make_model=scripted_curator, cluster=RayStages(cluster), progress=progress)
    assert "shared filesystem" in stopped.value.fix
    # Raised while a_meeting was still running (its stages cancelled), not after a_meeting had finished.
    assert not (out / "work" / "a_meeting" / "status.json").exists()
    assert not (out / "work" / "a_meeting" / FILES["roles"]).exists()
    assert time.monotonic() - started < 60


def test_a_worker_killed_mid_stage_is_submitted_again_and_the_run_finishes(cluster, recordings, reference, tmp_path):
    folder = tmp_path / "one"
    copy_meeting(recordings / "a_meeting.mp4", folder, "a_meeting")
    out = tmp_path / "ray"
    stages = RayStages(cluster)
    killed: list[int] = []
    # A worker an earlier test's cancel is still ending can bear the same title: only this run's are killed.
    earlier = set(our_workers("ray::curate:audio:a_meeting"))

    async def kill_the_audio_worker() -> None:
        deadline = time.monotonic() + 60
        while not killed and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            for pid in set(our_workers("ray::curate:audio:a_meeting")) - earlier:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

    async def both():
        killer = asyncio.create_task(kill_the_audio_worker())
        report = await curate_on_ray(folder, out, make_model=scripted_curator, cluster=stages)
        await killer
        return report

    report = asyncio.run(asyncio.wait_for(both(), RUN_LIMIT_S))
    assert killed, "no worker was found running the audio stage"
    assert stages.stats.workers_lost == 1 and stages.stats.resubmitted == 1
    assert report.results[0].state == "done", report.results[0].error
    assert stage_files(out, "a_meeting") == stage_files(reference, "a_meeting")  # whole files, as in-process
    assert not list((out / "work" / "a_meeting").glob("*.part"))  # nothing half-written left beside them
    assert all(pid not in stages.stats.pids for pid in killed)  # the answer came from another worker
    assert sorted(c for cases in report.split["cases"].values() for c in cases) == ["a_meeting-01"]


def test_the_gpu_request_follows_the_cluster_or_the_user():
    cpu_only, gpus = [{"CPU": 4.0, "memory": 1e9}], [{"CPU": 16.0, "GPU": 2.0}, {"CPU": 4.0}]
    plain, pyannote = CurateSettings(), CurateSettings(diarization_model="/models/pyannote")

    def gpus_of(settings, cluster, per_task=None):
        return {s: task_resources(s, settings, cluster, per_task)["num_gpus"] for s in ("audio", "speakers", "slides", "align")}

    # Default: a GPU for the stages whose model can use one where the cluster has GPUs, none on a CPU-only cluster.
    assert gpus_of(plain, gpus) == {"audio": 1, "speakers": 1, "slides": 0, "align": 0}
    assert gpus_of(plain, cpu_only) == {"audio": 0, "speakers": 0, "slides": 0, "align": 0}
    assert gpus_of(pyannote, gpus) == {"audio": 1, "speakers": 0, "slides": 0, "align": 0}  # pyannote is built on the CPU
    # The user's --gpus-per-task: a fraction packs tasks on one GPU; 0 keeps every stage on CPUs.
    assert gpus_of(plain, gpus, 0.5) == {"audio": 0.5, "speakers": 0.5, "slides": 0, "align": 0}
    assert gpus_of(plain, gpus, 0) == gpus_of(plain, cpu_only, 0) == gpus_of(plain, cpu_only)
    assert gpus_of(plain, gpus, 2) == {"audio": 2, "speakers": 2, "slides": 0, "align": 0}
    assert all(task_resources(s, plain, gpus)["num_cpus"] == 1 for s in ("audio", "speakers", "slides", "align"))
    # A value that is no number of GPUs is refused, with the fix.
    for per_task, says in ((1.5, "must be whole"), (-1, "not a number of GPUs"), (float("nan"), "not a number of GPUs")):
        with pytest.raises(UsageError, match=re.escape(says)) as refused:
            task_resources("audio", plain, gpus, per_task)
        assert refused.value.fix
    # A task lands on one node: its shape must fit one live node, whatever the cluster's total.
    two_nodes = [{"CPU": 8.0, "GPU": 1.0}, {"CPU": 8.0, "GPU": 1.0}]  # 2 GPUs in all, 1 per node
    gpu_no_cpu = [{"CPU": 0.0, "GPU": 4.0}, {"CPU": 8.0}]
    for per_task, nodes, says in ((0.5, cpu_only, "has no GPU"), (2, two_nodes, "no node with 1 CPU and 2 GPU(s) (the most on one node is 1)"),
                                  (1, gpu_no_cpu, "no node with 1 CPU and 1 GPU(s) (the most on one node is 0)")):
        with pytest.raises(UsageError, match=re.escape(says)) as refused:
            check_fits({"audio": task_resources("audio", plain, nodes, per_task)}, nodes)
        assert refused.value.fix
    check_fits({"audio": task_resources("audio", plain, two_nodes, 1)}, two_nodes)  # fits: no error
    assert task_resources("audio", plain, gpu_no_cpu)["num_gpus"] == 0  # the GPUs sit where no task can run


def test_a_worker_that_cannot_see_out_or_sees_a_stale_copy_stops_the_run(cluster, recordings, tmp_path):
    """What a node without the shared filesystem answers, read off real tasks: an OUT no node has, and an OUT
    whose source.json is not the driver's (a stale copy of OUT on that node)."""
    task = ray.remote(run_stage_task).options(max_retries=0)
    video = recordings / "a_meeting.mp4"
    unseen = tmp_path / "elsewhere" / "out"
    answer = ray.get(task.remote("a_meeting", str(video), str(unseen), CurateSettings(), "audio", fingerprint(video), "t"), timeout=60)
    assert "stop" in answer and "filesystem every node shares" in answer["stop"][0] and str(unseen) in answer["stop"][0]
    assert not unseen.exists()  # it made no folder of its own
    stale = tmp_path / "stale"
    (stale / "work" / "a_meeting").mkdir(parents=True)
    (stale / "work" / "a_meeting" / "source.json").write_text(json.dumps({**fingerprint(video), "mtime_ns": 1}))
    answer = ray.get(task.remote("a_meeting", str(video), str(stale), CurateSettings(), "audio", fingerprint(video), "t"), timeout=60)
    assert "stop" in answer and "is not the one the driver wrote" in answer["stop"][0], answer
    assert not (stale / "work" / "a_meeting" / FILES["audio"]).exists()


def test_a_node_without_tesseract_or_medpanel_stops_the_run_naming_it(cluster, recordings, tmp_path):
    video = recordings / "a_meeting.mp4"
    out = tmp_path / "out"
    (out / "work" / "a_meeting").mkdir(parents=True)
    (out / "work" / "a_meeting" / "source.json").write_text(json.dumps(fingerprint(video)))
    # A node whose PATH has no tesseract (every other program on this PATH kept): its slides would have no text,
    # so the run stops instead.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in filter(os.path.isdir, os.environ["PATH"].split(os.pathsep)):
        for program in Path(folder).iterdir():
            if program.name != "tesseract" and not (bin_dir / program.name).exists():
                (bin_dir / program.name).symlink_to(program)
    no_tools = ray.remote(run_stage_task).options(max_retries=0, runtime_env={"env_vars": {"PATH": str(bin_dir)}})
    answer = ray.get(no_tools.remote("a_meeting", str(video), str(out), CurateSettings(), "slides", fingerprint(video), "t"), timeout=60)
    assert "stop" in answer and f"tesseract is not installed on the Ray node {answer['node']}" in answer["stop"][0], answer
    assert "tesseract-ocr" in answer["stop"][1] and not (out / "work" / "a_meeting" / FILES["slides"]).exists()
    # A node where medpanel cannot be imported: Ray's own error, which the driver turns into a stop naming the node.
    fake = tmp_path / "fake"
    (fake / "medpanel").mkdir(parents=True)
    (fake / "medpanel" / "__init__.py").write_text("raise ImportError('No module named medpanel')\n")
    broken = ray.remote(run_stage_task).options(max_retries=0, runtime_env={"env_vars": {"PYTHONPATH": str(fake)}})
    with pytest.raises(ray.exceptions.RayTaskError) as failed:
        ray.get(broken.remote("a_meeting", str(video), str(out), CurateSettings(), "audio", fingerprint(video), "t"), timeout=60)
    assert import_failure_node(failed.value) == ray.util.get_node_ip_address()
    assert import_failure_node(ray.exceptions.RayTaskError("f", "ValueError: bad", ValueError("bad"))) is None


def test_the_worker_answer_is_checked_against_the_file_the_driver_sees(cluster, recordings, ray_run, tmp_path):
    from medpanel.curate.pipeline import Recording, Tools

    out = tmp_path / "ray"
    shutil.copytree(ray_run[0], out)
    recording = Recording("a_meeting", recordings / "a_meeting.mp4", out, Tools(CurateSettings(), None))
    stages = RayStages(cluster, confirm_s=0.3)
    with pytest.raises(UsageError, match="does not see that file"):  # a worker's digest of a file not the one here
        asyncio.run(stages._confirm(recording, "audio", {"digest": "0" * 64, "node": "10.0.0.9"}))


def run_cli(args: list[str], env: dict, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([MEDPANEL, "curate", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_cli_bad_executor_address_and_gpus_are_exit_2(cluster, recordings, cli_env, tmp_path):
    video = str(recordings / "a_meeting.mp4")
    out = tmp_path / "o"
    for args, says in ((["--executor", "nonsense"], "--executor 'nonsense' is not one of: local, ray"),
                       (["--executor", "ray", "--address", "127.0.0.1:1"], "No Ray cluster answers at 127.0.0.1:1"),
                       (["--executor", "ray", "--address", "not-an-address"], "is not HOST:PORT"),
                       (["--address", cluster], "only --executor ray uses"),
                       (["--executor", "ray", "--address", "ray://127.0.0.1:10001"], "Run `medpanel curate` on a node"),
                       (["--executor", "ray", "--address", cluster, "--gpus-per-task", "1"], "the Ray cluster has no GPU")):
        done = run_cli([video, "--out", str(out), "--stages", "offline", *args], cli_env)
        assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
        assert not (out / "work" / "a_meeting" / "status.json").exists(), args  # refused before any recording ran


def test_cli_ray_only_options_are_refused_when_typed_not_when_only_their_variables_are_set(recordings, cli_env, tmp_path):
    video, out = str(recordings / "a_meeting.mp4"), str(tmp_path / "o")
    env = cli_env | {"MEDPANEL_RAY_ADDRESS": "10.0.0.1:6379", "MEDPANEL_CURATE_GPUS_PER_TASK": "1"}
    # Typed on the command line with the local executor: refused, even when the value equals the variable's.
    for args in (["--address", "10.0.0.1:6379"], ["--gpus-per-task", "1"]):
        done = run_cli([video, "--out", out, "--stages", "offline", *args], env)
        assert done.returncode == 2 and "only --executor ray" in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    # Left set in the environment only: not the user's doing, so the run goes on to its next check.
    done = run_cli([video, "--out", out, "--stages", "offline", "--whisper-model", str(tmp_path / "absent")], env)
    assert done.returncode == 2 and "--whisper-model" in done.stderr and "only --executor ray" not in done.stderr, done.stderr


def test_cli_without_ray_names_the_extra(recordings, cli_env, tmp_path):
    hidden = tmp_path / "no_ray"  # a `ray` that fails to import, first on the path: as if it were not installed
    (hidden / "ray").mkdir(parents=True)
    (hidden / "ray" / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    done = run_cli([str(recordings / "a_meeting.mp4"), "--out", str(tmp_path / "o"), "--stages", "offline", "--executor", "ray"],
                   cli_env | {"PYTHONPATH": str(hidden)})
    assert done.returncode == 2, done.stderr
    assert "pip install 'medpanel[ray]'" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2
    assert not (tmp_path / "o").exists()  # refused before anything ran


def test_cli_a_broken_recording_fails_alone_on_ray(cluster, recordings, cli_env, tmp_path):
    from medpanel.testing import MockConfig, MockServer

    folder = tmp_path / "recordings"
    copy_meeting(recordings / "a_meeting.mp4", folder, "b_meeting")
    (folder / "a_broken.mp4").write_bytes(b"this is not a video")  # first in order: the other must still run
    with MockServer(MockConfig(reply=curator_body)) as server:
        # Relative paths, run from tmp_path: the driver sends the workers absolute ones.
        done = run_cli(["recordings", "--out", "out", "--model", f"openai:curator@{server.base_url}", "--json",
                        "--executor", "ray", "--address", cluster], cli_env, cwd=tmp_path, timeout=300)
    assert done.returncode == 4, done.stderr
    out = tmp_path / "out"
    by_name = {r["recording"]: r for r in json.loads(done.stdout)["recordings"]}
    broken = by_name["a_broken"]
    assert broken["state"] == "failed" and broken["failed_stage"] == "audio" and "Cannot read audio" in broken["error"]
    assert "a_broken.mp4" in broken["error"]
    on_disk = json.loads((out / "work" / "a_broken" / "status.json").read_text())
    assert (on_disk["state"], on_disk["failed_stage"]) == ("failed", "audio")
    assert not (out / "work" / "a_broken" / FILES["audio"]).exists()
    assert by_name["b_meeting"]["state"] == "done" and by_name["b_meeting"]["ran"] == list(FILES)
    assert "failed a_broken at audio" in done.stderr
    assert sorted(c for v in json.loads(done.stdout)["split"]["cases"].values() for c in v) == ["b_meeting-01"]
