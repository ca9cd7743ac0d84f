"""The server tests' model, clips and server, shared by the folder's files: built and started once
(scope "package": in a folder without __init__.py pytest keeps them to the session's end).

`twin`: a tiny model folder whose transcripts differ from clip to clip; `clips`: FLAC clips and a
long-form recording of them; `reference`: `speechlm transcribe`'s text for each; `server`: a server of
the twin (tests/serve/serve_helpers.py's Server) with upload and duration limits."""

from __future__ import annotations

import numpy as np
import pytest

from serve_helpers import KEY, LIMITS, SR, Server, flac, varied_twin


@pytest.fixture(scope="package")
def twin(tmp_path_factory):
    """A tiny Granite + Qwen3 twin whose transcripts differ from clip to clip, saved as a model folder."""
    return varied_twin(tmp_path_factory.mktemp("twin") / "twin", seed=0)


@pytest.fixture(scope="package")
def clips(synthetic_shards, tmp_path_factory):
    """The synthetic set's 8 test clips as FLAC files, and a ~75 s recording of them three times over
    with pauses between sentences (cut by the long-form segments)."""
    from speechlm.inference import dataset_clips

    folder = tmp_path_factory.mktemp("clips")
    _, data = dataset_clips(str(synthetic_shards), split="test")
    waves = [np.asarray(w, np.float32) for _, w, _ in data]
    paths = []
    for i, w in enumerate(waves):
        paths.append(folder / f"clip{i}.flac")
        paths[-1].write_bytes(flac(w))
    rng = np.random.default_rng(0)
    parts = []
    for _ in range(3):
        for w in waves:
            parts += [w, np.zeros(int(SR * rng.uniform(0.8, 1.5)), np.float32)]
    recording = folder / "recording.flac"
    recording.write_bytes(flac(np.concatenate(parts)))
    return paths, recording


@pytest.fixture(scope="package")
def reference(twin, clips):
    """`speechlm transcribe`'s texts for every clip and the recording: all in one batched job, and
    each clip alone (a clip's text must not depend on its batch mates, or no server could match it)."""
    from speechlm.inference import transcribe_files
    from speechlm.model import from_pretrained

    paths, recording = clips
    model = from_pretrained(twin)
    together = transcribe_files(model, [str(p) for p in [*paths, recording]])
    alone = [transcribe_files(model, [str(p)])[0] for p in paths]
    assert together[:-1] == alone
    assert len(set(alone)) >= 4 and all(alone)  # texts that tell the clips apart
    return dict(zip([p.name for p in [*paths, recording]], together))


@pytest.fixture(scope="package")
def server(twin, tmp_path_factory):
    s = Server(twin, tmp_path_factory.mktemp("logs") / "server.log", "--max-batch", "8", "--max-wait-ms", "20", *LIMITS)
    yield s
    s.stop()
    assert KEY not in s.log.read_text()
