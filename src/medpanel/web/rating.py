"""Blinded human rating in the browser: the sessions, a rater's next item, and (for admins) the results.

    GET  /ratings                 the sessions (a rater sees the ones they take part in), with progress
    GET  /ratings/{id}            the signed-in person's next item: the case, the answers as "Answer A/B/...",
                                  the rubric as radio buttons; a "done" page when nothing is left for them
    POST /ratings/{id}            their verdicts on one item, then on to the next (303)
    GET  /ratings/{id}/results    the unblinded analysis (admins only)

Who rates is `request.state.user.name`. Every page a rater sees is blinded: no run id, protocol or model
name is read from the store for it (medpanel.rating.sessions keeps them apart); only the results page
reads the unblinding key. Texts go through Jinja's autoescaping, with control characters made visible.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse

from medpanel.errors import UsageError
from medpanel.literal import visible
from medpanel.rating import sessions as rs
from medpanel.rating import store as rstore
from medpanel.web.templating import render
from medpanel.web.runs import literal

router = APIRouter()


def _problem(request: Request, status: int, title: str, problem: str, fix: str = ""):
    return render(request, "rating/problem.html", status_code=status, title=title, problem=problem, fix=fix)


def _session(request: Request, session_id: str):
    """(the session, None) or (None, a problem page) for an unknown id."""
    store = request.app.state.store
    if rstore.get_session(store, session_id) is None:
        return None, _problem(request, 404, "No such rating session", f"There is no rating session '{visible(session_id)}' here.",
                              "The list of rating sessions shows the ones open to you.")
    return rs.load(store, session_id), None


def _not_yours(request: Request, session) -> Any:
    user = request.state.user
    if user.name in rs.people(session):
        return None
    return _problem(request, 403, "Not your session", f"{visible(user.name)} is not a rater in this rating session.",
                    "Ask whoever set the session up to name you with --raters (or --adjudicator).")


def _my_session(request: Request, session_id: str):
    """(the session, None), or (None, the 404 or 403 page) when it is unknown or the person is not in it."""
    session, problem = _session(request, session_id)
    if problem is None:
        problem = _not_yours(request, session)
    return (None, problem) if problem is not None else (session, None)


@router.get("/ratings")
async def sessions_page(request: Request):
    store, user = request.app.state.store, request.state.user
    rows = rs.sessions_for(store, None if user.is_admin else user.name)  # a person's own rows come with what they have open
    for row in rows if user.is_admin else []:  # an admin sees every session, and may rate in some
        session = rs.load(store, row["session_id"])
        if user.name in rs.people(session):
            row["mine"] = row["raters"].get(user.name)
            row["open"] = sum(not session.rated(n, user.name) for n, _ in session.tasks(user.name))
    return render(request, "rating/list.html", sessions=rows)


def _item_page(request: Request, task: rs.Task, error: str | None = None, status: int = 200):
    prompt = literal(task.prompt)
    answers = [rs.ShownAnswer(a.letter, visible(a.text)) for a in task.answers]
    return render(request, "rating/item.html", status_code=status, task=task, prompt=prompt, answers=answers, error=error,
                  session_id=task.session_id)


@router.get("/ratings/{session_id}")
async def next_item(request: Request, session_id: str):
    session, problem = _my_session(request, session_id)
    if problem:
        return problem
    name = request.state.user.name
    task = rs.next_task(request.app.state.store, session.id, name)
    if task is None:
        session = rs.load(request.app.state.store, session.id)
        progress = rs.progress_of(session)
        mine = progress["raters"].get(name, {})
        later = sum(1 for n, it in session.items.items() if it["adjudicator"] == name and session.disagreements(n) is None)
        return render(request, "rating/done.html", session_id=session.id, title=session.rubric.title, mine=mine, later=later,
                      progress=progress)
    return _item_page(request, task)


@router.post("/ratings/{session_id}")
async def submit(request: Request, session_id: str):
    session, problem = _my_session(request, session_id)
    if problem:
        return problem
    form = await request.form()
    name = request.state.user.name
    raw = str(form.get("item", "")).strip()
    if not (raw.isascii() and raw.isdigit()) or int(raw) not in session.items:
        return _problem(request, 400, "Which item?", "The form did not say which item it rates.", "Open the session again to get your next item.")
    item = int(raw)
    values = {k: v for k, v in form.items() if isinstance(v, str)}
    try:
        rs.record(request.app.state.store, session.id, name, item, values)
    except rstore.AlreadyRated:
        pass  # the same form sent twice: the first one counted; go on
    except UsageError as exc:
        task = rs.task_for(request.app.state.store, session.id, name, item)
        if task is not None:
            return _item_page(request, task, error=f"{exc.problem} {exc.fix}".strip(), status=400)
        return _problem(request, 400, "That rating was not recorded", exc.problem, exc.fix)
    return RedirectResponse(f"/ratings/{session.id}", status_code=303)


@router.get("/ratings/{session_id}/results")
async def results(request: Request, session_id: str):
    from medpanel.rating.report import rating_summary

    if not request.state.user.is_admin:
        return _problem(request, 403, "Results are for admins", "The results name the systems behind the answers, so only an admin sees them.",
                        "Raters stay blinded until the analysis; ask an admin.")
    session, problem = _session(request, session_id)
    if problem:
        return problem
    summary = literal(rating_summary(request.app.state.store, session.id))
    return render(request, "rating/results.html", s=summary)
