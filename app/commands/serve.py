"""``scaling-grader serve``: run the API with uvicorn."""

from __future__ import annotations

import argparse
import os


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="run the HTTP API")
    p.add_argument("--host", help="bind address (default: settings, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: settings, 8000)")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.add_argument("--log-level", default="info")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from app.settings import get_settings

    # Flags become settings so that every uvicorn worker process builds the same app.
    if args.host:
        os.environ["SCALING_GRADER_HOST"] = args.host
    if args.port is not None:
        os.environ["SCALING_GRADER_PORT"] = str(args.port)
    get_settings.cache_clear()
    settings = get_settings()
    uvicorn.run("app.main:create_app", factory=True, host=settings.host, port=settings.port,
                workers=args.workers, log_level=args.log_level, access_log=False)
    return 0
