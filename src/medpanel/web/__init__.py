"""The web app (`medpanel serve`): watch a deliberation live, take a seat at the table, browse runs and reports.

It is one more front end on the library the CLI uses: a deliberation is started with the runner's
`run_benchmark`, its turns reach the page through the run context's event listener, and a person's seat is
the context's `human_seat`. Nothing here re-implements a protocol. Needs the `web` extra.
"""
