"""A folder served over plain HTTP on 127.0.0.1 (python's http.server in a thread): the shard sets
at a URL of tests/data/test_data_remote.py and tests/inference/test_eval.py."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class HTTPFolder:
    """python's http.server on 127.0.0.1 serving `root`; stop() and start() again on the same port."""

    def __init__(self, root: Path):
        self.root, self.port, self.srv = root, 0, None
        self.start()

    def start(self) -> None:
        self.srv = http.server.ThreadingHTTPServer(
            ("127.0.0.1", self.port), functools.partial(_Quiet, directory=str(self.root))
        )
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"
