"""Grammar-constrained decoding for the embedded model: JSON-schema output at nearly free-text speed.

A plain llama.cpp JSON grammar checks the whole 49k-token vocabulary at every step. Here the schema
is compiled by llguidance and enforced "rejection first" (as llama.cpp's own common sampler does):

* take the token the model would pick anyway and ask the grammar whether it fits (about a microsecond);
* only when it does not, compute the full token mask and pick again among the allowed tokens;
* when the grammar forces bytes (`{"answer": "`, `", "confidence": `), feed those tokens in one batch
  instead of decoding them one by one.

Sampling-then-resampling-when-rejected draws from exactly the masked distribution: a token t the
grammar allows is drawn with p(t) + P(reject) * p(t) / Z = p(t) / Z, where Z is the allowed mass
and P(reject) = 1 - Z. So greedy output is exactly what full masking gives, and sampled output
follows the same distribution (top-p aside, which is applied before the grammar here).

The decode loop itself (`decode`) serves free text too, so both paths share prompt caching, sampling
and token accounting, and the benchmark compares like with like.
"""

from __future__ import annotations

import copy
import json
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from medpanel.models.local_prefix import prime, settle

# Past max_tokens, a structured reply may use this many extra tokens to close its JSON (see `decode`).
CLOSING_ALLOWANCE = 64
# Characters that end a string, an object or an array: what a reply out of budget should emit next.
_CLOSING_CHARS = frozenset(b'"}]')


@dataclass(frozen=True)
class Penalties:
    """Repetition penalties beyond OpenAI's two (which come per request): what keeps a small model from
    looping or copying its context. Every one is a deterministic function of the tokens so far, so greedy
    decoding stays repeatable. The defaults change nothing.

    repeat_penalty   llama.cpp's (CTRL's): a token seen in the last `repeat_last_n` tokens of the context
                     (prompt included) has a positive logit divided by it, a negative one multiplied.
    dry_*            DRY ("don't repeat yourself", p-e-w's sampler as in llama.cpp): a token that would extend
                     a sequence already in the context (prompt included, last `dry_last_n` tokens, -1 all) that
                     is at least `dry_allowed_length` tokens long loses dry_multiplier * dry_base ** (length -
                     dry_allowed_length) from its logit. Matches do not run across sequence breakers: control
                     tokens (the chat template's turn markers) and tokens holding any of `dry_breakers`
                     (llama.cpp's default: newline, colon, quote, asterisk). A breaker is never penalised
                     itself, so a JSON string can always be closed (llama.cpp would penalise it; here it would
                     break JSON).
    """

    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_last_n: int = -1
    dry_breakers: tuple[str, ...] = ("\n", ":", '"', "*")

    @property
    def active(self) -> bool:
        return self.repeat_penalty != 1.0 or self.dry_multiplier > 0


NO_PENALTIES = Penalties()
DRY_BREAKERS = NO_PENALTIES.dry_breakers  # llama.cpp's default sequence breakers
DRY_MAX_MATCH = 64  # longer matches are penalised as this long (the penalty is enormous well before)


def breaker_mask(llama: Any, breakers: Sequence[str] = DRY_BREAKERS) -> np.ndarray:
    """True for every vocabulary token whose text holds a sequence breaker, and for control tokens."""
    import llama_cpp

    vocab = llama_cpp.llama_model_get_vocab(llama.model)
    n_vocab = int(llama.n_vocab())
    mask = np.zeros(n_vocab, dtype=bool)
    for token in range(n_vocab):
        piece = llama.detokenize([token], special=True).decode("utf-8", errors="ignore")
        mask[token] = not piece or any(b in piece for b in breakers) or bool(llama_cpp.llama_vocab_is_control(vocab, token))
    return mask


def dry_match_lengths(history: np.ndarray, breakers: np.ndarray, max_match: int = DRY_MAX_MATCH) -> dict[int, int]:
    """For each token that would continue an earlier occurrence of the context's ending: the length of the
    longest such ending (DRY's match length). Breaker tokens end a match and are never candidates."""
    n = len(history)
    if n < 2 or breakers[history[-1]]:
        return {}
    pos = np.nonzero(history[:-1] == history[-1])[0]  # earlier places where the last token occurred
    nxt = history[pos + 1]
    keep = ~breakers[nxt]
    pos, nxt = pos[keep], nxt[keep]
    if not pos.size:
        return {}
    length = np.ones(pos.size, dtype=np.int64)
    alive = np.ones(pos.size, dtype=bool)
    for k in range(1, max_match):
        tail = n - 1 - k
        if tail < 0 or breakers[history[tail]]:
            break
        back = pos - k
        alive &= back >= 0
        alive[alive] = history[back[alive]] == history[tail]
        if not alive.any():
            break
        length += alive
    out: dict[int, int] = {}
    for token, size in zip(nxt.tolist(), length.tolist()):
        if size > out.get(token, 0):
            out[token] = size
    return out


class Sampler:
    """Picks a token from logits: argmax when temperature is 0, else a seeded draw (with optional top-p).

    `penalties` (and the frequency / presence penalties) reshape the logits first; the repeat penalty and
    DRY look at the whole context, so the decode loop tells the sampler the prompt (`begin`), each token
    it picks (`record`) and each run the grammar forces (`observe`). DRY needs `breakers` (breaker_mask)."""

    def __init__(self, temperature: float = 0.0, top_p: float | None = None, seed: int | None = None,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 penalties: Penalties = NO_PENALTIES, breakers: np.ndarray | None = None) -> None:
        self.temperature = temperature
        self.top_p = top_p
        self.rng = np.random.default_rng(seed)
        self.frequency_penalty = frequency_penalty
        self.presence_penalty = presence_penalty
        self.penalties = penalties
        if penalties.dry_multiplier > 0 and breakers is None:
            raise ValueError("DRY needs the vocabulary's sequence breakers (breaker_mask)")
        self.breakers = breakers
        self.counts: dict[int, int] = {}  # how often each token was generated so far
        self.history: list[int] = []  # the context: prompt, then every token fed after it

    def begin(self, prompt: Sequence[int]) -> None:
        self.history = list(prompt)

    def observe(self, tokens: Sequence[int]) -> None:
        """Tokens that entered the context without being sampled (a grammar's forced run)."""
        self.history.extend(tokens)

    def penalise(self, logits: np.ndarray) -> np.ndarray:
        """OpenAI-style penalties over what this reply generated so far, then the repeat penalty and DRY."""
        openai = bool(self.counts) and bool(self.frequency_penalty or self.presence_penalty)
        if not openai and not self.penalties.active:
            return logits
        out = logits.copy()
        if openai:
            tokens = np.fromiter(self.counts.keys(), dtype=np.int64)
            counts = np.fromiter(self.counts.values(), dtype=np.float32)
            out[tokens] -= counts * self.frequency_penalty + self.presence_penalty
        p = self.penalties
        if p.repeat_penalty != 1.0 and p.repeat_last_n != 0 and self.history:
            recent = self.history if p.repeat_last_n < 0 else self.history[-p.repeat_last_n:]
            seen = np.unique(np.asarray(recent, dtype=np.int64))
            values = out[seen]
            out[seen] = np.where(values > 0, values / p.repeat_penalty, values * p.repeat_penalty)
        if p.dry_multiplier > 0 and len(self.history) > 1:
            window = self.history if p.dry_last_n < 0 else self.history[-p.dry_last_n:]
            for token, length in dry_match_lengths(np.asarray(window, dtype=np.int64), self.breakers).items():
                if length >= p.dry_allowed_length:
                    out[token] -= p.dry_multiplier * p.dry_base ** (length - p.dry_allowed_length)
        return out

    def record(self, token: int) -> None:
        self.counts[token] = self.counts.get(token, 0) + 1
        self.history.append(token)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def __call__(self, logits: np.ndarray) -> int:
        if self.greedy:
            return int(np.argmax(logits))
        z = logits.astype(np.float64) / self.temperature
        z -= np.max(z)
        probs = np.exp(z)
        if self.top_p is not None and 0 < self.top_p < 1:
            order = np.argsort(-probs)
            cumulative = np.cumsum(probs[order])
            keep = order[: int(np.searchsorted(cumulative, self.top_p * cumulative[-1])) + 1]
            return int(keep[self.rng.choice(len(keep), p=probs[keep] / probs[keep].sum())])
        return int(self.rng.choice(len(probs), p=probs / probs.sum()))


class Constraint(Protocol):
    """What the decode loop needs from a grammar. `JsonConstraint` is the real one; tests may fake it."""

    def accepts(self, token: int) -> bool: ...
    def allowed(self) -> np.ndarray: ...  # bool per vocabulary entry
    def consume(self, token: int) -> None: ...


def choose_token(
    logits: np.ndarray,
    pick: Callable[[np.ndarray], int],
    constraint: Constraint | None,
    *,
    lazy: bool = True,
    tiers: Sequence[np.ndarray] = (),
) -> tuple[int, bool]:
    """The next token, and whether a full mask had to be computed.

    Rejection first: the unconstrained pick is kept when the grammar accepts it (unless `lazy` is off).
    `tiers` (bool arrays, best first) narrow the masked pick to the first tier with an allowed token;
    they steer a reply that ran out of budget towards closing its JSON, and skip the lazy check.
    """
    if constraint is None:
        return pick(logits), False
    if lazy and not tiers:
        token = pick(logits)
        if constraint.accepts(token):
            return token, False
    allowed = constraint.allowed()
    for tier in tiers:
        if np.any(allowed & tier):
            allowed = allowed & tier
            break
    if not np.any(allowed):
        raise RuntimeError("the grammar allows no token here")
    return pick(np.where(allowed, logits, -np.inf)), True


def strict_schema(schema: dict) -> dict:
    """A copy where objects that list their properties allow no others.

    JSON Schema allows extra keys by default; a small model then invents some (`"type": "diagnosis"`),
    which costs tokens and is dropped by validation anyway. Anything valid here is valid against the
    original. `allOf` branches are left alone: closing each branch would make the whole unsatisfiable.
    """

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
                out[key] = {name: walk(sub) for name, sub in value.items()}
            elif key in ("allOf", "enum", "const", "default", "examples", "required"):
                out[key] = copy.deepcopy(value)
            else:
                out[key] = walk(value)
        if isinstance(node.get("properties"), dict) and not {"additionalProperties", "patternProperties", "unevaluatedProperties"} & node.keys():
            out["additionalProperties"] = False
        return out

    return walk(schema)


class GrammarTokenizer:
    """llguidance's view of a loaded model's vocabulary, plus compiled grammars. Built once per model."""

    def __init__(self, llama: Any) -> None:
        import llama_cpp
        from llguidance.llamacpp import lltokenizer_from_vocab

        vocab = llama_cpp.llama_model_get_vocab(llama.model)
        with warnings.catch_warnings():  # the helper calls a deprecated llama.cpp getter once per token
            warnings.simplefilter("ignore", DeprecationWarning)
            self.tokenizer = lltokenizer_from_vocab(vocab)
        self.n_vocab = int(llama.n_vocab())
        self._closing_tiers()

    def _closing_tiers(self) -> None:
        """Tokens that end something: inside a string only a quote closes it (a bare `}` there is just
        text); outside one a quote would open a new string, while a bracket closes and an empty `[]`/`{}`
        completes a value. A plain letter tells the two places apart. Needs `tokenizer` and `n_vocab`."""
        quote_first = np.zeros(self.n_vocab, dtype=bool)
        brackets = np.zeros(self.n_vocab, dtype=bool)
        empties = np.zeros(self.n_vocab, dtype=bool)
        for token in range(min(self.n_vocab, self.tokenizer.vocab_size)):
            piece = self.tokenizer.decode_bytes([token])
            if piece and set(piece) <= _CLOSING_CHARS:
                (quote_first if piece[:1] == b'"' else brackets)[token] = True
            elif piece.strip(b" ") in (b"[]", b"{}", b'""'):
                empties[token] = True
        self.quote_tiers = (quote_first, brackets)
        self.bracket_tiers = (brackets, empties, quote_first)
        self.letter = self.tokenizer.tokenize_str("a")[0]
        self._grammars: dict[str, str] = {}

    def grammar(self, schema: dict) -> str:
        import llguidance

        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            # Fixed separators and no free whitespace: fewer choices for the model, longer forced runs,
            # and no runaway newlines. `lenient` skips keywords llguidance cannot enforce; the caller
            # still validates the reply against the full schema.
            options = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", "lenient": True}
            self._grammars[key] = llguidance.LLMatcher.grammar_from_json_schema(strict_schema(schema), overrides=options)
        return self._grammars[key]

    def constraint(self, schema: dict) -> "JsonConstraint":
        return JsonConstraint(self, schema)


class JsonConstraint:
    """One reply's grammar state."""

    def __init__(self, tokens: GrammarTokenizer, schema: dict) -> None:
        import llguidance

        self.tokens = tokens
        self.matcher = llguidance.LLMatcher(tokens.tokenizer, tokens.grammar(schema), log_level=0)
        if self.matcher.is_error():
            raise ValueError(f"cannot compile the schema into a grammar: {self.matcher.get_error()}")

    @property
    def done(self) -> bool:
        return self.matcher.is_stopped()

    @property
    def accepting(self) -> bool:
        return self.matcher.is_accepting()

    def closing_tiers(self) -> tuple[np.ndarray, ...]:
        """Which tokens to prefer when the reply must end soon (see GrammarTokenizer)."""
        in_string = self.accepts(self.tokens.letter)
        return self.tokens.quote_tiers if in_string else self.tokens.bracket_tiers

    def forced(self) -> list[int]:
        return self.matcher.compute_ff_tokens()

    def accepts(self, token: int) -> bool:
        return self.matcher.validate_tokens([token]) == 1

    def allowed(self) -> np.ndarray:
        bits = np.unpackbits(np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        allowed = np.zeros(self.tokens.n_vocab, dtype=bool)
        n = min(self.tokens.n_vocab, bits.size)
        allowed[:n] = bits[:n].astype(bool)
        return allowed

    def consume(self, token: int) -> None:
        if not self.matcher.consume_token(token):
            raise RuntimeError(f"the grammar rejected token {token}: {self.matcher.get_error()}")

    def consume_all(self, tokens: Sequence[int]) -> None:
        if not self.matcher.consume_tokens(list(tokens)):
            raise RuntimeError(f"the grammar rejected forced tokens: {self.matcher.get_error()}")


@dataclass
class DecodeResult:
    text: str
    tokens: list[int]
    prompt_tokens: int
    finish_reason: str  # "stop" (end of turn, grammar end or stop string) or "length"
    masks: int = 0  # steps that needed a full token mask
    forced: int = 0  # tokens fed as grammar-forced runs
    seconds: float = 0.0
    reused: int = 0  # prompt tokens whose KV state was already in the context (not evaluated again)

    @property
    def evaluated(self) -> int:
        """Prompt tokens this call evaluated."""
        return self.prompt_tokens - self.reused


def decode(
    llama: Any,
    prompt: Sequence[int],
    *,
    max_tokens: int,
    sampler: Sampler,
    constraint: JsonConstraint | None = None,
    stop: Sequence[str] = (),
    deadline: float | None = None,
    lazy: bool = True,
) -> DecodeResult:
    """Generate after `prompt` on a llama_cpp.Llama. The caller holds the model's lock.

    With a constraint, max_tokens is a soft limit: a reply still inside its JSON at the limit gets up
    to CLOSING_ALLOWANCE more tokens, steered to closing quotes and brackets, so it always parses.
    `lazy=False` masks every step (only for measuring what rejection-first saves).
    """
    started = time.perf_counter()
    n_ctx = llama.n_ctx()
    if len(prompt) >= n_ctx:
        raise OverflowError(f"the prompt has {len(prompt)} tokens but the context holds {n_ctx}")
    room = n_ctx - len(prompt)
    limit = min(room, max_tokens + (CLOSING_ALLOWANCE if constraint is not None else 0))
    reused = prime(llama, prompt)
    try:
        return _generate(llama, prompt, reused, started, limit, max_tokens, sampler, constraint, stop, deadline, lazy)
    finally:
        settle(llama, prompt, reused)


def _generate(llama: Any, prompt: Sequence[int], reused: int, started: float, limit: int, max_tokens: int, sampler: Sampler,
              constraint: JsonConstraint | None, stop: Sequence[str], deadline: float | None, lazy: bool) -> DecodeResult:
    """The decode loop proper, after the prompt (see `decode`)."""
    import llama_cpp

    vocab = llama_cpp.llama_model_get_vocab(llama.model)
    n_vocab = llama.n_vocab()
    sampler.begin(prompt)

    out: list[int] = []
    pieces = bytearray()
    longest_stop = max((len(s.encode()) for s in stop), default=0)
    finish, masks, forced = "length", 0, 0
    while len(out) < limit:
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"generation passed its deadline after {len(out)} tokens")
        if constraint is not None:
            if constraint.done:
                finish = "stop"
                break
            run = constraint.forced()[: limit - len(out)]
            if run:  # bytes the grammar dictates: one batched eval instead of a step per token
                constraint.consume_all(run)
                out.extend(run)
                sampler.observe(run)
                forced += len(run)
                if not constraint.done and len(out) < limit:
                    llama.eval(run)
                continue
        logits = sampler.penalise(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llama.ctx, -1), shape=(n_vocab,)))
        closing = constraint is not None and len(out) >= max_tokens
        tiers = constraint.closing_tiers() if closing else ()
        token, masked = choose_token(logits, sampler, constraint, lazy=lazy, tiers=tiers)
        masks += masked
        if llama_cpp.llama_vocab_is_eog(vocab, token):
            finish = "stop"
            break
        if constraint is not None:
            constraint.consume(token)
        out.append(token)
        sampler.record(token)
        if stop and constraint is None:  # stop strings would cut JSON short, so they apply to free text only
            pieces += llama.detokenize([token])
            tail = pieces[-(longest_stop + 16) :].decode("utf-8", errors="ignore")
            if any(s in tail for s in stop):
                finish = "stop"
                break
        if len(out) < limit and not (constraint is not None and constraint.done):
            llama.eval([token])
    else:
        if constraint is not None and constraint.done:
            finish = "stop"

    text = llama.detokenize(out).decode("utf-8", errors="ignore")
    if stop and constraint is None:
        cuts = [text.find(s) for s in stop if s and s in text]
        if cuts:
            text, finish = text[: min(cuts)], "stop"
    return DecodeResult(text, out, len(prompt), finish, masks, forced, time.perf_counter() - started, reused)
