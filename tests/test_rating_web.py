"""A blinded rating session in the web app, rated by scripted raters over real HTTP on loopback.

Two runs (specialist protocol; answers "Alpha plan ..." and "<b>Beta</b> plan ...", the equivalence judge's
scores chosen per answer) are rated on two OpenTumorBoard audit dimensions by alice and bob; carol adjudicates.
A scripted rater reads each page as a person would (the answers and the radio buttons), answers with fixed
ratings looked up by what each answer says, and posts the form. The test checks that no page a rater sees
names a run, a protocol or a model, that carol is asked only about the cells alice and bob disagree on, and
that kappa and the judge-human agreement equal the values worked by hand below.

Response correctness (Low = 1, Medium = 2, High = 3), alice / bob, carol where they disagree:

    item  Alpha          Beta           judge (clinical_equivalence -> mapped)
    1     H / H          M / M          Alpha 5 -> H, Beta 3 -> M
    2     H / M  (C: H)  L / L          Alpha 4 -> H, Beta 2 -> L
    3     H / H          M / L  (C: L)  Alpha 4 -> H, Beta 3 -> M
    4     M / M          L / L          Alpha 5 -> H, Beta 1 -> L

Question relevance: High from both, everywhere (kappa undefined: one label throughout).
"""

from __future__ import annotations

import html
import re
import urllib.error
import urllib.parse
import urllib.request

import pytest
from test_rating import ALPHA, BETA, CASES, ITEMS, JUDGE, two_runs, which
from web_support import serving

from medpanel.rating import sessions
from medpanel.rating.report import rating_section_html, rating_summary
from medpanel.web import auth
from medpanel.web.app import create_app
from medpanel.web.config import WebConfig

H, M, L = "3", "2", "1"
CORRECTNESS = {
    "alice": {("Alpha", 1): H, ("Beta", 1): M, ("Alpha", 2): H, ("Beta", 2): L, ("Alpha", 3): H, ("Beta", 3): M, ("Alpha", 4): M, ("Beta", 4): L},
    "bob":   {("Alpha", 1): H, ("Beta", 1): M, ("Alpha", 2): M, ("Beta", 2): L, ("Alpha", 3): H, ("Beta", 3): L, ("Alpha", 4): M, ("Beta", 4): L},
    "carol": {("Alpha", 2): H, ("Beta", 3): L},
}
TOKENS = {"alice": "alice-token", "bob": "bob-token", "carol": "carol-token", "admin": "admin-token"}


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


OPENER = urllib.request.build_opener(NoRedirect)


def http(base: str, who: str, path: str, form: dict | None = None) -> tuple[int, str, dict]:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    request = urllib.request.Request(base + path, data=data, headers={"Authorization": f"Bearer {TOKENS[who]}", "Accept": "text/html"})
    try:
        with OPENER.open(request, timeout=30) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


def read_item(page: str) -> dict:
    """What a person sees on an item page: the item number, each answer's letter and text, the radio groups."""
    item = re.search(r'name="item" value="(\d+)"', page)
    answers = {m.group(1): html.unescape(m.group(2)) for m in re.finditer(r'data-letter="([A-Z])">\s*<h2>Answer [A-Z]</h2>\s*<div class="answer-text">(.*?)</div>', page, re.S)}
    groups = sorted(set(re.findall(r'type="radio" name="([^"]+)"', page)))
    return {"item": int(item.group(1)) if item else None, "answers": answers, "groups": groups}


def rate_all(base: str, who: str, sid: str, pages: list[str]) -> list[dict]:
    """The scripted rater: open the session, answer each item with the fixed ratings, until the done page."""
    seen = []
    for _ in range(3 * ITEMS):
        status, page, _ = http(base, who, f"/ratings/{sid}")
        assert status == 200, page
        pages.append(page)
        shown = read_item(page)
        if shown["item"] is None:
            assert "nothing left for you to rate" in page
            return seen
        seen.append(shown | {"page": page})
        form = {"item": shown["item"]}
        for group in shown["groups"]:
            letter, _, dimension = group.partition(":")
            key = which(shown["answers"][letter])
            form[group] = CORRECTNESS[who][key] if dimension == "response_correctness" else "High"
        status, body, headers = http(base, who, f"/ratings/{sid}", form)
        assert status == 303 and headers["location"] == f"/ratings/{sid}", body
    raise AssertionError("the rater never reached the done page")


@pytest.fixture
def rated(tmp_path):
    """The session, its runs and the app, with users alice, bob (raters) and carol (adjudicator)."""
    app = create_app(WebConfig(store_path=tmp_path / "web.db", token=TOKENS["admin"]))
    store = app.state.store
    a, b = two_runs(store)
    sid = sessions.create_session(store, [a, b], rubric="otb-audit", raters=["alice", "bob"], adjudicator="carol", seed=11,
                                  dimensions=["response_correctness", "question_relevance"], cases=CASES)
    for name in ("alice", "bob", "carol"):
        store.add_user(name, "rater", auth.token_hash(TOKENS[name]))
    return app, store, sid, (a, b)


def test_blinded_session_rated_over_http(rated):
    app, store, sid, (a, b) = rated
    pages: list[str] = []
    with serving(app) as base:
        status, listing, _ = http(base, "alice", "/ratings")
        assert status == 200 and sid in listing and "Rate (4 left)" in listing and '<td class="num">4</td>' in listing
        pages.append(listing)
        # carol has nothing to do before both raters are through: the done page, with a word about later
        status, early, _ = http(base, "carol", f"/ratings/{sid}")
        assert status == 200 and read_item(early)["item"] is None and "may still come to you" in early
        pages.append(early)

        alice = rate_all(base, "alice", sid, pages)
        bob = rate_all(base, "bob", sid, pages)
        assert sorted(s["item"] for s in alice) == sorted(s["item"] for s in bob) == [1, 2, 3, 4]
        assert [s["item"] for s in alice] != [s["item"] for s in bob]  # each rater's own order (seed 11)
        for shown in alice:
            # both answers, as "Answer A/B", every cell asked on both dimensions
            assert sorted(shown["answers"]) == ["A", "B"]
            assert shown["groups"] == ["A:question_relevance", "A:response_correctness", "B:question_relevance", "B:response_correctness"]
            words = {which(text)[0] for text in shown["answers"].values()}
            assert words == {"Alpha", "Beta"}
        letter_of_alpha = {s["item"]: next(k for k, v in s["answers"].items() if which(v)[0] == "Alpha") for s in alice}
        assert set(letter_of_alpha.values()) == {"A", "B"}  # the letter order changes between items
        texts = [t for s in alice for t in s["answers"].values()]
        assert any("(as [a model] sees it)" in t for t in texts)  # the model named in its own answer is masked
        assert any(t.startswith("<b>Beta</b>") for t in texts)  # markup came through as text, escaped on the page
        assert "&lt;b&gt;Beta&lt;/b&gt;" in "".join(pages) and "<b>Beta</b>" not in "".join(pages)

        # a form missing a cell is refused, the item shown again with what is missing
        status, page, _ = http(base, "carol", f"/ratings/{sid}", {"item": 2})
        assert status == 400 and "Not every question was answered" in page and read_item(page)["item"] == 2
        pages.append(page)

        # carol is asked exactly the two cells alice and bob disagree on: item 2's Alpha and item 3's Beta answer
        carol = rate_all(base, "carol", sid, pages)
        assert sorted(s["item"] for s in carol) == [2, 3]
        for shown in carol:
            (group,) = shown["groups"]
            letter, _, dimension = group.partition(":")
            assert dimension == "response_correctness"
            assert which(shown["answers"][letter]) == {2: ("Alpha", 2), 3: ("Beta", 3)}[shown["item"]]
            assert "The two raters of this item disagreed" in shown["page"] and len(shown["answers"]) == 2

        # a second submission of an item already rated changes nothing (the numbers below are the first ratings)
        status, _, headers = http(base, "alice", f"/ratings/{sid}", {"item": 1, "A:response_correctness": L, "B:response_correctness": L,
                                                                     "A:question_relevance": L, "B:question_relevance": L})
        assert status == 303 and headers["location"] == f"/ratings/{sid}"

        # blinded: no page a rater saw names a run, the protocol, or a model
        everything = "".join(pages)
        for secret in (a, b, ALPHA, BETA, JUDGE, "scripted", "specialist"):
            assert secret not in everything, secret
        assert "built-in method" not in everything and "None" not in everything

        # results: admins only, unblinded
        status, _, _ = http(base, "alice", f"/ratings/{sid}/results")
        assert status == 403
        status, results, _ = http(base, "admin", f"/ratings/{sid}/results")
        assert status == 200 and a in results and b in results and "built-in method" not in results
        assert "4 items, 2 systems" in results
        assert "0.628" in results and "0.714" in results and "0.805" in results  # raters' kappas (below)
        assert "0.619" in results and "0.733" in results and "0.833" in results and "0.770" in results  # judge vs people
        status, missing, _ = http(base, "alice", "/ratings/rate-00000000")
        assert status == 404

    summary = rating_summary(store, sid)
    assert summary["progress"]["complete"] and summary["progress"]["items_by_state"]["settled"] == ITEMS
    dims = {d["name"]: d for d in summary["dimensions"]}
    ag = dims["response_correctness"]["agreement"]
    # alice vs bob over the 8 answers: alice H,M,H,L,H,M,M,L; bob H,M,M,L,H,L,M,L -> 6 of 8 agree.
    # Table (alice rows, bob columns; L, M, H): [[2,0,0],[1,2,0],[0,1,2]]; rows 2,3,3; columns 3,3,2.
    assert ag["confusion"]["counts"] == [[2, 0, 0], [1, 2, 0], [0, 1, 2]]
    assert ag["percent"]["value"] == 0.75
    # unweighted: pe = (2*3 + 3*3 + 3*2)/64 = 21/64; kappa = (48/64 - 21/64)/(43/64) = 27/43 = 0.627907
    assert ag["kappa"]["value"] == pytest.approx(27 / 43)
    # linear: observed 2 cells * 0.5 / 8 = 8/64; expected (2*3*.5 + 2*2*1 + 3*3*.5 + 3*2*.5 + 3*3*1 + 3*3*.5)/64 = 28/64
    # -> 1 - 8/28 = 5/7 = 0.714286
    assert ag["kappa_linear"]["value"] == pytest.approx(5 / 7)
    # quadratic: observed 2 * .25 / 8 = 4/64; expected (1.5 + 4 + 2.25 + 1.5 + 9 + 2.25)/64 = 20.5/64 -> 1 - 4/20.5 = 33/41 = 0.804878
    assert ag["kappa_quadratic"]["value"] == pytest.approx(33 / 41)
    relevance = dims["question_relevance"]["agreement"]
    assert relevance["percent"]["value"] == 1.0 and relevance["kappa"]["value"] is None and "same rating" in relevance["kappa"]["reason"]

    # settled: Alpha H,H,H,M (mean 11/4), Beta M,L,L,L (mean 5/4); 2 of 8 cells adjudicated
    by_run = {x["run_id"]: x for x in dims["response_correctness"]["systems"]}
    assert by_run[a]["mean"] == pytest.approx(2.75) and by_run[b]["mean"] == pytest.approx(1.25)
    assert dims["response_correctness"]["settled_by"] == {"agreed": 6, "adjudicated": 2}
    # permutation test on the first-hand ratings, clustered by answer: differences per item (sum A - sum B) 2,3,3,2
    # over 8 ratings a side -> observed 10/8 = 1.25, reached only by all-unswapped or all-swapped: p = 2/16
    (cmp,) = dims["response_correctness"]["comparisons"]
    assert abs(cmp["difference"]) == pytest.approx(1.25) and cmp["p_value"] == pytest.approx(0.125) and cmp["exact"]

    (judge,) = summary["judge_agreement"]
    assert judge["judge"] == f"scripted:{JUDGE}" and judge["dimension"] == "response_correctness" and judge["n"] == 8
    # judge mapped vs people's settled rating: 6 of 8 agree (item 3 Beta: M vs L; item 4 Alpha: H vs M).
    # Table (judge rows, people columns; L, M, H): [[2,0,0],[1,1,0],[0,1,3]]; rows 2,2,4; columns 3,2,3.
    assert judge["confusion"]["counts"] == [[2, 0, 0], [1, 1, 0], [0, 1, 3]]
    assert judge["agreement"]["value"] == 0.75
    # unweighted: pe = (2*3 + 2*2 + 4*3)/64 = 22/64 -> (48 - 22)/(64 - 22) = 26/42 = 0.619048
    assert judge["kappa"]["value"] == pytest.approx(26 / 42)
    # linear: observed 8/64; expected (2*2*.5 + 2*3*1 + 2*3*.5 + 2*3*.5 + 4*3*1 + 4*2*.5)/64 = 30/64 -> 1 - 8/30 = 11/15
    assert judge["kappa_linear"]["value"] == pytest.approx(11 / 15)
    # quadratic: observed 4/64; expected (1 + 6 + 1.5 + 1.5 + 12 + 2)/64 = 24/64 -> 1 - 4/24 = 5/6
    assert judge["kappa_quadratic"]["value"] == pytest.approx(5 / 6)
    # Spearman between the judge's raw 5,3,4,2,4,3,5,1 and the people's 3,2,3,1,3,1,2,1 (test_rating.py works it): 0.769800
    assert judge["spearman"]["value"] == pytest.approx(0.7698003589)

    fragment = rating_section_html(store, [a])
    assert fragment.startswith('<section class="mp-ratings">') and "0.628" in fragment and "0.619" in fragment


def test_a_person_outside_the_session_is_refused(rated):
    app, store, sid, _ = rated
    store.add_user("dave", "rater", auth.token_hash("dave-token"))
    TOKENS["dave"] = "dave-token"
    with serving(app) as base:
        status, page, _ = http(base, "dave", f"/ratings/{sid}")
        assert status == 403 and "not a rater" in page
        status, page, _ = http(base, "dave", "/ratings")
        assert status == 200 and sid not in page
        status, page, _ = http(base, "dave", f"/ratings/{sid}", {"item": 1})
        assert status == 403


def test_no_rating_template_marks_text_safe():
    from medpanel.web.templating import TEMPLATES

    for path in (TEMPLATES / "rating").glob("*.html"):
        text = path.read_text()
        assert "|safe" not in text.replace(" ", "") and "Markup(" not in text, path.name
        assert path.name.startswith("_") or '{% extends "base.html" %}' in text, path.name
    assert "Markup(" not in (TEMPLATES.parent / "rating.py").read_text()


def test_every_rubric_renders_as_radio_buttons(rated):
    app, store, _, (a, b) = rated
    made = {name: sessions.create_session(store, [a, b], rubric=name, raters=["alice", "bob"], seed=5, cases=CASES)
            for name in ("mcc-physician", "mcc-layperson", "pick-best", "otb-audit")}
    with serving(app) as base:
        for name, sid in made.items():
            status, page, _ = http(base, "alice", f"/ratings/{sid}")
            assert status == 200, page
            shown = read_item(page)
            if name == "pick-best":
                assert shown["groups"] == ["best"] and page.count('name="best"') == 2
                status, _, _ = http(base, "alice", f"/ratings/{sid}", {"item": shown["item"], "best": "B"})
                assert status == 303
            else:
                per_answer = {"mcc-physician": 12, "mcc-layperson": 2, "otb-audit": 6}[name]
                assert len(shown["groups"]) == 2 * per_answer
            assert "Reference answer" in page if name == "otb-audit" else "Reference answer" not in page
            for secret in (a, b, ALPHA, BETA, JUDGE):
                assert secret not in page


def test_rating_pages_in_the_browser(rated):
    """The rater's page and the results, as a person sees them in headless Chromium (screenshots for the note),
    and the run's report page carrying the ratings section."""
    from web_support import browser_page, screenshot

    app, store, sid, (a, b) = rated
    with serving(app) as base, browser_page() as page:
        page.goto(f"{base}/ratings/{sid}?token={TOKENS['alice']}")  # the link moves the token into the cookie
        assert "token" not in page.url
        assert page.locator("input[type=radio]").count() > 0
        assert a not in page.content() and "scripted" not in page.content()
        screenshot(page, "rating_item")
        for who in ("alice", "bob", "carol"):
            rate_all(base, who, sid, [])
        page.context.clear_cookies()
        page.goto(f"{base}/ratings/{sid}/results?token={TOKENS['admin']}")
        assert "κ" in page.inner_text("main") or "kappa" in page.inner_text("main").lower()
        screenshot(page, "rating_results")
        page.goto(f"{base}/runs/{a}/report")
        assert page.locator(".mp-ratings").is_visible()
        screenshot(page, "report_with_ratings")
