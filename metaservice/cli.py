"""The ``metaservice`` command: serve the REST API, manage its database schema and tokens, open
DuckDB on the catalog, and show where the OpenLineage outbox stands."""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
import threading
from pathlib import Path

from metaservice.core.barrier_time import barrier_text

try:
    from sqlalchemy.exc import SQLAlchemyError

    from metaservice.settings import Settings

    _SERVER_MISSING: str | None = None
except ModuleNotFoundError as _missing:  # the base install: the client and the plugin alone
    _SERVER_MISSING = _missing.name

logger = logging.getLogger("metaservice")


class CommandError(Exception):
    """A failure reported to the operator as one line."""


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {k: v for k, v in {"host": getattr(args, "host", None),
                                   "port": getattr(args, "port", None),
                                   "database_url": getattr(args, "database_url", None)}.items()
                 if v is not None}
    try:
        return Settings(**overrides)
    except ValueError as exc:
        first = exc.errors()[0] if hasattr(exc, "errors") else {"msg": str(exc)}  # type: ignore[attr-defined]
        raise CommandError(f"invalid configuration: {first.get('msg', exc)}") from None


def _engine(settings: Settings):  # type: ignore[no-untyped-def]
    from metaservice.db.engine import DatabaseURLError, build_engine

    try:
        return build_engine(settings.database_url,
                            sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms)
    except (DatabaseURLError, SQLAlchemyError, ImportError) as exc:
        raise CommandError(f"cannot use database URL {_safe_url(settings.database_url)}: "
                           f"{exc}") from None


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - only for the message
        return "<unparseable URL>"


def _upgrade(settings: Settings) -> str | None:
    from metaservice.db.migrate import current_revision, upgrade_to_head

    engine = _engine(settings)
    try:
        upgrade_to_head(engine)
        return current_revision(engine)
    except SQLAlchemyError as exc:
        raise CommandError(f"database {_safe_url(settings.database_url)} is unreachable or "
                           f"unusable: {_first_line(exc)}") from None
    finally:
        engine.dispose()


def cmd_serve(args: argparse.Namespace) -> None:
    import uvicorn

    from metaservice.app import create_app
    from metaservice.logging_config import configure_logging
    from metaservice.settings import is_loopback

    settings = _settings(args)
    configure_logging(settings.log_format, settings.log_level)
    if settings.auth == "disabled" and not is_loopback(settings.host):
        raise CommandError(
            f"refusing to serve on {settings.host} without authentication: set "
            "METASERVICE_AUTH=required (and create tokens with `metaservice token create`), "
            "or listen on a loopback address such as 127.0.0.1")
    if not args.no_migrate:
        revision = _upgrade(settings)
        logger.info("database at revision %s (%s)", revision, _safe_url(settings.database_url))
    app = create_app(settings)
    # What is built by now (modules, the app, its schemas) lives as long as the process: kept
    # out of every garbage collection, the periodic full collections of a busy server scan a
    # fraction of the heap (a fifth less CPU for GET /delay at 1,000 tables).
    gc.collect()
    gc.freeze()
    # Our handler formats uvicorn's records too (log_config=None keeps uvicorn from replacing it).
    try:
        uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                    log_config=None, workers=1, timeout_keep_alive=settings.keep_alive_seconds)
    finally:
        # Closing the connections checkpoints SQLite's write-ahead log: after Ctrl-C or SIGTERM
        # only the database file is left, no -wal or -shm beside it.
        app.state.database.dispose()


def cmd_db_upgrade(args: argparse.Namespace) -> None:
    settings = _settings(args)
    print(f"database {_safe_url(settings.database_url)} at revision {_upgrade(settings)}")


def cmd_db_current(args: argparse.Namespace) -> None:
    from metaservice.db.migrate import current_revision, head_revision

    settings = _settings(args)
    missing = _missing_sqlite_file(settings.database_url)
    if missing is not None:  # connecting would create it: a look must leave nothing behind
        print(f"(no database) {missing} does not exist: `metaservice db upgrade` or "
              "`metaservice serve` creates it")
        sys.exit(1)
    engine = _engine(settings)
    try:
        current = current_revision(engine)
    except SQLAlchemyError as exc:
        raise CommandError(f"database {_safe_url(settings.database_url)} is unreachable: "
                           f"{_first_line(exc)}") from None
    finally:
        engine.dispose()
    head = head_revision()
    state = "up to date" if current == head else f"head is {head}: run `metaservice db upgrade`"
    print(f"{current or '(empty)'} ({state})")
    if current != head:  # scripts and health checks can tell by the exit status
        sys.exit(1)


def _missing_sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL when it does not exist (SQLite would create it on connect)."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - _engine reports a bad URL
        return None
    database = parsed.database
    if (parsed.get_backend_name() != "sqlite" or not database or database == ":memory:"
            or database.startswith("file:")):
        return None
    path = Path(database).absolute()
    return None if path.exists() else path


def _write_transaction(settings: Settings):  # type: ignore[no-untyped-def]
    from metaservice.db.session import Database

    return Database(_engine(settings)).transaction(write=True)


def cmd_token_create(args: argparse.Namespace) -> None:
    from metaservice.auth.policy import Role
    from metaservice.auth.service import create_token
    from metaservice.clock import SystemClock
    from metaservice.errors import TokenExistsError

    settings = _settings(args)
    try:
        with _write_transaction(settings) as session:
            created = create_token(session, args.name, Role[args.role], SystemClock().now_ms())
    except TokenExistsError as exc:
        raise CommandError(exc.message) from None
    except SQLAlchemyError as exc:
        raise CommandError(f"cannot store the token: {_first_line(exc)} "
                           "(is the database migrated? `metaservice db upgrade`)") from None
    print(f"created {created.role.name} token {created.name!r}; it is shown only once:",
          file=sys.stderr)
    print(created.token)


def cmd_token_list(args: argparse.Namespace) -> None:
    from metaservice.auth.service import list_tokens

    settings = _settings(args)
    try:
        with _write_transaction(settings) as session:
            tokens = [(t.name, t.role, t.revoked_at) for t in list_tokens(session)]
    except SQLAlchemyError as exc:
        raise CommandError(f"cannot list tokens: {_first_line(exc)}") from None
    for name, role, revoked_at in tokens:
        print(f"{name}\t{role}\t{'revoked' if revoked_at else 'active'}")


def cmd_token_revoke(args: argparse.Namespace) -> None:
    from metaservice.auth.service import revoke_token
    from metaservice.clock import SystemClock
    from metaservice.errors import LastAdminError, UnknownTokenError

    settings = _settings(args)
    try:
        with _write_transaction(settings) as session:
            revoke_token(session, args.name, SystemClock().now_ms())
    except (UnknownTokenError, LastAdminError) as exc:
        raise CommandError(exc.message) from None
    except SQLAlchemyError as exc:
        raise CommandError(f"cannot revoke the token: {_first_line(exc)}") from None
    print(f"revoked token {args.name!r}")


def cmd_lineage(args: argparse.Namespace) -> None:
    """Where the OpenLineage outbox stands: events waiting, jobs whose delivery failed, and per
    job the next event to deliver."""
    from metaservice.clock import SystemClock
    from metaservice.lineage.sender import configured_in_environment
    from metaservice.repositories import lineage as outbox_repo

    settings = _settings(args)
    try:
        with _write_transaction(settings) as session:
            standing = outbox_repo.standing(session)
            jobs = outbox_repo.job_standings(session, args.jobs)
    except SQLAlchemyError as exc:
        raise CommandError(f"cannot read the outbox: {_first_line(exc)} "
                           "(is the database migrated? `metaservice db upgrade`)") from None
    now = SystemClock().now_ms()
    configured = ("configured" if configured_in_environment()
                  else "not configured here (no events are written)")
    print(f"OpenLineage: {configured}")
    oldest = ("" if standing.oldest_created_at is None
              else f", oldest {_age(now - standing.oldest_created_at)} old")
    print(f"outbox: {standing.pending} events pending, {standing.failing_jobs} jobs failing"
          f"{oldest}")
    if jobs:
        print("job\tpending\tnext event\tage\tattempts\tnext try\tlast error")
    for job in jobs:
        retry = "now" if job.next_attempt_at <= now else f"in {_age(job.next_attempt_at - now)}"
        print(f"{job.job}\t{job.pending}\t{job.head_event_type} "
              f"{barrier_text(job.head_barrier, integer=True)}\t"
              f"{_age(now - job.head_created_at)}\t{job.attempts}\t{retry}\t"
              f"{job.last_error or '-'}")


def cmd_lineage_send(args: argparse.Namespace) -> None:
    """Deliver the outbox's OpenLineage events from this process, configured as the server is
    (``OPENLINEAGE_*`` and the database), until SIGTERM or Ctrl-C; with ``--once``, until the
    outbox holds nothing more to deliver now (exit 2 when a delivery failed). Senders claim
    jobs, so any number of them, and server threads, can run at once: a job's events still go
    out in order."""
    from metaservice.db.engine import build_engine
    from metaservice.db.session import Database
    from metaservice.lineage.sender import OutboxSender, client_from_environment

    settings = _settings(args)
    client = client_from_environment()
    if client is None:
        raise CommandError("OpenLineage is not configured here: set OPENLINEAGE_URL, "
                           "OPENLINEAGE__TRANSPORT__* or an openlineage.yml, as for the server")
    database = Database(build_engine(settings.database_url,
                                     sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms))
    # A process of its own: nothing to leave the interpreter to, so no rest between deliveries.
    sender = OutboxSender.with_client(
        database, client, poll_seconds=settings.lineage_poll_seconds,
        claim_seconds=settings.lineage_claim_seconds,
        max_backoff_seconds=settings.lineage_max_backoff_seconds, duty=1.0)
    try:
        if args.once:
            delivered = 0
            while (count := sender.run_once()) > 0:
                delivered += count
            print(f"delivered {delivered} events; {sender.counts.failed} deliveries failed")
            if sender.counts.failed:  # the failed jobs' events wait in the outbox
                raise CommandError("some events were not delivered: `metaservice lineage` "
                                   "shows which jobs wait, and their last error")
            return
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        sender.start()
        stop.wait()
        sender.stop()
        print(f"delivered {sender.counts.sent} events; {sender.counts.failed} deliveries failed")
    except SQLAlchemyError as exc:
        raise CommandError(f"cannot read the outbox: {_first_line(exc)} "
                           "(is the database migrated? `metaservice db upgrade`)") from None
    finally:
        database.engine.dispose()


def _age(ms: int) -> str:
    seconds = max(0, ms) / 1000
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"


def _first_line(exc: Exception) -> str:
    return str(getattr(exc, "orig", exc)).strip().splitlines()[0]


def cmd_duckdb(args: argparse.Namespace) -> None:
    from metaservice.duckdb_offline import ExtensionMissingError, exec_shell

    try:
        exec_shell(args.arguments)
    except ExtensionMissingError as exc:
        raise CommandError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="metaservice", description=__doc__)
    parser.add_argument("--database-url", help="overrides METASERVICE_DATABASE_URL")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="migrate the database, then serve the REST API")
    serve.add_argument("--host", help="overrides METASERVICE_HOST (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="overrides METASERVICE_PORT (default 8000)")
    serve.add_argument("--no-migrate", action="store_true", help="do not migrate at start")
    serve.set_defaults(func=cmd_serve)

    db = sub.add_parser("db", help="database schema (Alembic migrations)")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    db_sub.add_parser("upgrade", help="migrate to the newest revision").set_defaults(
        func=cmd_db_upgrade)
    db_sub.add_parser("current", help="print the current revision").set_defaults(
        func=cmd_db_current)

    token = sub.add_parser("token", help="bearer tokens (stored hashed)")
    token_sub = token.add_subparsers(dest="token_command", required=True)
    create = token_sub.add_parser("create", help="create a token and print it once")
    create.add_argument("--name", required=True)
    create.add_argument("--role", required=True, choices=["reader", "writer", "admin"])
    create.set_defaults(func=cmd_token_create)
    token_sub.add_parser("list", help="list tokens (names and roles, never values)").set_defaults(
        func=cmd_token_list)
    revoke = token_sub.add_parser("revoke", help="revoke a token by name")
    revoke.add_argument("name")
    revoke.set_defaults(func=cmd_token_revoke)

    lineage = sub.add_parser("lineage", help="where the OpenLineage outbox stands: events "
                                             "pending, per job the next to deliver")
    lineage.add_argument("--jobs", type=int, default=20, help="jobs listed (default 20)")
    lineage.set_defaults(func=cmd_lineage)
    lineage_send = sub.add_parser(
        "lineage-send", help="deliver the OpenLineage outbox from this process (beside servers "
                             "run with METASERVICE_LINEAGE_SENDER=none)")
    lineage_send.add_argument("--once", action="store_true",
                              help="deliver what is there now, then exit")
    lineage_send.set_defaults(func=cmd_lineage_send)

    # Everything after `duckdb` is DuckDB's own (`-c SQL`, a database file, `-help`, ...).
    duckdb = sub.add_parser(
        "duckdb", prefix_chars="+", add_help=False,
        help="DuckDB's shell with its Iceberg extension loaded from the installed packages (no "
             "download; needs the spark extra); the arguments are duckdb's")
    duckdb.add_argument("arguments", nargs=argparse.REMAINDER)
    duckdb.set_defaults(func=cmd_duckdb, server=False)
    return parser


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    if _SERVER_MISSING is not None and getattr(args, "server", True):
        print(f"metaservice: error: the server needs the server extra ({_SERVER_MISSING} is "
              "missing): pip install 'metaservice[server]'", file=sys.stderr)
        sys.exit(2)
    try:
        args.func(args)
    except CommandError as exc:
        print(f"metaservice: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
