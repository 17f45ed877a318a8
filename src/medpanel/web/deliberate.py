"""The pages of a live deliberation: the start form, the table (transcript beside the slides, streamed as
server-sent events), a person's turn, the stop button, and the case's slides."""

from __future__ import annotations

import shutil
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, StreamingResponse

from medpanel.cases import load_case
from medpanel.cases.files import MAX_CASE_FILE_BYTES, image_format
from medpanel.errors import UsageError
from medpanel.web import plans
from medpanel.web.auth import Forbidden
from medpanel.web.live import Deliberation
from medpanel.web.seat import answer_text, seconds_left
from medpanel.web.templating import fragment, render
from medpanel.web.uploads import MAX_IMAGES, read_bounded, save_case

router = APIRouter()


def _deliberations(request: Request):
    """The server's deliberations; refused to a rater (they rate blind: a live table names its models)."""
    if request.state.user.role == "rater":
        raise Forbidden(f"{request.state.user.name} signed in as a rater: raters rate blind, so deliberations are hidden from them.",
                        "Your rating sessions are at /ratings.")
    return request.app.state.deliberations


def _config(request: Request):
    return request.app.state.config


@router.get("/")
async def start_page(request: Request):
    if request.state.user.role == "rater":  # their page is the list of rating sessions
        return RedirectResponse("/ratings", status_code=303)
    config = _config(request)
    return render(request, "live/new.html", folders=plans.case_folders(config.cases_dir), protocols=plans.PROTOCOLS,
                  seats=plans.all_seat_choices(), config=config, max_turns=plans.MAX_TURNS, case_limit=MAX_CASE_FILE_BYTES)


@router.post("/deliberations")
async def start(request: Request):
    config = _config(request)
    if request.state.user.role not in ("clinician", "admin"):
        raise Forbidden(f"{request.state.user.name} signed in as a {request.state.user.role}: only a clinician or an admin starts a deliberation.",
                        "Ask an admin to add you as a clinician (medpanel users add NAME --role clinician).")
    form = await request.form(max_files=MAX_IMAGES + 1, max_fields=50, max_part_size=config.max_upload_bytes + 1)
    text = {k: v for k, v in form.items() if isinstance(v, str)}
    try:
        max_turns = int(text.get("max_turns") or 6)
    except ValueError:
        raise UsageError(f"'{text.get('max_turns')[:40]}' is not a number of turns.", "Give a whole number.") from None
    models = plans.model_list(text.get("models", ""), config.default_model)
    plans.check_models([*models, *plans.seat_models(text.get("seat_models", "")).values()], config.models)
    case, dataset, folder = await read_case(request, form, text)
    try:
        plan = plans.make_plan(case, dataset, text.get("protocol", "board-live"), models, text.get("seat", ""),
                               text.get("seat_models", ""), max_turns, text.get("seat_people", ""), request.state.user.name)
        check_people(request, plan.people)
        deliberation = _deliberations(request).start(plan, request.state.user.name)
    except UsageError:
        if folder is not None:  # an upload whose deliberation could not start is not kept
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return RedirectResponse(f"/deliberations/{deliberation.id}", status_code=303)


def check_people(request: Request, people: dict[str, str]) -> None:
    """Colleagues are seated only if they can sign in here as a clinician or an admin (a rater rates blind)."""
    me = request.state.user.name
    known = {row["name"]: row["role"] for row in request.app.state.store.users()}
    for seat, person in people.items():
        if person != me and known.get(person) not in ("clinician", "admin"):
            raise UsageError(f"{person[:80]} cannot take the {seat}: they are not a clinician of this server.",
                             "Seat a clinician added with `medpanel users add NAME --role clinician` (they sign in with their token).")


async def read_case(request: Request, form, text: dict[str, str]):
    """(case, how it is named, the upload's folder or None): an uploaded case, an offered folder, or a dataset item."""
    config = _config(request)
    upload = form.get("case_file")
    slides = [f for f in form.getlist("slides") if not isinstance(f, str) and f.filename]
    if upload is None or isinstance(upload, str) or not upload.filename:
        if slides:
            raise UsageError("Slide images were uploaded without a case file.", "Upload the case file (YAML or JSON) with its slides.")
        case, dataset = plans.pick_case(config.cases_dir, text.get("folder", ""), text.get("dataset", ""))
        return case, dataset, None
    case_file = await read_bounded(upload, MAX_CASE_FILE_BYTES)
    images = [await read_bounded(f, config.max_upload_bytes) for f in slides]
    folder = save_case(config.upload_folder, case_file, images)
    try:
        return load_case(folder), str(folder), folder
    except UsageError:
        shutil.rmtree(folder, ignore_errors=True)  # a case the loader refuses is not kept
        raise


@router.get("/deliberations")
async def listing(request: Request):
    everything = sorted(_deliberations(request).all.values(), key=lambda d: d.created_at, reverse=True)
    return render(request, "live/list.html", deliberations=everything)


@router.get("/deliberations/{deliberation_id}")
async def page(request: Request, deliberation_id: str):
    d = _deliberations(request).get(deliberation_id)
    return render(request, "live/page.html", d=d, case=d.plan.case, slides=slide_list(d), ask=ask_box(d, request.state.user.name),
                  status=fragment("live/status.html", d=d), config=_config(request),
                  last=d.messages[-1].seq if d.messages else -1)


def image_slides(d: Deliberation) -> list:
    """The case's slides that have an image, in order: the slide route numbers these, and the page the same way."""
    return [slide for slide in d.plan.case.slides if slide.image]


def slide_list(d: Deliberation) -> list[dict]:
    images = image_slides(d)
    return [{"caption": slide.caption, "url": f"/deliberations/{d.id}/slides/{images.index(slide)}" if slide.image else None}
            for slide in d.plan.case.slides]


def ask_box(d: Deliberation, user: str) -> str:
    """The person's turn box: the form for the one who took the seat, a line for everyone else."""
    return fragment("live/ask.html", d=d, questions=list(d.questions.values()), user=user, seconds_left=seconds_left,
                    on_timeout=d.config.on_timeout, timeout=d.config.seat_timeout_s)


@router.get("/deliberations/{deliberation_id}/ask")
async def ask(request: Request, deliberation_id: str) -> HTMLResponse:
    return HTMLResponse(ask_box(_deliberations(request).get(deliberation_id), request.state.user.name))


@router.post("/deliberations/{deliberation_id}/answer")
async def answer(request: Request, deliberation_id: str) -> HTMLResponse:
    d = _deliberations(request).get(deliberation_id)
    form = {k: v for k, v in (await request.form(max_files=0, max_fields=40)).items() if isinstance(v, str)}
    number = form.get("__question", "")  # a name no answer's field has (the moderator's form has a field "question")
    question = d.questions.get(int(number)) if number.isdigit() else None
    if question is None:  # each form names its question: a stale or repeated one never answers the next
        raise UsageError("That question is not open any more (it was answered, withdrawn or timed out).", "The page shows what you are asked now.")
    seat = d.answer(question.id, request.state.user.name, answer_text(question, form))
    return HTMLResponse(fragment("live/answered.html", seat=seat))


@router.post("/deliberations/{deliberation_id}/stop")
async def stop(request: Request, deliberation_id: str):
    d = _deliberations(request).get(deliberation_id)
    user = request.state.user
    if user.name != d.started_by and not user.is_admin:
        raise UsageError("Only the person who started a deliberation (or an admin) can stop it.", "Ask them to stop it.")
    d.stop(user.name)
    return RedirectResponse(f"/deliberations/{d.id}", status_code=303)


@router.get("/deliberations/{deliberation_id}/stream")
async def stream(request: Request, deliberation_id: str, after: int = -1) -> StreamingResponse:
    d = _deliberations(request).get(deliberation_id)
    resumed = request.headers.get("last-event-id", "")  # the browser reconnecting says what it has
    if resumed.isdigit():
        after = max(after, int(resumed))

    async def events():
        async for message in d.stream(after):
            if await request.is_disconnected():
                return
            if message is None:
                yield ": keepalive\n\n"
                continue
            data = "\n".join(f"data: {line}" for line in (message.html or " ").splitlines() or [" "])
            yield f"id: {message.seq}\nevent: {message.type}\n{data}\n\n"
        yield "event: end\ndata: end\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@router.get("/deliberations/{deliberation_id}/slides/{index}")
async def slide(request: Request, deliberation_id: str, index: int) -> FileResponse:
    """A slide of the case: only the files the case's loader accepted (inside its folder), never a path from the URL."""
    slides = image_slides(_deliberations(request).get(deliberation_id))
    if not 0 <= index < len(slides):
        raise UsageError(f"The case has no slide {index + 1}.", "The slides are listed beside the transcript.")
    path = Path(slides[index].image)
    kind = image_format(path.read_bytes()[:16]) if path.is_file() else None
    if kind is None:
        raise UsageError(f"Slide {index + 1} is not an image file.", "Check the case's slides.")
    return FileResponse(path, media_type=f"image/{kind}")
