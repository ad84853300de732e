"""The test suite's fake OpenAI-compatible judge (tests/fake_openai.py), served on the compose
network for the stack tests: `python fake_judge.py --port 8000` inside a container."""

from __future__ import annotations

import argparse
import threading
from http.server import ThreadingHTTPServer

import fake_openai


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8000)
    port = parser.parse_args().port

    class OnComposeNetwork(ThreadingHTTPServer):
        # FakeOpenAI binds loopback on a free port; in its container it must answer other
        # containers on a known port instead.
        def __init__(self, _address: object, handler: type) -> None:
            super().__init__(("0.0.0.0", port), handler)

    fake_openai.ThreadingHTTPServer = OnComposeNetwork
    fake_openai.FakeOpenAI().start()
    print(f"fake judge listening on port {port}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
