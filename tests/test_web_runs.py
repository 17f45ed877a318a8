"""The run pages of the web app, on real runs made by the real runner with scripted models in a real SQLite
store, served over HTTP on loopback (and opened in headless Chromium at the end).

The runs: a `single` run with a failed item and a case whose reply holds a script tag; a `debate` run
(agreement after one round, a tie, and a seat that fails mid-debate); a `board` run whose conclusion holds a
script tag; and, where the ICD-10 table is present, a consult `baseline` run with codes.
"""

from __future__ import annotations

import asyncio
import re
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
from web_support import browser_page, screenshot, serving

from medpanel.cases import Case, Reference, data_dir
from medpanel.errors import ModelCallError
from medpanel.models import Runtime
from medpanel.models.pricing import PriceTable
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel
from medpanel.runs.report import build_report
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.store import Store
from medpanel.web.app import create_app
from medpanel.web.config import WebConfig
from medpanel.web.templating import dollars

SCRIPT = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
SINGLE, DEBATE, BOARD, CONSULT = "20240501-single-a1b2", "20240501-debate-c3d4", "20240502-board-e5f6", "20240503-consult-0a0b"
XSS_ID = f"x {SCRIPT}"  # an item id with a space, angle brackets and a slash: quoted in links, escaped on the page
TEMPLATES = Path(__file__).resolve().parents[1] / "src" / "medpanel" / "web" / "templates"
HAS_ICD10 = (data_dir() / "icd10cm").is_dir()


# ---------------------------------------------------------------- the runs


def single_cases() -> list[Case]:
    options = {"A": "yes", "B": "no"}
    cases = [Case(id=f"q0{i}", question=f"Question {i}?", options=options, reference=Reference(answer="A")) for i in range(1, 5)]
    cases.append(Case(id=XSS_ID, question=f"The note reads {SCRIPT}. Is it benign?", options=options, reference=Reference(answer="A")))
    return cases


def single_responder(request):
    last = request.messages[-1].content
    if "Question 3?" in last:
        raise ModelCallError("the server refused the request", kind="refused")
    if SCRIPT in last:
        return f"The note quotes {SCRIPT} and <img src=x onerror=alert(2)>: markup, not a finding.\nAnswer: A"
    return "Answer: B" if "Question 4?" in last else "Answer: A"


def seat(name: str, *script, runtime: Runtime | None = None) -> ScriptedModel:
    replies = [f"{name} weighs the options (round {i}).\nAnswer: {s}" if isinstance(s, str) and len(s) == 1 else s
               for i, s in enumerate(script)]
    return ScriptedModel(replies, name=name, runtime=runtime)


async def make_runs(path: Path) -> None:
    store = Store(path)
    prices = PriceTable({"good": (1.0, 2.0), "x": (0.5, 1.0), "y": (0.5, 1.0), "z": (0.5, 1.0), "writer": (2.0, 4.0), "physician": (1.0, 1.0)})
    try:
        runtime = Runtime(cache=store, prices=prices)
        good = ScriptedModel(name="good", responder=single_responder, runtime=runtime)
        config = RunConfig(dataset="inline-mcq", protocol="single", models=["scripted:good"], concurrency=1,
                           roles={"judge": "scripted:echo"})  # recorded with the run; no case here needs a judge
        await run_benchmark(store, config, runtime, run_id=SINGLE, panel=Panel.of([good]), cases=single_cases())

        # q1: y moves C -> B in round 1 (agreement); q2: B C D throughout (a tie, abstain);
        # q3: y's server refuses in round 1 (the item fails; its first answers stay on record).
        refused = ModelCallError("server refused the request", kind="bad_request")
        scripts = {"x": ["B", "B"] + ["B"] * 4 + ["B", "B"],
                   "y": ["C", f"I read {SCRIPT} as noise; B fits the labs.\nAnswer: B"] + ["C"] * 4 + ["C", refused],
                   "z": ["B", "B"] + ["D"] * 4 + ["B", "B"]}
        runtime = Runtime(cache=store, prices=prices)
        seats = [seat(n, *s, runtime=runtime) for n, s in scripts.items()]
        question = dict(question="Which drug?", options={"A": "alpha", "B": "beta", "C": "gamma", "D": "delta"}, reference=Reference(answer="B"))
        config = RunConfig(dataset="inline-debate", protocol="debate", models=["x", "y", "z"], concurrency=1)
        await run_benchmark(store, config, runtime, run_id=DEBATE, panel=Panel.of(seats, names=list(scripts)),
                            cases=[Case(id=f"q{i}", **question) for i in (1, 2, 3)])

        meeting = ("<discussion>\n<turn 1> Moderator: We present a 64-year-old with rectal cancer.\n"
                   f"<turn 2> Radiologist: MRI shows a T3 tumour; the report quotes {SCRIPT} verbatim.\n"
                   "<turn 3> Medical Oncologist: Total neoadjuvant therapy is reasonable.\n</discussion>\n"
                   f"<conclusion>Start total neoadjuvant therapy {SCRIPT}, then restage with MRI.</conclusion>")
        runtime = Runtime(cache=store, prices=prices)
        writer = ScriptedModel(name="writer", responder=lambda r: meeting, runtime=runtime)
        case = Case(id="tb1", summary=f"A 64-year-old man with rectal adenocarcinoma. Note: {SCRIPT}",
                    reference=Reference(conclusion="Total neoadjuvant therapy, then restaging MRI."))
        config = RunConfig(dataset="inline-board", protocol="board", models=["scripted:writer"], concurrency=1)
        await run_benchmark(store, config, runtime, run_id=BOARD, panel=Panel.of([writer]), cases=[case])

        if HAS_ICD10:
            runtime = Runtime(cache=store, prices=prices)
            physician = ScriptedModel([{"diagnosis": f"Acute pyelonephritis {SCRIPT}", "codes": ["N10", "R50.9"]}], name="physician", runtime=runtime)
            case = Case(id="pyelo", chief_complaint="Fever and right flank pain", reference=Reference(codes=["N10", "N39.0"]))
            config = RunConfig(dataset="inline-consult", protocol="baseline", models=["scripted:physician"], concurrency=1)
            await run_benchmark(store, config, runtime, run_id=CONSULT, panel=Panel.of([physician]), cases=[case])
    finally:
        store.close()


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("web_runs") / "medpanel.db"
    asyncio.run(make_runs(path))
    return path


@pytest.fixture(scope="module")
def base(store_path):
    with serving(create_app(WebConfig(store_path=store_path))) as url:
        yield url


def get(base: str, path: str) -> tuple[int, str]:
    request = urllib.request.Request(base + path, headers={"Accept": "text/html"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8")


def item_path(run_id: str, item_id: str, repeat: int = 0) -> str:
    return f"/runs/{run_id}/items/{quote(item_id, safe='')}?repeat={repeat}"


def text_of(html: str) -> str:
    """The page's visible text, roughly: tags dropped, whitespace collapsed (entities kept)."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def assert_safe(html: str) -> None:
    """No model or case markup got through, and nothing is shown as a JSON or Python dump."""
    assert SCRIPT not in html and "<img src=x" not in html
    assert "<script" not in html.replace('<script src="/static/htmx.min.js" defer></script>', "")
    for dump in ('{"', "{&#34;", "{'", "{&#39;", "[{"):
        assert dump not in html, f"raw structured data ({dump}) on the page"


# ---------------------------------------------------------------- /runs


def test_runs_list_shows_every_run_newest_first(base, store_path):
    status, html = get(base, "/runs")
    assert status == 200
    assert_safe(html)
    ids = [SINGLE, DEBATE, BOARD] + ([CONSULT] if HAS_ICD10 else [])
    positions = [html.index(f'href="/runs/{run_id}"') for run_id in ids]
    assert positions == sorted(positions, reverse=True)  # the last made is listed first
    page = text_of(html)
    for words in ("single", "debate", "board", "inline-mcq", "scripted:good", "scripted:writer"):
        assert words in page
    row = html[html.index(f'href="/runs/{SINGLE}"'):].split("</tr>")[0]
    assert 'class="badge done_with_failures"' in row and "4 done" in text_of(row) and "1 failed" in text_of(row)
    store = Store(store_path, create=False)
    try:
        cost = next(r["cost_usd"] for r in store.list_runs() if r["id"] == SINGLE)
    finally:
        store.close()
    assert cost > 0 and f'<td class="num">{dollars(cost)}</td>' in row  # what it cost, in dollars
    debate_row = html[html.index(f'href="/runs/{DEBATE}"'):].split("</tr>")[0]
    assert "2 done" in text_of(debate_row) and "1 failed" in text_of(debate_row)
    assert get(base, "/runs?limit=many")[0] == 400
    status, one = get(base, "/runs?limit=1")
    assert status == 200 and one.count('class="mono run-link"') == 1 and "Showing the newest 1 runs" in one


# ---------------------------------------------------------------- /runs/{run_id}


def test_run_page_header_summary_failures_and_items(base, store_path):
    status, html = get(base, f"/runs/{SINGLE}")
    assert status == 200
    assert_safe(html)
    page = text_of(html)
    assert "single on inline-mcq" in page and "scripted:good" in page and "done with failures" in page
    roles = html[html.index("<dt>Roles</dt>"):].split("</dd>")[0]
    assert "judge" in roles and "scripted:echo" in roles
    assert "1 of 5 items failed" in page  # the run's message
    # the summary: accuracy over the 4 finished items (3 right), with the report's own Wilson interval
    store = Store(store_path, create=False)
    try:
        report = build_report(store, [SINGLE])["runs"][0]
    finally:
        store.close()
    acc = report["scores"]["accuracy"]["overall"]
    assert acc["estimate"] == 0.75 and acc["n"] == 4 and acc["method"] == "wilson"
    row = html[html.index("<td>accuracy</td>"):].split("</tr>")[0]
    assert f"{acc['low']:.3f} – {acc['high']:.3f}" in text_of(row) and "wilson" in row and "0.750" in row
    assert "Failed items are left out of every score" in page
    # failures grouped by kind, with their error and a link to the item
    failures = html[html.index("<h2>Failures</h2>"):html.index("<h2>Items</h2>")]
    assert "refused" in failures and "the server refused the request" in failures
    assert f'href="{item_path(SINGLE, "q03")}"' in failures
    # tokens, dollars and seconds per item and in total
    assert "tokens per finished item" in page and "per finished item" in page and "Whole run:" in page
    assert f"{report['cost_usd']['total']:.4f}" in page
    # every item listed with its status, main score and a link
    items = html[html.index("<h2>Items</h2>"):]
    for item_id in ("q01", "q02", "q03", "q04", XSS_ID):
        assert f'href="{item_path(SINGLE, item_id)}"' in items
    assert "<th class=\"num\">accuracy</th>" in items
    q04 = items[items.index(f'href="{item_path(SINGLE, "q04")}"'):].split("</tr>")[0]
    assert 'class="badge done"' in q04 and '<td class="answer-cell">B</td>' in q04
    q03 = items[items.index(f'href="{item_path(SINGLE, "q03")}"'):].split("</tr>")[0]
    assert 'class="badge failed"' in q03 and "refused" in q03
    assert f'href="/runs/{SINGLE}/report"' in html


def test_run_page_names_roles_and_debate_scores(base):
    status, html = get(base, f"/runs/{DEBATE}")
    assert status == 200
    assert_safe(html)
    page = text_of(html)
    assert "debate on inline-debate" in page and all(m in page for m in ("x", "y", "z"))
    assert "bad_request" in page and "Seat &#39;y&#39;" in html  # the failed item's error, escaped
    for score in ("accuracy", "initial_consensus", "stance_shifts", "rounds_used"):
        assert f"<td>{score}</td>" in html
    assert "<dt>Roles</dt>" not in html  # a run with no roles beyond its seats shows none
    status, board = get(base, f"/runs/{BOARD}")
    assert status == 200 and "rouge_l" in board and "board on inline-board" in text_of(board)
    assert_safe(board)


def test_run_ids_by_prefix_last_and_unknown(base):
    status, html = get(base, "/runs/20240501-s")
    assert status == 200 and "single on inline-mcq" in text_of(html) and f'href="{item_path(SINGLE, "q01")}"' in html
    status, html = get(base, "/runs/last")
    newest = CONSULT if HAS_ICD10 else BOARD
    assert status == 200 and f'href="/runs/{newest}/report"' in html
    status, html = get(base, "/runs/20240501")
    assert status == 400 and "matches more than one run" in html and 'href="/runs"' in html
    status, html = get(base, "/runs/no-such-run")
    assert status == 404 and "There is no run &#39;no-such-run&#39;" in html and 'href="/runs"' in html
    assert "Traceback" not in html
    status, html = get(base, "/runs/" + quote("<img src=x onerror=alert(3)>", safe=""))
    assert status == 404 and "&lt;img src=x onerror=alert(3)&gt;" in html and "<img src=x" not in html
    assert get(base, f"/runs/{SINGLE}?page=0")[0] == 400
    assert get(base, f"/runs/{SINGLE}?page=9")[0] == 404


# ---------------------------------------------------------------- /runs/{run_id}/items/{item_id}


def test_item_page_transcript_outcome_and_scores(base):
    status, html = get(base, item_path(SINGLE, "q01"))
    assert status == 200
    assert_safe(html)
    page = text_of(html)
    card = html[html.index('<article class="turn"'):].split("</article>")[0]
    assert 'class="speaker">scripted:good' in card and 'class="model">scripted:good' in card
    assert "round 0" not in card and "answer ·" in text_of(card)  # its phase; no round in a one-turn protocol
    assert re.search(r"\d+ in / 2 out tokens", text_of(card)) and "$0.0" in card
    assert '<div class="text">Answer: A</div>' in card
    assert "answer A" in card  # the parsed choice, as a chip
    outcome = html[html.index("<h2>Outcome</h2>"):html.index("<h2>Scores</h2>")]
    assert '<div class="answer">A</div>' in outcome and "answer status" in outcome  # data as a definition list
    assert "<dl class=\"kv\">" in outcome
    scores = html[html.index("<h2>Scores</h2>"):]
    assert "<td>accuracy</td><td class=\"num\">1</td>" in scores
    assert "Back to run" not in page  # a page that exists has no problem text
    assert f'href="/runs/{SINGLE}"' in html


def test_script_in_a_case_and_a_reply_is_shown_as_text(base):
    status, html = get(base, item_path(SINGLE, XSS_ID))
    assert status == 200
    assert_safe(html)
    assert html.count(ESCAPED) >= 3  # the id in the heading and crumbs, and the reply
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    status, board = get(base, item_path(BOARD, "tb1"))
    assert status == 200
    assert_safe(board)
    conclusion = board[board.index('<div class="label">Conclusion</div>'):].split("</div>")[1]
    assert f"Start total neoadjuvant therapy {ESCAPED}, then restage with MRI." in conclusion
    assert "The model's whole reply, as written" in board  # the raw meeting, in a <details>, escaped
    assert 'class="turn moderator"' in board and "Radiologist" in board
    assert '<article class="turn conclusion"' in board


def test_failed_item_shows_its_error(base):
    status, html = get(base, item_path(SINGLE, "q03"))
    assert status == 200
    assert_safe(html)
    error = html[html.index('class="notice bad item-error"'):].split("</div>\n</div>")[0]
    assert "This item failed (refused)" in text_of(error) and "the server refused the request" in error
    assert '<article class="turn error"' in html and '<span class="chip bad">refused</span>' in html
    assert "None: a failed item is not scored." in html
    assert "No outcome: the item failed before it reached one." in html


def test_debate_items_show_the_summary_first_and_the_log_in_details(base):
    status, html = get(base, item_path(DEBATE, "q1"))
    assert status == 200
    assert_safe(html)
    summary, log = html.index("<h2>Debate summary</h2>"), html.index('<details class="full-log">')
    assert summary < log and html.index("<h2>Outcome</h2>") < log
    grid = html[html.index('<table class="debate-grid">'):].split("</table>")[0]
    rows = [text_of(r) for r in grid.split("<tr>")[2:]]
    assert rows[0].startswith("first answers B C B") and "no agreement" in rows[0]
    assert rows[1].startswith("round 1 B B changed B") and "agreed on B" in rows[1]
    assert "The panel agreed on B in debate round 1." in html
    assert "changed from <strong>C</strong> to <strong>B</strong> in round 1" in html
    events = html[log:]
    assert events.count("<article ") == 3 + 3 + 1 + 1  # 6 turns, 1 shift note, 1 decision
    assert '<article class="turn note"' in events and '<article class="turn conclusion"' in events
    assert f"I read {ESCAPED} as noise" in events and '<span class="chip changed">changed from C</span>' in events
    assert "<td>accuracy</td><td class=\"num\">1</td>" in html and "<td>stance_shifts</td><td class=\"num\">1</td>" in html

    status, tie = get(base, item_path(DEBATE, "q2"))
    assert status == 200 and "the vote tied between B, C, D" in tie and "tie policy &#39;abstain&#39;: no answer" in tie
    assert tie.count('<span class="badge">no agreement</span>') == 4  # first answers and 3 rounds
    assert '<div class="answer muted">no answer</div>' in tie and '<article class="turn vote"' in tie

    status, failed = get(base, item_path(DEBATE, "q3"))
    assert status == 200
    assert_safe(failed)
    assert "This item failed (bad_request)" in text_of(failed) and "Seat &#39;y&#39;" in failed
    grid = failed[failed.index('<table class="debate-grid">'):].split("</table>")[0]
    assert text_of(grid.split("<tr>")[2]).startswith("first answers B C B")  # rebuilt from the turns on record
    assert "The debate did not finish" in failed


def test_bad_item_addresses_get_clear_pages(base):
    status, html = get(base, f"/runs/{SINGLE}/items/q01?repeat=abc")
    assert status == 400 and "repeat must be a whole number" in html and "&#39;abc&#39;" in html
    assert f'href="/runs/{SINGLE}"' in html and "Traceback" not in html
    assert get(base, f"/runs/{SINGLE}/items/q01?repeat=-1")[0] == 400
    assert get(base, f"/runs/{SINGLE}/items/q01?repeat=%C2%B2")[0] == 400  # '²' is a digit to Python, not a number
    status, html = get(base, f"/runs/{SINGLE}/items/q01?repeat=5")
    assert status == 404 and "has no repeat 5" in html and "It has repeat 0." in html
    status, html = get(base, f"/runs/{SINGLE}/items/nope")
    assert status == 404 and "has no item &#39;nope&#39;" in html and f'href="/runs/{SINGLE}"' in html
    status, html = get(base, "/runs/nope/items/q01")
    assert status == 404 and "There is no run" in html
    status, html = get(base, "/runs/20240501-s/items/q01")  # a prefix works here too
    assert status == 200 and '<div class="answer">A</div>' in html


@pytest.mark.skipif(not HAS_ICD10, reason=f"the ICD-10 table is not at {data_dir() / 'icd10cm'} (set MEDPANEL_DATA_DIR)")
def test_codes_are_listed_not_dumped(base):
    status, html = get(base, item_path(CONSULT, "pyelo"))
    assert status == 200
    assert_safe(html)
    assert '<div class="label">Diagnosis</div>' in html and f"Acute pyelonephritis {ESCAPED}" in html
    assert "<dt>diagnosis</dt>" not in html[html.index("<h2>Outcome</h2>"):html.index("<h2>Scores</h2>")]  # shown once
    assert "Written as structured fields" in html  # the JSON reply laid out as fields
    codes = html[html.index('<ul class="codes">'):].split("</ul>")[0]
    assert '<li class="mono">N10</li>' in codes and '<li class="mono">R50.9</li>' in codes
    assert "<td>code_f1</td>" in html


# ---------------------------------------------------------------- /runs/{run_id}/report


def test_report_page_embeds_the_report(base):
    status, html = get(base, f"/runs/{SINGLE}/report")
    assert status == 200
    assert re.search(r"<div class=[\"']mp-report[\"']>", html)
    assert SCRIPT not in html
    assert get(base, "/runs/nope/report")[0] == 404
    assert get(base, f"/runs/{SINGLE}/report?seed=x")[0] == 400


def test_safe_filter_only_on_the_report_fragment():
    """Only the report body (built escaped by report_html) is marked safe; model text never is."""
    uses = {path.relative_to(TEMPLATES).as_posix(): path.read_text().count("|safe") + path.read_text().count("| safe")
            for path in (TEMPLATES / "runs").glob("*.html")}
    assert {name: n for name, n in uses.items() if n} == {"runs/report.html": 1}
    assert "Markup(" not in (TEMPLATES.parent / "runs.py").read_text()


# ---------------------------------------------------------------- in a browser


def test_pages_in_a_headless_browser(base):
    dialogs: list[str] = []
    with browser_page() as page:
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

        page.goto(base + "/runs")
        assert page.locator("h1").inner_text() == "Runs"
        assert page.locator("table.runs-table tbody tr").count() == (4 if HAS_ICD10 else 3)
        screenshot(page, "runs_list")

        page.get_by_role("link", name=SINGLE).click()
        page.wait_for_url(f"**/runs/{SINGLE}")
        assert "single" in page.locator("h1").inner_text()
        assert page.locator("table.scores").first.is_visible()
        assert page.locator(".failures").get_by_text("the server refused the request").is_visible()
        screenshot(page, "run_page")

        page.get_by_role("link", name=XSS_ID).first.click()  # the id is shown as text, and its link works
        page.wait_for_load_state()
        assert SCRIPT in page.locator("h1").inner_text()
        assert SCRIPT in page.locator(".turn .text").first.inner_text()
        assert page.evaluate("document.querySelectorAll('main script, main img').length") == 0
        screenshot(page, "item_transcript")

        page.goto(base + item_path(DEBATE, "q1"))
        summary = page.locator(".debate-summary")
        assert summary.is_visible() and "agreed on B" in summary.inner_text()
        first_card = page.locator("details.full-log article").first
        assert not first_card.is_visible()  # the full log starts closed
        page.locator("details.full-log > summary").click()
        assert first_card.is_visible()
        assert page.locator("details.full-log article").count() == 8
        assert f"I read {SCRIPT} as noise" in page.locator("details.full-log").inner_text()
        screenshot(page, "debate_item")

        page.goto(base + item_path(BOARD, "tb1"))
        assert SCRIPT in page.locator(".answer-block .answer").inner_text()
        screenshot(page, "board_item")

        page.goto(base + f"/runs/{SINGLE}/report")
        assert page.locator("main").is_visible()
        plots = page.locator(".mp-report figure svg")
        assert plots.count() >= 2  # score with its interval, score against cost
        for i in range(plots.count()):  # each plot is drawn: on screen, at a legible size, with its text
            box = plots.nth(i).bounding_box()
            assert box and box["width"] > 300 and box["height"] > 100
            assert "accuracy" in plots.nth(i).inner_html()
        screenshot(page, "report_page")
    assert dialogs == []  # no script from a case or a model ran


def test_an_empty_store_and_text_with_control_characters(tmp_path):
    """No runs: the list says so. A stored event with a terminal escape and a lone surrogate (what a broken
    server can send) is shown with visible stand-ins, and the page still encodes."""
    path = tmp_path / "odd.db"
    with serving(create_app(WebConfig(store_path=path))) as url:
        status, html = get(url, "/runs")
        assert status == 200 and "No runs are stored yet" in html
        store = Store(path)
        try:
            store.create_run("odd-run", dataset="inline", protocol="single", models=["scripted:odd"], settings={})
            store.write_item("odd-run", "q1", 0, status="done", outcome={"status": "ok", "answer": "A", "data": {}},
                             events=[{"kind": "turn", "text": "red \x1b[31mA\x1b[0m and \ud800 here\nAnswer: A", "speaker": "scripted:odd",
                                      "model": "human"}],
                             scores={"accuracy": 1.0}, started_at=0.0)
            store.set_run_status("odd-run", "done")
            store.create_run("empty-run", dataset="inline", protocol="debate", models=["a", "b"], settings={})  # no writer, no items
        finally:
            store.close()
        status, html = get(url, item_path("odd-run", "q1"))
        assert status == 200
        assert "red \u241b[31mA\u241b[0m and \\ud800 here\nAnswer: A" in html and "\x1b" not in html
        assert '<article class="turn human"' in html  # a person's turn is marked as such
        status, html = get(url, "/runs")
        assert status == 200 and 'href="/runs/odd-run"' in html
        row = html[html.index('href="/runs/empty-run"'):].split("</tr>")[0]
        assert 'class="badge interrupted" title="no writer holds its lease"' in row  # 'running', but nobody is writing it
        status, html = get(url, "/runs/empty-run")
        assert status == 200 and "No items recorded yet." in html and "No scores recorded" in html
        assert "Marked interrupted: no writer holds its lease." in html
