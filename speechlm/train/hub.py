"""Background uploads of exported checkpoints to the Hugging Face Hub.

Training never waits on the network and never dies of it: uploads run in one daemon thread,
each is retried with backoff, and a final failure is reported (without the token) and counted.
The token is read from the environment (HF_TOKEN) by huggingface_hub itself; it is never passed
through our config, printed, logged or saved.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from pathlib import Path

log = logging.getLogger("speechlm.train")


def _scrub(text: str) -> str:
    token = os.environ.get("HF_TOKEN")
    return text.replace(token, "***") if token else text


class HubUploader:
    def __init__(self, repo_id: str, private: bool = True, retries: int = 3, backoff_s: float = 5.0):
        self.repo_id = repo_id
        self.private = private
        self.retries = retries
        self.backoff_s = backoff_s
        self.failures: list[str] = []
        self.uploaded: list[str] = []
        self.submitted: list[tuple[str, list[str]]] = []  # (message, the files handed over): what a push sends
        self._q: queue.Queue = queue.Queue()
        self._repo_ready = False
        self._thread = threading.Thread(target=self._run, name="hub-upload", daemon=True)
        self._thread.start()

    def submit(self, folder: str | Path, message: str) -> None:
        files = sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*") if p.is_file())
        self.submitted.append((message, files))
        self._q.put((Path(folder), message))

    def close(self, timeout: float | None = 600) -> None:
        """Wait for queued uploads (bounded), then stop the thread."""
        self._q.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("hub: uploads still running after %.0f s; leaving them (not fatal)", timeout or 0)

    def _run(self) -> None:
        while (item := self._q.get()) is not None:
            folder, message = item
            for attempt in range(1, self.retries + 1):
                try:
                    self._upload(folder, message)
                    self.uploaded.append(message)
                    log.info("hub: uploaded %s to %s (%s)", folder.name, self.repo_id, message)
                    break
                except Exception as e:  # network, auth, offline mode: report, retry, never raise
                    why = _scrub(f"{type(e).__name__}: {e}").splitlines()[0][:300]
                    if attempt == self.retries:
                        self.failures.append(message)
                        log.error(
                            "hub: upload of %s to %s FAILED after %d tries (%s); training goes on",
                            folder.name,
                            self.repo_id,
                            attempt,
                            why,
                        )
                    else:
                        log.warning(
                            "hub: upload of %s failed (try %d/%d: %s); retrying",
                            folder.name,
                            attempt,
                            self.retries,
                            why,
                        )
                        time.sleep(self.backoff_s * attempt)

    def _upload(self, folder: Path, message: str) -> None:
        from huggingface_hub import HfApi

        api = HfApi()  # token from HF_TOKEN / the login cache, never from our config
        if not self._repo_ready:
            api.create_repo(self.repo_id, private=self.private, exist_ok=True)
            self._repo_ready = True
        api.upload_folder(folder_path=str(folder), repo_id=self.repo_id, commit_message=message)
