"""The ``metaservice`` command: serve, and manage the database schema."""

from __future__ import annotations

import argparse
import logging
import sys

from sqlalchemy.exc import SQLAlchemyError

from metaservice.settings import Settings

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
        reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
        raise CommandError(f"database {_safe_url(settings.database_url)} is unreachable or "
                           f"unusable: {reason}") from None
    finally:
        engine.dispose()


def cmd_serve(args: argparse.Namespace) -> None:
    import uvicorn

    from metaservice.app import create_app

    settings = _settings(args)
    if not args.no_migrate:
        revision = _upgrade(settings)
        logger.info("database at revision %s (%s)", revision, _safe_url(settings.database_url))
    app = create_app(settings)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                workers=1)


def cmd_db_upgrade(args: argparse.Namespace) -> None:
    settings = _settings(args)
    print(f"database {_safe_url(settings.database_url)} at revision {_upgrade(settings)}")


def cmd_db_current(args: argparse.Namespace) -> None:
    from metaservice.db.migrate import current_revision, head_revision

    settings = _settings(args)
    engine = _engine(settings)
    try:
        current = current_revision(engine)
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
        raise CommandError(f"database {_safe_url(settings.database_url)} is unreachable: "
                           f"{reason}") from None
    finally:
        engine.dispose()
    head = head_revision()
    state = "up to date" if current == head else f"head is {head}: run `metaservice db upgrade`"
    print(f"{current or '(empty)'} ({state})")


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
    return parser


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except CommandError as exc:
        print(f"metaservice: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
