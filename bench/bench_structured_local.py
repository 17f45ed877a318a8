"""How much structured output costs on the embedded model, per path.

    .venv/bin/python bench/bench_structured_local.py [--max-tokens 96] [--repeats 1] [--threads 2]

Every path gets the same chat prompt (which states the schema) and the same token budget, greedy:

  free            no grammar, medpanel's decode loop                    (the baseline)
  free-primed     as free, but the reply starts with what the grammar forces first (`{"answer": "`),
                  so the model writes the same kind of JSON, only unchecked
  fast            llguidance, rejection first + forced runs (LocalModel's path)
  llg-eager       llguidance, full token mask every step                (what rejection-first saves)
  llama-free      no grammar, llama-cpp-python's create_completion       (baseline for the next row)
  llama-grammar   llama.cpp's JSON-schema grammar (LlamaGrammar.from_json_schema)

The prompt is evaluated before the clock for generation starts, so ms/token is decoding only;
"total" adds the prompt. Validity = the reply parses and validates against the schema.
Prints a table and writes JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from pydantic import BaseModel

from medpanel.models.base import Message
from medpanel.models.local import chat_messages, default_model_path, load_model
from medpanel.models.local_grammar import Sampler, decode
from medpanel.models.structured import Schema


class Answer(BaseModel):
    answer: str
    confidence: int


class BoardAnswer(BaseModel):
    answer: str


class Diagnosis(BaseModel):
    diagnosis: str
    codes: list[str]


PROMPTS: list[tuple[str, type[BaseModel]]] = [
    ("A 60-year-old smoker has a 3 cm spiculated nodule in the right upper lobe. What is the next step? Give your confidence from 0 to 100.", Answer),
    ("A 45-year-old woman has a 2 cm HER2-positive invasive ductal carcinoma with one positive axillary node. Which systemic therapy do you recommend?", BoardAnswer),
    ("A 58-year-old man has crushing chest pain and ST elevation in leads II, III and aVF. Give the diagnosis and its ICD-10 codes.", Diagnosis),
    ("A 30-year-old woman has fatigue, weight gain, cold intolerance and a raised TSH. What is the most likely diagnosis? Give your confidence from 0 to 100.", Answer),
    ("Tumor board: a 67-year-old man with stage III colon adenocarcinoma after resection, MSI-stable. Should he receive adjuvant chemotherapy, and which?", BoardAnswer),
    ("A 72-year-old woman has sudden right-sided weakness and slurred speech that started 90 minutes ago. Give the diagnosis and its ICD-10 codes.", Diagnosis),
    ("A 25-year-old man has fever, neck stiffness and a petechial rash. What is the first thing to do? Give your confidence from 0 to 100.", Answer),
    ("Tumor board: a 55-year-old woman with a 4 cm pancreatic head adenocarcinoma abutting the SMV. Is she resectable, and what comes first?", BoardAnswer),
]

PATHS = ["free", "free-primed", "fast", "llg-eager", "llama-free", "llama-grammar"]


def run_path(loaded, path: str, prompt: list[int], schema: dict, max_tokens: int) -> dict:
    from llama_cpp import LlamaGrammar

    llama = loaded.llama
    llama.reset()
    started = time.perf_counter()
    llama.eval(prompt)  # both APIs then find the prompt cached and go straight to generating
    prompt_s = time.perf_counter() - started
    masks = forced = None
    if path in ("free", "free-primed", "fast", "llg-eager"):
        constraint = loaded.grammar().constraint(schema) if path in ("fast", "llg-eager") else None
        # The primed reply counts its prefix as output, as the fast path counts its forced tokens.
        forced_bytes = loaded.grammar().constraint(schema).matcher.compute_ff_bytes() if path == "free-primed" else b""
        prefix = llama.tokenize(forced_bytes, add_bos=False)[:max_tokens] if forced_bytes else []
        t0 = time.perf_counter()
        result = decode(llama, prompt + prefix, max_tokens=max_tokens - len(prefix), sampler=Sampler(), constraint=constraint, lazy=path == "fast")
        gen_s = time.perf_counter() - t0
        text = llama.detokenize(prefix).decode() + result.text
        n_out, masks, forced = len(prefix) + len(result.tokens), result.masks, result.forced
    else:
        grammar = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False) if path == "llama-grammar" else None
        t0 = time.perf_counter()
        out = llama.create_completion(prompt, max_tokens=max_tokens, temperature=0.0, grammar=grammar)
        gen_s = time.perf_counter() - t0
        text, n_out = out["choices"][0]["text"], out["usage"]["completion_tokens"]
    return {"text": text, "tokens": n_out, "prompt_s": prompt_s, "gen_s": gen_s, "total_s": prompt_s + gen_s,
            "ms_per_token": 1000 * gen_s / max(n_out, 1), "masks": masks, "forced": forced}


def validate(schema: Schema, text: str) -> tuple[bool, object]:
    try:
        parsed = schema.validate(text)
        return True, parsed.model_dump() if isinstance(parsed, BaseModel) else parsed
    except ValueError:
        return False, None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=1, help="runs per prompt and path; the fastest counts")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--prompts", type=int, default=len(PROMPTS))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()

    loaded = load_model(default_model_path(), threads=args.threads)
    loaded.grammar()  # build the llguidance tokenizer outside the timings
    cases = PROMPTS[: args.prompts]
    rows: dict[str, list[dict]] = {p: [] for p in PATHS}

    warm = loaded.prompt_tokens(chat_messages([Message(role="user", content="Hello")], None))
    run_path(loaded, "free", warm, {}, 8)

    for i, (question, model_cls) in enumerate(cases, 1):
        schema = Schema(model_cls)
        prompt = loaded.prompt_tokens(chat_messages([Message(role="user", content=question)], schema.json_schema))
        for path in PATHS:  # interleaved, so background load hits every path alike
            runs = [run_path(loaded, path, prompt, schema.json_schema, args.max_tokens) for _ in range(args.repeats)]
            best = min(runs, key=lambda r: r["gen_s"])
            best["valid"], best["parsed"] = validate(schema, best["text"])
            best["prompt_index"], best["schema"] = i, model_cls.__name__
            rows[path].append(best)
        print(f"[{i}/{len(cases)}] {model_cls.__name__}: fast -> {rows['fast'][-1]['text'][:90]!r}", file=sys.stderr)

    summary = {}
    for path in PATHS:
        r = rows[path]
        summary[path] = {
            "ms_per_token_median": statistics.median(x["ms_per_token"] for x in r),
            "total_s_median": statistics.median(x["total_s"] for x in r),
            "tokens_median": statistics.median(x["tokens"] for x in r),
            "validity": sum(x["valid"] for x in r) / len(r),
        }
    for path in PATHS:
        base = "llama-free" if path.startswith("llama") else "free"
        s = summary[path]
        s["ratio_per_token"] = statistics.median(a["ms_per_token"] / b["ms_per_token"] for a, b in zip(rows[path], rows[base]))
        s["ratio_total"] = statistics.median(a["total_s"] / b["total_s"] for a, b in zip(rows[path], rows[base]))
        s["baseline"] = base
    same = sum(f["valid"] and f["parsed"] == g["parsed"] for f, g in zip(rows["free-primed"], rows["fast"]))

    print(f"\n{len(cases)} prompts, max_tokens={args.max_tokens}, greedy, threads={loaded.llama.n_threads}")
    print(f"{'path':<14}{'ms/token':>10}{'total s':>9}{'tokens':>8}{'x/token':>9}{'x total':>9}{'valid':>8}")
    for path in PATHS:
        s = summary[path]
        print(f"{path:<14}{s['ms_per_token_median']:>10.2f}{s['total_s_median']:>9.3f}{s['tokens_median']:>8.0f}"
              f"{s['ratio_per_token']:>9.2f}{s['ratio_total']:>9.2f}{s['validity']:>8.0%}")
    print("(ratios are medians of per-prompt ratios against 'free', or 'llama-free' for the llama rows)")
    print(f"fast path gave the same JSON as free-primed in {same}/{len(cases)} prompts; "
          f"full masks in {sum(x['masks'] for x in rows['fast'])} of {sum(x['tokens'] - x['forced'] for x in rows['fast'])} sampled steps; "
          f"{sum(x['forced'] for x in rows['fast'])} tokens forced")

    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"structured_local_{time.strftime('%Y%m%d-%H%M%S')}.json"
    target.write_text(json.dumps({"max_tokens": args.max_tokens, "repeats": args.repeats, "threads": loaded.llama.n_threads,
                                  "machine": platform.platform(), "summary": summary, "same_json_as_free_primed": same, "runs": rows}, indent=2, default=str))
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
