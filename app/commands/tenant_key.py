"""``scaling-grader tenant-key``: a new API key and the digest to put in the tenants file."""

from __future__ import annotations

import argparse

from app.tenants import new_key


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("tenant-key", help="make an API key and its SHA-256 digest")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    key, digest = new_key()
    print(f"key (give to the tenant):       {key}")
    print(f"key_sha256 (tenants file):      {digest}")
    print("(or list the digest under reward_key_sha256: then the key works only in the reward URL "
          "/get_reward/<key>, for trainers that cannot send a header)")
    return 0
