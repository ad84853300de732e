"""CLI subcommands. Each module exposes ``register(subparsers)``, adding its parser and setting
``func(args) -> int`` as the default; app/cli.py lists the modules."""
