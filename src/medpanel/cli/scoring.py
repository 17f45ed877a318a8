"""`medpanel score format|reward|text`: judge-free scoring of a Board Simulation response, and text metrics."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from medpanel.cli.common import JsonOpt, out, print_json, score_app, styled
from medpanel.errors import UsageError

PresetOpt = Annotated[str, typer.Option("--preset", envvar="MEDPANEL_REWARD_PRESET",
                                        help="Scoring rules: released_code (OpenTumorBoard's reward code) or paper (its appendix E.2).")]
TokensOpt = Annotated[Optional[int], typer.Option("--tokens", envvar="MEDPANEL_RESPONSE_TOKENS", min=0,
                                                  help="The response's length in model tokens, for the overlength penalty (default: word tokens, an approximation).")]
TruncatedOpt = Annotated[bool, typer.Option("--truncated", envvar="MEDPANEL_TRUNCATED", help="The generation stopped at its token limit.")]
ResponseArg = Annotated[str, typer.Argument(help="File holding one response; - reads standard input.")]
LimitOpt = Annotated[Optional[int], typer.Option("--length-limit", envvar="MEDPANEL_LENGTH_LIMIT", min=1,
                                                 help="The generation's max tokens, when below 8192: the overlength ramp ends there.")]
DetectorOpt = Annotated[Optional[str], typer.Option("--detector", envvar="MEDPANEL_REPETITION_DETECTOR",
                                                    help="Loop detector: released_grid (the release's scanner) or every_offset (stricter). Default: the preset's.")]
ReaderOpt = Annotated[Optional[str], typer.Option("--reader", envvar="MEDPANEL_BOARD_READER",
                                                  help="Evaluation reader reported beside the score: released or lenient. Default: the preset's.")]


KeepNewlineOpt = Annotated[bool, typer.Option("--keep-final-newline", envvar="MEDPANEL_KEEP_FINAL_NEWLINE",
                                               help="Score the input's final newline as part of the response (by default it is dropped: text files end with one).")]


def _read_response(file: str, keep_final_newline: bool) -> str:
    # Bytes, decoded: text mode would turn "\r\n" into "\n" and change what the format term scores.
    if file == "-":
        raw = sys.stdin.buffer.read()
    else:
        path = Path(file)
        if not path.is_file():
            raise UsageError(f"Response file {path} does not exist.", "Give a file holding the model's response, or - for standard input.")
        raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    # One final line end belongs to the file, not to the model's reply; stray whitespace beyond it is scored.
    if keep_final_newline:
        return text
    return text[:-2] if text.endswith("\r\n") else text.removesuffix("\n")


def _text_arg(value: str, name: str) -> str:
    """TEXT, or @FILE for a file's contents."""
    if value.startswith("@"):
        path = Path(value[1:])
        if not path.is_file():
            raise UsageError(f"{name} file {path} does not exist.", f"Write {name} as text, or @FILE naming an existing file.")
        return path.read_text(encoding="utf-8", errors="replace")
    return value


def _format_overrides(detector: str | None, reader: str | None) -> dict:
    from medpanel.scoring.board_format import READERS

    if detector not in (None, "released_grid", "every_offset"):
        raise UsageError(f"Unknown repetition detector '{detector}'.", "Use --detector released_grid or --detector every_offset.")
    if reader not in (None, *READERS):
        raise UsageError(f"Unknown board reader '{reader}'.", f"Use --reader {' or --reader '.join(READERS)}.")
    return ({"repetition_detector": detector} if detector else {}) | ({"evaluation_reader": reader} if reader else {})


def _format_settings(preset: str, detector: str | None = None, reader: str | None = None):
    from medpanel.scoring.board_format import FormatSettings

    return FormatSettings.for_preset(preset, **_format_overrides(detector, reader))


def _print_format(result) -> None:
    out.print(f"format score {result.score:.4f}  (base {result.base:.4f} from dense {result.dense:.4f} and exact "
              f"{'yes' if result.exact else 'no'}; preset {result.preset})")
    table = Table("component", "credit", "weight")
    for name, value in result.components.items():
        table.add_row(name, f"{value:.3f}", f"{result.weights.get(name, 0.0):.4f}")
    out.print(table)
    rep, length = result.repetition, result.length
    out.print(f"repetition ({rep.detector} detector): longest run {rep.max_run}, top 4-gram {rep.ngram_count}x ({rep.ngram_fraction:.1%} of {rep.tail_tokens} tail tokens)"
              f" -> {'loop' if rep.detected else 'none'}{' (severe)' if rep.severe else ''}, penalty {rep.penalty:.4f}")
    out.print(f"length: {length.tokens} tokens ({length.source}), overlength penalty {length.penalty:.4f}"
              + (f" ({length.note})" if length.note else ""))
    if result.failure:
        out.print(styled(("failure:", "bold red"), f" {result.failure} (the reward skips the judges)"))
    parse = result.parse
    out.print(f"evaluation reader ({parse.reader}): {parse.status}, {len(parse.turns)} turns, {parse.role_count} roles"
              + (f"; warnings: {'; '.join(parse.warnings)}" if parse.warnings else ""))


@score_app.command("format")
def format_command(file: ResponseArg, preset: PresetOpt = "released_code", tokens: TokensOpt = None, length_limit: LimitOpt = None,
                   truncated: TruncatedOpt = False, detector: DetectorOpt = None, reader: ReaderOpt = None,
                   keep_final_newline: KeepNewlineOpt = False, as_json: JsonOpt = False) -> None:
    """Format score of one Board Simulation response (no judge): dense parts, exact part, repetition and overlength."""
    from medpanel.scoring.board_format import score_format

    result = score_format(_read_response(file, keep_final_newline), settings=_format_settings(preset, detector, reader),
                          response_tokens=tokens, length_limit=length_limit, truncated=truncated)
    if as_json:
        print_json(result.model_dump() | {"needs_judges": result.needs_judges})
        return
    _print_format(result)


@score_app.command("reward")
def reward_command(
    file: ResponseArg,
    alignment: Annotated[Optional[float], typer.Option("--alignment", envvar="MEDPANEL_ALIGNMENT", min=1, max=5, help="Conclusion-alignment judge score, 1..5.")] = None,
    decisions: Annotated[Optional[float], typer.Option("--decisions", envvar="MEDPANEL_DECISIONS", min=0, max=5, help="Weighted mean of the in-scope four-decision scores, 0..5 (omit: none in scope).")] = None,
    consistency: Annotated[Optional[float], typer.Option("--consistency", envvar="MEDPANEL_CONSISTENCY", min=0, max=5, help="Discussion-to-conclusion consistency judge score, 0..5.")] = None,
    preset: PresetOpt = "released_code",
    tokens: TokensOpt = None,
    length_limit: LimitOpt = None,
    truncated: TruncatedOpt = False,
    detector: DetectorOpt = None,
    reader: ReaderOpt = None,
    keep_final_newline: KeepNewlineOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """The Dr.GRPO reward of one response from the judges' numbers; a response the format gate fails needs none."""
    from medpanel.scoring.reward import JudgeScores, RewardSettings, board_reward

    judges = None
    if alignment is not None or consistency is not None:
        if alignment is None or consistency is None:
            raise UsageError("Give both --alignment and --consistency (and --decisions when a decision is in scope).",
                             "Or give none of them for a response that fails the format gate.")
        judges = JudgeScores(alignment=alignment, decisions=decisions, consistency=consistency)
    settings = RewardSettings.for_preset(preset)
    settings = settings.model_copy(update={"format": settings.format.model_copy(update=_format_overrides(detector, reader))})
    result = board_reward(_read_response(file, keep_final_newline), judges, settings=settings, response_tokens=tokens,
                          length_limit=length_limit, truncated=truncated)
    if as_json:
        print_json(result.model_dump())
        return
    out.print(f"reward {result.reward:.4f} = match {result.match:.4f} + {settings.format_weight:g} x format {result.format.score:.4f}"
              f"  ({'judged' if result.judged else 'no judge: ' + (result.format.failure or 'no conclusion')}; preset {result.preset})")
    if result.judged:
        out.print(f"alignment {result.alignment:.4f}, decisions {result.decisions:.4f}, consistency {result.consistency:.4f}, support {result.support:.4f}")


@score_app.command("text")
def text_command(
    candidate: Annotated[str, typer.Option("--candidate", "-c", envvar="MEDPANEL_CANDIDATE", help="Candidate text, or @FILE.")],
    reference: Annotated[str, typer.Option("--reference", "-r", envvar="MEDPANEL_REFERENCE", help="Reference text, or @FILE.")],
    with_bertscore: Annotated[bool, typer.Option("--bertscore", envvar="MEDPANEL_BERTSCORE", help="Also compute BERTScore (offline MiniLM; slower).")] = False,
    layers: Annotated[int, typer.Option("--layers", envvar="MEDPANEL_BERTSCORE_LAYERS", min=1, max=6, help="MiniLM layer whose embeddings BERTScore matches.")] = 6,
    as_json: JsonOpt = False,
) -> None:
    """ROUGE-L (and optionally BERTScore) of a candidate against a reference."""
    from medpanel.scoring.text import bertscore, rouge_l

    cand, ref = _text_arg(candidate, "--candidate"), _text_arg(reference, "--reference")
    data: dict = {"rouge_l": rouge_l(cand, ref).model_dump()}
    if with_bertscore:
        bs = bertscore([cand], [ref], layers=layers)
        data["bertscore"] = {"precision": bs.precision[0], "recall": bs.recall[0], "f1": bs.f1[0], "model": bs.model,
                             "layer": bs.layer, "note": bs.note}
    if as_json:
        print_json(data)
        return
    r = data["rouge_l"]
    out.print(f"ROUGE-L  P {r['precision']:.4f}  R {r['recall']:.4f}  F1 {r['f1']:.4f}")
    if with_bertscore:
        b = data["bertscore"]
        out.print(f"BERTScore  P {b['precision']:.4f}  R {b['recall']:.4f}  F1 {b['f1']:.4f}")
        out.print(b["note"])
