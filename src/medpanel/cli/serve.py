"""`medpanel serve`: the web app; `medpanel users`: the people who may use it off loopback."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Optional

import typer

from medpanel.cli.common import JsonOpt, StoreOpt, app, err, open_store, out, print_json
from medpanel.errors import MissingExtraError, UsageError

users_app = typer.Typer(no_args_is_help=True, help="People who may sign in to the web app (`medpanel serve`), each with their own token.")
app.add_typer(users_app, name="users")


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", envvar="MEDPANEL_HOST", help="Address to bind. Anything but loopback needs an access token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", envvar="MEDPANEL_PORT", min=1, max=65535, help="Port to listen on.")] = 8000,
    token: Annotated[Optional[str], typer.Option("--token", envvar="MEDPANEL_WEB_TOKEN", help="Admin access token (default off loopback: a random one, printed).")] = None,
    board: Annotated[Optional[Path], typer.Option("--board", envvar="MEDPANEL_SERVE_BOARD", help="Open a live board on this case folder at start, on --model.")] = None,
    cases: Annotated[Optional[Path], typer.Option("--cases", envvar="MEDPANEL_CASES", help="Folder of case folders offered on the start page (default: ./examples if present).")] = None,
    model: Annotated[str, typer.Option("--model", "-m", envvar="MEDPANEL_MODEL", help="Default model for every seat.")] = "local",
    allow_model: Annotated[Optional[list[str]], typer.Option("--allow-model", envvar="MEDPANEL_ALLOW_MODEL", help="Another model spec the start page may use (repeatable); a page can never name a model, server or file itself.")] = None,
    seat_timeout: Annotated[float, typer.Option("--seat-timeout", envvar="MEDPANEL_SEAT_TIMEOUT", min=5, help="Seconds a deliberation waits for a person in a seat.")] = 600.0,
    on_timeout: Annotated[str, typer.Option("--on-timeout", envvar="MEDPANEL_ON_TIMEOUT", help="When a person does not answer in time: stop (resumable) or pass (their turn is skipped).")] = "stop",
    timeout: Annotated[float, typer.Option("--timeout", envvar="MEDPANEL_TIMEOUT", min=1, help="Seconds one model call may take.")] = 300.0,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Serve the web app: start a deliberation and watch it live, take a seat at the table, browse runs and
    their reports, rate answers blinded. Binds to loopback unless told otherwise."""
    missing = [m for m in ("fastapi", "uvicorn", "jinja2", "python_multipart") if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtraError("The web app", "web", missing[0].replace("_", "-"))
    import uvicorn

    from medpanel.web.app import create_app
    from medpanel.web.config import TIMEOUT_ACTIONS, WebConfig, is_loopback

    if on_timeout not in TIMEOUT_ACTIONS:
        raise UsageError(f"--on-timeout '{on_timeout}' is not one of {', '.join(TIMEOUT_ACTIONS)}.", "Use stop or pass.")
    cases_dir = cases if cases is not None else (Path("examples") if Path("examples").is_dir() else None)
    if cases_dir is not None and not cases_dir.is_dir():
        raise UsageError(f"--cases {cases_dir} is not a folder.", "Point at a folder of case folders (each with case.yaml).")
    if board is not None:
        from medpanel.cases import load_case

        load_case(board)  # a bad case is refused here, before the server starts
    db = open_store(store)
    config = WebConfig(store_path=db.path, host=host, token=token, cases_dir=cases_dir.resolve() if cases_dir else None, default_model=model,
                       seat_timeout_s=seat_timeout, on_timeout=on_timeout, timeout_s=timeout, start_board=board,
                       allowed_models=tuple(allow_model or ())).with_token()
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    url = f"http://{shown}:{port}/"
    printed_token = config.token if not is_loopback(host) and token is None else None
    if as_json:  # one line a script can read before the server starts answering
        print_json({"url": url, "token": printed_token, "store": str(db.path)})
    else:
        if printed_token:
            err.print(f"Access token (give it to sign in; it is not shown again): {printed_token}", markup=False)
        err.print(f"medpanel web app on {url}" + (" (a live board opens at start: see Live)" if board else ""), markup=False)
    # A live page holds its event stream open: without a bound on the graceful shutdown, Ctrl-C would wait for it.
    uvicorn.run(create_app(config, db), host=host, port=port, log_level="warning", timeout_graceful_shutdown=3)


@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(help="The person's name as shown in the app.")],
    role: Annotated[str, typer.Option("--role", envvar="MEDPANEL_USER_ROLE", help="clinician (takes seats), rater (rates answers) or admin.")] = "clinician",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add a person (or give them a new token): prints their access token once; only its hash is stored."""
    from medpanel.web import auth

    db = open_store(store)
    name, role = auth.check_user_name(name), auth.check_role(role)
    token = auth.new_token()
    db.add_user(name, role, auth.token_hash(token))
    if as_json:
        print_json({"name": name, "role": role, "token": token})
        return
    out.print(f"{name} ({role}) can sign in with this token (shown once):", markup=False)
    typer.echo(token)


@users_app.command("list")
def users_list(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """The people who may sign in, with their roles."""
    rows = open_store(store).users()
    if as_json:
        print_json(rows)
        return
    for row in rows:
        out.print(f"{row['name']}\t{row['role']}", markup=False)
    if not rows:
        err.print("No users yet: add one with `medpanel users add NAME`.", markup=False)


@users_app.command("remove")
def users_remove(name: Annotated[str, typer.Argument(help="The person to remove; their token stops working.")], store: StoreOpt = None,
                 as_json: JsonOpt = False) -> None:
    """Remove a person: their token stops working at once."""
    if not open_store(store).remove_user(name):
        raise UsageError(f"There is no user '{name}'.", "See `medpanel users list`.")
    if as_json:
        print_json({"removed": name})
        return
    out.print(f"removed {name}", markup=False)
