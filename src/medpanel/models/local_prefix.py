"""Prompt reuse for the embedded model: a call evaluates only the part of its prompt not already in a KV state.

`prime` evaluates a prompt after the longest prefix the live llama.cpp context shares with it, and
`settle` cuts that context back afterwards so that what is reused is bit for bit what evaluating from
scratch computes. `PrefixCache` keeps recent contexts' states, so calls that alternate between prompts
(two seats of a consult, a moderator between specialists) each resume from their own prefix.
`PromptRecord` is one call's accounting (see local.prompt_records).
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

DEFAULT_PREFIX_CACHE_MB = 256
MIN_RESTORE_GAIN = 8  # load a kept state only when it saves at least this many tokens over the live context
MIN_KEPT_TOKENS = 32  # contexts shorter than this are not worth keeping


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two sequences share."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = np.nonzero(np.asarray(a[:n], dtype=np.int64) != np.asarray(b[:n], dtype=np.int64))[0]
    return int(differ[0]) if differ.size else n


def batches(tokens: Sequence[int], size: int) -> list[list[int]]:
    """`tokens` in evaluation batches of at most `size`, none of a single token (unless there is only one)."""
    chunks = [list(tokens[i : i + size]) for i in range(0, len(tokens), size)]
    if len(chunks) > 1 and len(chunks[-1]) == 1:
        chunks[-1].insert(0, chunks[-2].pop())
    return chunks


def prime(llama: Any, prompt: Sequence[int]) -> int:
    """Evaluate the prompt, reusing the longest prefix already in the KV cache. Returns how many prompt
    tokens were reused (the rest were evaluated).

    Why reuse never changes an answer: llama.cpp computes a token's KV the same, bit for bit, in any
    batch of two or more tokens wherever the batch starts, but not always when the token is evaluated
    alone (measured on the embedded model). So every prompt token but the last is evaluated in batches
    of two or more, from scratch or after a reused prefix alike; the last goes alone, as on a full cache
    hit, so the logits come from the same computation whatever was cached; and after the call the
    context is cut back to those batch-evaluated tokens (`settle`), dropping the lone last token and the
    reply, which were evaluated one by one. What is reused is then exactly what evaluating from scratch
    would compute."""
    common = min(common_prefix(llama.input_ids[: llama.n_tokens], prompt), len(prompt) - 1)
    if len(prompt) - 1 - common == 1 and common > 0:
        common -= 1  # never a lone token before the last one
    llama.n_tokens = max(common, 0)  # `eval` drops the cache past n_tokens
    for chunk in batches(prompt[llama.n_tokens : -1], llama.n_batch):
        llama.eval(chunk)
    llama.eval(list(prompt[-1:]))
    return max(common, 0)


def settle(llama: Any, prompt: Sequence[int], reused: int) -> None:
    """After a call: keep in the context only the prompt tokens evaluated in batches (see `prime`)."""
    import llama_cpp

    keep = len(prompt) - 1 if len(prompt) - 1 - reused >= 2 or len(prompt) - 1 == reused else reused
    keep = max(0, min(keep, llama.n_tokens))
    llama.n_tokens = keep
    llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(llama.ctx), 0, keep, -1)


@dataclass(frozen=True)
class PromptRecord:
    """One call's prompt accounting."""

    prompt: int  # tokens in the prompt
    evaluated: int  # of those, evaluated by this call; the rest came from a kept KV state
    restored: int  # reused tokens that came from a state PrefixCache loaded back (0: only the live context's, or none)
    scope: tuple | None = None  # (run_id, item_id, repeat) when a benchmark run made the call
    seconds: float = 0.0  # the whole call: prompt and generation

    @property
    def reused(self) -> int:
        return self.prompt - self.evaluated


@dataclass
class _Kept:
    tokens: Any  # np.ndarray of the context's tokens
    data: Any  # ctypes buffer from llama_state_seq_get_data

    @property
    def size(self) -> int:
        return len(self.data)


class PrefixCache:
    """Recent KV states of one loaded model, so that alternating prompts each resume from their own prefix.

    llama.cpp holds one context, the last call's tokens (`prime` reuses what the next prompt shares with
    it). After each call `keep` copies that context's state (sequence 0, only its used cells: about 23 KB
    a token for SmolLM2-135M) keyed by its tokens; before a call `restore` loads back the kept state that
    shares the longest prefix with the prompt, when it beats the live context by MIN_RESTORE_GAIN tokens.
    A state that a newer one extends is dropped (the newer serves every prompt the older could), and the
    oldest go first past `capacity` bytes. (llama-cpp-python's LlamaRAMCache does this for its own
    create_completion, which medpanel's decode loop does not use, and copies the whole logits buffer,
    ~100 MB for this vocabulary, with every state.)
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.entries: OrderedDict[int, _Kept] = OrderedDict()
        self._next = 0

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries.values())

    def best(self, prompt: Any) -> tuple[int | None, int]:
        best_key, best_len = None, 0
        for key, entry in self.entries.items():
            n = common_prefix(entry.tokens, prompt)
            if n > best_len:
                best_key, best_len = key, n
        return best_key, best_len

    def restore(self, llama: Any, prompt: Any) -> int:
        """Load the kept state that best fits `prompt` if it beats the live context; returns its shared tokens (0: none loaded)."""
        import llama_cpp
        if not self.entries:
            return 0
        live = common_prefix(llama.input_ids[: llama.n_tokens], prompt)
        key, shared = self.best(prompt)
        if key is None or shared < live + MIN_RESTORE_GAIN:
            return 0
        entry = self.entries[key]
        self.entries.move_to_end(key)
        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(llama.ctx), 0, -1, -1)
        if llama_cpp.llama_state_seq_set_data(llama.ctx, entry.data, entry.size, 0) != entry.size:
            llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(llama.ctx), 0, -1, -1)
            llama.n_tokens = 0  # nothing trustworthy left: the prompt is evaluated from scratch
            del self.entries[key]
            return 0
        n = len(entry.tokens)
        llama.input_ids[:n] = entry.tokens
        llama.n_tokens = n
        return shared

    def keep(self, llama: Any) -> None:
        """Keep the live context's state (after a call)."""
        import llama_cpp
        import numpy as np

        n = int(llama.n_tokens)
        if n < MIN_KEPT_TOKENS or self.capacity <= 0:
            return
        tokens = np.array(llama.input_ids[:n], dtype=np.int32)
        for key, entry in list(self.entries.items()):
            m = len(entry.tokens)
            if m >= n and np.array_equal(entry.tokens[:n], tokens):
                self.entries.move_to_end(key)  # already kept, within a longer state
                return
            if m < n and np.array_equal(tokens[:m], entry.tokens):
                del self.entries[key]  # the new state extends it
        size = llama_cpp.llama_state_seq_get_size(llama.ctx, 0)
        if size > self.capacity:
            return
        data = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(llama.ctx, data, size, 0)
        if written != size:
            return
        self.entries[self._next] = _Kept(tokens, data)
        self._next += 1
        total = self.size
        while total > self.capacity and self.entries:
            _, dropped = self.entries.popitem(last=False)
            total -= dropped.size

    def clear(self) -> None:
        self.entries.clear()
