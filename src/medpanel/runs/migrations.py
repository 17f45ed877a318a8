"""The store's schema, as named, append-only migrations applied in order (runs/store.py applies them).

Never edit a migration that has shipped: add a new one at the end. A store records which it has applied,
so an old file is brought up to date the first time a newer medpanel opens it.
"""

from __future__ import annotations

MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_initial",
        """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            finished_at REAL,
            status TEXT NOT NULL,            -- running | done | interrupted | stopped (budget) | failed
            dataset TEXT NOT NULL,
            protocol TEXT NOT NULL,
            models TEXT NOT NULL,            -- JSON list of model specs
            settings TEXT NOT NULL,          -- JSON: everything needed to resume the run as it was started
            message TEXT
        );
        CREATE TABLE items (
            run_id TEXT NOT NULL REFERENCES runs(id),
            item_id TEXT NOT NULL,
            repeat INTEGER NOT NULL,
            status TEXT NOT NULL,            -- done | failed
            outcome TEXT,                    -- JSON
            error TEXT,
            error_kind TEXT,
            started_at REAL,
            finished_at REAL,
            input_tokens INTEGER DEFAULT 0,
            output_tokens INTEGER DEFAULT 0,
            cost_usd REAL DEFAULT 0,
            calls INTEGER DEFAULT 0,
            cached_calls INTEGER DEFAULT 0,
            PRIMARY KEY (run_id, item_id, repeat)
        );
        CREATE TABLE events (
            run_id TEXT NOT NULL,
            item_id TEXT NOT NULL,
            repeat INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            event TEXT NOT NULL,             -- JSON of medpanel.transcript.Event
            PRIMARY KEY (run_id, item_id, repeat, seq)
        );
        CREATE TABLE scores (
            run_id TEXT NOT NULL,
            item_id TEXT NOT NULL,
            repeat INTEGER NOT NULL,
            name TEXT NOT NULL,
            value REAL,
            PRIMARY KEY (run_id, item_id, repeat, name)
        );
        CREATE TABLE calls (
            key TEXT PRIMARY KEY,            -- sha256 of (model, messages, schema, semantic options, sample index)
            model TEXT NOT NULL,
            record TEXT NOT NULL,            -- JSON: text, usage, finish_reason, cost, latency, request
            created_at REAL NOT NULL
        );
        CREATE TABLE call_log (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            key TEXT NOT NULL,
            model TEXT NOT NULL,
            cached INTEGER NOT NULL,
            run_id TEXT,
            item_id TEXT,
            repeat INTEGER,
            at REAL NOT NULL
        );
        CREATE INDEX call_log_item ON call_log (run_id, item_id, repeat);
        """,
    ),
    (
        # call_log.error: set when the call failed for good. (No SQL comment inside ALTER TABLE: SQLite
        # splices the column text into the stored CREATE statement, and a trailing comment would eat its ')'.)
        "0002_call_log_error",
        "ALTER TABLE call_log ADD COLUMN error TEXT",
    ),
    (
        # The call log becomes the ledger of what each item spent: every made call's tokens and dollars,
        # so failed items, re-asks and judge calls are all counted.
        "0003_call_log_usage",
        """
        ALTER TABLE call_log ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE call_log ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE call_log ADD COLUMN cost_usd REAL NOT NULL DEFAULT 0
        """,
    ),
    (
        # served_model: the model id the server reported (a dated snapshot behind an alias such as
        # gpt-4o). truncated: 1 when the token limit cut the reply; NULL where unknown (failed calls,
        # rows logged before this migration).
        "0004_call_log_served_model_truncated",
        """
        ALTER TABLE call_log ADD COLUMN served_model TEXT;
        ALTER TABLE call_log ADD COLUMN truncated INTEGER
        """,
    ),
    (
        # What a model server was found to accept (e.g. which structured-output form), keyed by its base
        # URL and model name, so a later run does not pay the rejected first request again.
        "0005_server_capabilities",
        """
        CREATE TABLE server_capabilities (
            base_url TEXT NOT NULL,
            model TEXT NOT NULL,
            name TEXT NOT NULL,              -- e.g. response_format
            value TEXT NOT NULL,             -- JSON: what was learned
            updated_at REAL NOT NULL,
            PRIMARY KEY (base_url, model, name)
        )
        """,
    ),
    (
        # One writer per run: the process that holds a run's lease (pid, host), and when it last said it is
        # alive. Taken and released in IMMEDIATE transactions; a stale one is taken over (see Store.acquire_lease).
        "0006_run_leases",
        """
        CREATE TABLE leases (
            run_id TEXT PRIMARY KEY,
            token TEXT NOT NULL,             -- random, per holder: tells two holders in one process apart
            pid INTEGER NOT NULL,
            host TEXT NOT NULL,
            heartbeat_at REAL NOT NULL,
            started_at REAL NOT NULL
        )
        """,
    ),
    (
        # People who may use the web app when it is not bound to loopback (`medpanel users add`). Only a hash
        # of each person's access token is kept: a copied store file gives nobody a way in.
        "0007_web_users",
        """
        CREATE TABLE users (
            name TEXT PRIMARY KEY,
            role TEXT NOT NULL,              -- clinician | rater | admin
            token_hash TEXT NOT NULL,        -- sha256 hex of the token (random, 32 bytes: no salt needed)
            created_at REAL NOT NULL
        )
        """,
    ),
    (
        # Blinded human rating (medpanel.rating, docs/rating.md). A session rates the answers of one or more runs
        # over the same items: rating_systems is the only link from a hidden system number to its run (read in
        # analysis only), rating_items the answers as shown (letters per item), ratings every verdict given.
        "0008_rating_sessions",
        """
        CREATE TABLE rating_sessions (
            id TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            rubric TEXT NOT NULL,            -- a name in medpanel.rating.rubrics.RUBRICS
            dimensions TEXT NOT NULL,        -- JSON list: the rubric dimensions asked in this session
            seed INTEGER NOT NULL,           -- orders the letters per item and the items per rater
            raters TEXT NOT NULL,            -- JSON list of the primary raters' names
            adjudicator TEXT,                -- asked only where an item's two raters disagree
            note TEXT
        );
        CREATE TABLE rating_systems (
            session_id TEXT NOT NULL,
            system INTEGER NOT NULL,         -- hidden number, never shown to a rater
            run_id TEXT NOT NULL,
            PRIMARY KEY (session_id, system)
        );
        CREATE TABLE rating_items (
            session_id TEXT NOT NULL,
            item INTEGER NOT NULL,           -- 1..N within the session
            item_id TEXT NOT NULL,
            repeat INTEGER NOT NULL,
            prompt TEXT NOT NULL,            -- JSON: what the rater reads before the answers
            raters TEXT NOT NULL,            -- JSON list: the item's two primary raters
            adjudicator TEXT,
            PRIMARY KEY (session_id, item)
        );
        CREATE TABLE rating_answers (
            session_id TEXT NOT NULL,
            item INTEGER NOT NULL,
            system INTEGER NOT NULL,
            letter TEXT NOT NULL,            -- A, B, C ... in the order shown for this item
            text TEXT NOT NULL,
            PRIMARY KEY (session_id, item, system)
        );
        CREATE TABLE ratings (
            session_id TEXT NOT NULL,
            rater TEXT NOT NULL,
            item INTEGER NOT NULL,
            system INTEGER NOT NULL,
            dimension TEXT NOT NULL,
            value INTEGER NOT NULL,
            role TEXT NOT NULL,              -- primary | adjudicator
            at REAL NOT NULL,
            PRIMARY KEY (session_id, rater, item, system, dimension)
        );
        CREATE INDEX ratings_item ON ratings (session_id, item)
        """,
    ),
    (
        "0009_training_runs",
        """
        CREATE TABLE training_runs (
            id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,              -- sft | grpo
            out_dir TEXT NOT NULL,           -- where its checkpoints and training.json are
            settings TEXT NOT NULL,          -- JSON: every setting of the run
            data TEXT NOT NULL,              -- JSON: the data files' SHA-256
            seed INTEGER NOT NULL,
            status TEXT NOT NULL,            -- running | done | failed | interrupted | stopped (a budget cap)
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            summary TEXT                     -- JSON: the final record (training.json) once done
        );
        CREATE TABLE training_steps (
            run_id TEXT NOT NULL,
            step INTEGER NOT NULL,
            phase TEXT NOT NULL,             -- train | eval | end (the trainer's closing summary)
            metrics TEXT NOT NULL,           -- JSON: loss, reward and its terms, validation reward ...
            at REAL NOT NULL,
            PRIMARY KEY (run_id, step, phase)
        )
        """,
    ),
]
