"""A live deliberation in the web app: started from the page, streamed turn by turn, a person in a seat,
the timeout policy, the stop button. Real HTTP on loopback against the real app; the browser test drives
Debian's chromium. The panel is the package's scripted model, reading its replies from a file."""

from __future__ import annotations

import contextlib
import html
import re
import threading
import time
from pathlib import Path

import httpx
import yaml

from medpanel.cases import load_case
from web_support import browser_page, screenshot, serving
from medpanel.web.app import create_app
from medpanel.web.config import WebConfig

ROOT = Path(__file__).resolve().parents[1]

# The moderator (one scripted model for every seat not taken) opens, gives the floor to the person's seat
# (Radiologist), then to the Urologist (the same model), then closes. The order of calls is fixed by the protocol.
BOARD_REPLIES = [
    {"presentation": "A 69-year-old man with Grade Group 2 prostate cancer. <script>alert('moderator')</script>",
     "specialists": ["Radiologist", "Urologist"]},
    {"next_speaker": "Radiologist", "question": "What does the MRI show?"},
    {"next_speaker": "Urologist", "question": "Which treatment do you favour?"},
    "Active surveillance is reasonable at favourable intermediate risk.",
    {"next_speaker": "close the discussion", "question": ""},
    {"conclusion": "The board recommends active surveillance with a repeat MRI in 12 months."},
]
HUMAN_ANSWER = "An 11 mm PI-RADS 4 lesion at the right base, no extraprostatic extension."


def replies_file(tmp_path: Path, replies: list) -> str:
    path = tmp_path / "board_replies.yaml"
    path.write_text(yaml.safe_dump(replies), encoding="utf-8")
    return f"scripted:{path}"


def web_app(tmp_path: Path, **config):
    """The app, offering the scripted panel of `replies_file` (a page may only use the models the server offers)."""
    offered = (f"scripted:{tmp_path / 'board_replies.yaml'}",)
    return create_app(WebConfig(store_path=tmp_path / "web.db", cases_dir=ROOT / "examples", allowed_models=offered, **config))


def start_board(client: httpx.Client, model: str, seat: str = "Radiologist") -> str:
    response = client.post("/deliberations", data={"folder": "prostate", "protocol": "board-live", "models": model,
                                                   "seat": seat, "max_turns": "4"})
    assert response.status_code == 303, response.text
    return response.headers["location"]


def stream_events(base: str, where: str, into: list, timeout: float = 60) -> threading.Thread:
    """Read the page's event stream to its end in a thread: (event type, data) pairs, in order."""

    def read() -> None:
        kind, lines = None, []
        with contextlib.suppress(httpx.HTTPError), httpx.stream("GET", base + where + "/stream", timeout=timeout) as response:
            for line in response.iter_lines():  # (a server that goes away mid-stream ends the reading, quietly)
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    lines.append(line[6:])
                elif not line and kind:  # a blank line ends one message
                    into.append((kind, "\n".join(lines)))
                    kind, lines = None, []

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def wait_for_turn(client: httpx.Client, where: str, seconds: float = 30, after: str | None = None) -> str:
    """The person's turn box once the floor comes to them (a question other than `after`)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        box = client.get(where + "/ask").text
        if "Your turn" in box and (after is None or qid(box) != after):
            return box
        time.sleep(0.1)
    raise AssertionError("the floor never came to the person's seat")


def qid(box: str) -> str:
    """The id of the question a turn box's form answers (each form names its question)."""
    return re.search(r'name="__question" value="(\d+)"', box).group(1)


def wait_status(client: httpx.Client, where: str, wanted: set[str], seconds: float = 30) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        page = client.get(where).text
        for status in wanted:
            if f'data-status="{status}"' in page:
                return page
        time.sleep(0.1)
    raise AssertionError(f"the deliberation never reached {wanted}")


def test_live_board_streams_turns_in_order_and_waits_for_the_person(tmp_path):
    app = web_app(tmp_path, seat_timeout_s=60)
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        where = start_board(client, replies_file(tmp_path, BOARD_REPLIES))
        events: list = []
        reader = stream_events(base, where, events)
        box = wait_for_turn(client, where)
        assert "What does the MRI show?" in box and 'name="text"' in box
        time.sleep(0.3)
        assert any('data-speaker="Moderator"' in data for _, data in events)  # the stream is being read...
        assert not any('data-speaker="Urologist"' in data for _, data in events)  # ...and the board waits for the person
        answered = client.post(where + "/answer", data={"__question": qid(box), "text": HUMAN_ANSWER})
        assert answered.status_code == 200 and "was sent" in answered.text
        again = client.post(where + "/answer", data={"__question": qid(box), "text": "twice"})
        assert again.status_code == 400 and "not open any more" in again.json()["error"]  # a repeated form answers nothing
        page = wait_status(client, where, {"done"})
        reader.join(30)
    speakers = [data.split('data-speaker="')[1].split('"')[0] for kind, data in events if kind == "event" and "data-speaker" in data]
    assert speakers[:6] == ["Moderator", "Moderator", "Radiologist", "Moderator", "Urologist", "Moderator"]
    said = "".join(data for kind, data in events if kind == "event")
    assert HUMAN_ANSWER.split(",")[0] in said and "&lt;script&gt;" in said and "<script>alert" not in said
    assert ("end", "end") == events[-1]
    assert "The board recommends active surveillance" in page
    run_id = page.split('href="/runs/')[1].split('"')[0]
    stored = app.state.store.events(run_id, "prostate-gg2-right-base")
    person = [e for e in stored if e["speaker"] == "Radiologist" and e["kind"] == "turn"]
    assert person and person[0]["model"] == "human" and person[0]["text"].startswith("An 11 mm PI-RADS 4 lesion")


def test_only_the_person_in_the_seat_answers(tmp_path):
    from medpanel.web import auth

    app = web_app(tmp_path, seat_timeout_s=60, token="admin-token")
    app.state.store.add_user("Dr Lee", "clinician", auth.token_hash("lee-token"))
    with serving(app) as base, httpx.Client(base_url=base, timeout=30, headers={"Authorization": "Bearer lee-token"}) as lee:
        where = start_board(lee, replies_file(tmp_path, BOARD_REPLIES))
        box = wait_for_turn(lee, where)
        other = httpx.Client(base_url=base, timeout=30, headers={"Authorization": "Bearer admin-token"})
        assert "Waiting for Dr Lee as Radiologist" in other.get(where + "/ask").text
        refused = other.post(where + "/answer", data={"__question": qid(box), "text": "not mine"})
        assert refused.status_code == 400 and "taken by Dr Lee" in refused.json()["error"]
        assert lee.post(where + "/answer", data={"__question": qid(box), "text": "   "}).status_code == 400  # empty: asked again
        assert lee.post(where + "/answer", data={"__question": qid(box), "text": HUMAN_ANSWER}).status_code == 200
        wait_status(lee, where, {"done"})
        other.close()


def test_an_unanswered_seat_passes_when_the_policy_says_pass(tmp_path):
    app = web_app(tmp_path, seat_timeout_s=1, on_timeout="pass")
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        where = start_board(client, replies_file(tmp_path, BOARD_REPLIES))
        page = wait_status(client, where, {"done"})
    run_id = page.split('href="/runs/')[1].split('"')[0]
    turns = [e for e in app.state.store.events(run_id, "prostate-gg2-right-base") if e["speaker"] == "Radiologist"]
    assert turns and "passes this turn" in turns[0]["text"]


def test_an_unanswered_seat_stops_the_board_when_the_policy_says_stop(tmp_path):
    app = web_app(tmp_path, seat_timeout_s=1, on_timeout="stop")
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        where = start_board(client, replies_file(tmp_path, BOARD_REPLIES))
        page = wait_status(client, where, {"stopped"})
    assert "did not answer as Radiologist within 1 s" in page
    run_id = page.split('href="/runs/')[1].split('"')[0]
    assert app.state.store.get_run(run_id)["status"] == "interrupted"  # resumable, not failed
    assert app.state.store.items(run_id) == []


def test_the_stop_button_stops_a_waiting_board(tmp_path):
    app = web_app(tmp_path, seat_timeout_s=60)
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        where = start_board(client, replies_file(tmp_path, BOARD_REPLIES))
        wait_for_turn(client, where)
        assert client.post(where + "/stop").status_code == 303
        page = wait_status(client, where, {"stopped"})
    assert "Stopped by local" in page


def test_a_person_fills_a_structured_seat_field_by_field(tmp_path):
    """The moderator's seat answers with a schema (whom to give the floor): the page shows one field each,
    a choice list for a fixed set of speakers."""
    replies = ["Active surveillance is reasonable.", "Surveillance with MRI in 12 months."]
    app = web_app(tmp_path, seat_timeout_s=60)
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        where = start_board(client, replies_file(tmp_path, replies), seat="Moderator")
        box = wait_for_turn(client, where)
        assert 'name="presentation"' in box and 'name="specialists"' in box
        client.post(where + "/answer", data={"__question": qid(box), "presentation": "Localized prostate cancer.", "specialists": "Urologist"})
        box = wait_for_turn(client, where, after=qid(box))
        assert '<select name="next_speaker"' in box and '<option value="Urologist">' in box
        client.post(where + "/answer", data={"__question": qid(box), "next_speaker": "Urologist", "question": "Your view?"})
        box = wait_for_turn(client, where, after=qid(box))
        client.post(where + "/answer", data={"__question": qid(box), "next_speaker": "close the discussion"})
        box = wait_for_turn(client, where, after=qid(box))
        assert 'name="conclusion"' in box
        client.post(where + "/answer", data={"__question": qid(box), "conclusion": "Active surveillance."})
        page = wait_status(client, where, {"done"})
    assert "Active surveillance." in page


def test_bad_start_forms_are_refused_with_what_to_fix(tmp_path):
    app = web_app(tmp_path)
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        cases = [({"folder": "../../etc", "protocol": "board-live"}, "not one of the cases offered"),
                 ({"dataset": "medqa", "protocol": "single"}, "names a whole dataset"),
                 ({"folder": "prostate", "protocol": "nonsense"}, "Unknown protocol"),
                 ({"folder": "prostate", "protocol": "board", "seat": "Radiologist"}, "no seat 'Radiologist' in board"),
                 ({"folder": "prostate", "protocol": "board-live", "max_turns": "99"}, "outside 1 to 12"),
                 ({}, "No case was chosen")]
        for form, message in cases:
            response = client.post("/deliberations", data=form, headers={"Accept": "text/html"})
            assert response.status_code == 400, form
            assert message in html.unescape(response.text), (form, response.text[:500])


def test_live_board_in_the_browser(tmp_path):
    """Acceptance: start a live board with scripted models from the page, see the turns appear in order, take
    the Radiologist's seat and answer, see the conclusion; no script from the case or a model ever runs."""
    app = web_app(tmp_path, seat_timeout_s=120)
    model = replies_file(tmp_path, BOARD_REPLIES)
    with serving(app) as base, browser_page() as page:
        dialogs: list = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(base + "/")
        screenshot(page, "new_deliberation")
        page.select_option("#folder", "prostate")
        page.select_option("#protocol", "board-live")
        page.fill("#models", model)
        page.select_option("#seat", "Radiologist")
        page.fill("#max_turns", "4")
        page.click("#start")
        page.wait_for_load_state()
        assert "/deliberations/" in page.url, page.content()[:1500]
        page.wait_for_selector(".your-turn")
        assert page.inner_text(".ask-line") == "The moderator asks you: What does the MRI show?"
        assert page.locator("#transcript .turn").first.get_attribute("data-speaker") == "Moderator"
        slides = len(load_case(ROOT / "examples" / "prostate").slides)
        assert page.locator(".slides img").count() == slides > 0
        page.wait_for_function("() => [...document.querySelectorAll('.slides img')].every(i => i.complete && i.naturalWidth > 0)")
        screenshot(page, "live_board_your_turn")
        page.fill("#answer-text", HUMAN_ANSWER)
        page.click("#send")
        page.wait_for_selector("#conclusion", timeout=30_000)
        speakers = page.eval_on_selector_all("#transcript .turn", "els => els.map(e => e.dataset.speaker)")
        assert speakers[:6] == ["Moderator", "Moderator", "Radiologist", "Moderator", "Urologist", "Moderator"]
        assert "active surveillance with a repeat MRI" in page.inner_text("#conclusion")
        assert "<script>alert('moderator')</script>" in page.inner_text("#transcript")  # shown as text
        screenshot(page, "live_board_done")
        assert dialogs == []


def test_a_multiple_choice_case_is_debated_from_an_upload(tmp_path):
    """Any case type starts from the page: here an uploaded MCQ, debated by three scripted models."""
    case = b"id: mcq-upload\nquestion: Which drug reverses heparin?\noptions:\n  A: Vitamin K\n  B: Protamine sulfate\n  C: Naloxone\nreference:\n  answer: B\n"
    app = create_app(WebConfig(store_path=tmp_path / "web.db", uploads_dir=tmp_path / "uploads",
                               allowed_models=("scripted:Answer: B", "scripted:Answer: C")))
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        started = client.post("/deliberations", data={"protocol": "debate", "models": "scripted:Answer: B, scripted:Answer: B, scripted:Answer: C"},
                              files=[("case_file", ("case.yaml", case, "application/x-yaml"))])
        assert started.status_code == 303, started.text
        page = wait_status(client, started.headers["location"], {"done"})
    assert "Which drug reverses heparin?" in page and "Protamine sulfate" in page
    assert page.count('class="turn') >= 3 and "Answer: C" in page
    run_id = page.split('href="/runs/')[1].split('"')[0]
    assert {row["name"]: row["value"] for row in app.state.store.scores(run_id)}["accuracy"] == 1.0


def test_stop_abandons_a_model_call_in_flight(tmp_path):
    """The stop button does not wait for a slow server: the call in flight is abandoned after a short grace, and
    the run is stored as interrupted (a resume re-asks it)."""
    from medpanel.testing.process import mock_server_process

    with mock_server_process("--latency", "60") as server:
        model = f"openai:mock-model@{server.base_url}"
        app = create_app(WebConfig(store_path=tmp_path / "web.db", cases_dir=ROOT / "examples", allowed_models=(model,), timeout_s=120))
        with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
            where = client.post("/deliberations", data={"folder": "prostate", "protocol": "board", "models": model}).headers["location"]
            wait_status(client, where, {"running"})
            time.sleep(0.5)
            stopped_at = time.monotonic()
            assert client.post(where + "/stop").status_code == 303
            assert "stopping (asked by local)" in client.get(where).text
            page = wait_status(client, where, {"stopped"}, seconds=15)
            assert time.monotonic() - stopped_at < 10
        run_id = page.split('href="/runs/')[1].split('"')[0]
        assert app.state.store.get_run(run_id)["status"] == "interrupted"
        assert app.state.store.call_log(run_id)  # the abandoned call is in the ledger


def test_a_caption_only_slide_does_not_shift_the_images(tmp_path):
    png = sorted((ROOT / "examples" / "prostate" / "slides").glob("*.png"))
    case = b"id: slides\nsummary: s\nslides:\n  - caption: no image here\n  - image: slides/first one.png\n    caption: first\n  - image: slides/second.png\n    caption: second\n"
    app = create_app(WebConfig(store_path=tmp_path / "web.db", uploads_dir=tmp_path / "uploads", allowed_models=("scripted:echo",)))
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        files = [("case_file", ("case.yaml", case, "x")), ("slides", ("first one.png", png[0].read_bytes(), "x")),
                 ("slides", ("second.png", png[1].read_bytes(), "x"))]
        where = client.post("/deliberations", data={"protocol": "board", "models": "scripted:echo"}, files=files).headers["location"]
        page = client.get(where).text
        figures = re.findall(r'<figure>\s*(?:<img src="([^"]+)"[^>]*>)?\s*<figcaption>([^<]*)</figcaption>', page)
        assert figures == [("", "no image here"), (f"{where}/slides/0", "first"), (f"{where}/slides/1", "second")]
        assert client.get(f"{where}/slides/0").content == png[0].read_bytes()  # a name with a space is kept
        assert client.get(f"{where}/slides/1").content == png[1].read_bytes()
        twice = client.post("/deliberations", data={"protocol": "board", "models": "scripted:echo"},
                            files=[("case_file", ("case.yaml", case, "x")), ("slides", ("a.png", png[0].read_bytes(), "x")),
                                   ("slides", ("a.png", png[1].read_bytes(), "x"))])
        assert twice.status_code == 400 and "Two slides are named a.png" in twice.json()["error"]
        kept = len(list((tmp_path / "uploads").iterdir()))
        refused = client.post("/deliberations", data={"protocol": "nonsense", "models": "scripted:echo"},
                              files=[("case_file", ("case.yaml", b"id: x\nsummary: s\n", "x"))])
        assert refused.status_code == 400 and "Unknown protocol" in refused.json()["error"]
        assert "[uploads]" not in refused.text and str(tmp_path) not in refused.text
        assert len(list((tmp_path / "uploads").iterdir())) == kept  # the refused start's upload was not kept


def test_ctrl_c_ends_the_server_with_a_live_page_open(tmp_path):
    """A live page holds its event stream open; Ctrl-C still ends `medpanel serve` within seconds, and the
    deliberation it cut short is stored as interrupted (resumable), not left running."""
    import os
    import signal
    import subprocess

    from conftest import MEDPANEL
    from medpanel.runs.store import Store
    from medpanel.testing.process import mock_server_process
    from web_support import free_port

    with mock_server_process("--latency", "60") as server:
        port, store = free_port(), tmp_path / "web.db"
        serve = subprocess.Popen([MEDPANEL, "serve", "--port", str(port), "--board", "examples/prostate", "--model",
                                  f"openai:mock-model@{server.base_url}"], cwd=ROOT, env=dict(os.environ, MEDPANEL_STORE=str(store)),
                                 stderr=subprocess.PIPE, text=True)
        try:
            where = None
            while where is None:
                line = serve.stderr.readline()
                assert line, "serve ended before opening the board"
                where = (re.search(r"(/deliberations/[0-9a-f]+)", line) or [None, None])[1]
            base = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    httpx.get(base + "/health", timeout=5)
                    break
                except httpx.ConnectError:
                    time.sleep(0.1)
            events: list = []
            stream_events(base, where, events, timeout=120)
            time.sleep(1)
            serve.send_signal(signal.SIGINT)
            assert serve.wait(timeout=20) == 0
        finally:
            if serve.poll() is None:
                serve.kill()
    runs = Store(store).list_runs()
    assert [r["status"] for r in runs] == ["interrupted"]


def test_colleagues_take_seats_and_answer_from_their_own_pages(tmp_path):
    """The one who starts a board seats colleagues (users of this server); each answers for their own seat only."""
    from medpanel.web import auth

    replies = [{"presentation": "Localized prostate cancer.", "specialists": ["Radiologist", "Urologist"]},
               {"next_speaker": "Radiologist", "question": "The MRI?"}, {"next_speaker": "Urologist", "question": "Treatment?"},
               {"next_speaker": "close the discussion", "question": ""}, {"conclusion": "Active surveillance."}]
    app = web_app(tmp_path, seat_timeout_s=60, token="admin-token")
    for name in ("Dr Lee", "Dr Kim"):
        app.state.store.add_user(name, "clinician", auth.token_hash(name.replace(" ", "-")))
    app.state.store.add_user("Dr Rao", "rater", auth.token_hash("Dr-Rao"))
    with serving(app) as base:
        def client(token: str) -> httpx.Client:
            return httpx.Client(base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"})

        admin, lee, kim = client("admin-token"), client("Dr-Lee"), client("Dr-Kim")
        form = {"folder": "prostate", "protocol": "board-live", "models": replies_file(tmp_path, replies), "max_turns": "4"}
        for people, message in (("Urologist=Dr Rao", "not a clinician"), ("Urologist=Nobody", "not a clinician"),
                                ("Surgeon=Dr Lee", "no seat 'Surgeon'"), ("Urologist=Dr Lee\nUrologist=Dr Kim", "given twice")):
            refused = admin.post("/deliberations", data={**form, "seat_people": people})
            assert refused.status_code == 400 and message in refused.json()["error"], people
        started = admin.post("/deliberations", data={**form, "seat_people": "Radiologist=Dr Lee\nUrologist=Dr Kim"})
        where = started.headers["location"]
        assert "Dr Lee as Radiologist, Dr Kim as Urologist" in admin.get(where).text
        box = wait_for_turn(lee, where)
        assert "Your turn" not in kim.get(where + "/ask").text  # not Kim's turn
        assert kim.post(where + "/answer", data={"__question": qid(box), "text": "not mine"}).status_code == 400
        lee.post(where + "/answer", data={"__question": qid(box), "text": "PI-RADS 4 at the right base."})
        box = wait_for_turn(kim, where)
        kim.post(where + "/answer", data={"__question": qid(box), "text": "Surveillance is reasonable."})
        page = wait_status(admin, where, {"done"})
        for c in (admin, lee, kim):
            c.close()
    run_id = page.split('href="/runs/')[1].split('"')[0]
    said = {e["speaker"]: e["text"] for e in app.state.store.events(run_id, "prostate-gg2-right-base") if e["kind"] == "turn"}
    assert said["Radiologist"] == "PI-RADS 4 at the right base." and said["Urologist"] == "Surveillance is reasonable."
