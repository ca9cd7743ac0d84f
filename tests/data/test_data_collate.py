"""The collator: the batch format of docs/design.md, label masks and placeholder counts."""

from __future__ import annotations

import pickle
import shutil

import numpy as np
import pytest
import torch

from data_helpers import write_set
from speechlm import text
from speechlm.config import ConfigError, DataSet
from speechlm.data import Collator, TrainLoader
from speechlm.model import tiny
from speechlm.model.encoders import family_for
from speechlm.model.encoders.granite import num_feature_frames

PROMPT = "Transcribe the audio."


@pytest.fixture(scope="module")
def tok():
    return text.load_tokenizer(str(tiny.ensure("qwen3_5")), "<audio>")


@pytest.fixture(scope="module")
def granite():
    return family_for("tiny/granite_speech5")


@pytest.fixture(scope="module")
def whisper():
    return family_for("tiny/whisper")


def make(tok, pool_stride=1, family=None):
    family = family or family_for("tiny/granite_speech5")
    return Collator(tok, prompt=PROMPT, audio_token="<audio>", family=family, pool_stride=pool_stride)


def samples(lengths, texts):
    rng = np.random.default_rng(0)
    return [
        {"id": f"c{i}", "text": t, "audio": (0.1 * rng.standard_normal(n)).astype(np.float32), "weight": 1.0}
        for i, (n, t) in enumerate(zip(lengths, texts))
    ]


TEXTS = ["hello world", "the cat sat on the mat and the dog ran in the park", "one two"]
LENGTHS = [16000, 5000, 23456]


@pytest.mark.parametrize(
    "pool_stride,name", [(1, "granite"), (2, "granite"), (3, "granite"), (1, "whisper"), (4, "whisper")]
)
def test_placeholders_and_label_mask(tok, pool_stride, name, request):
    family = request.getfixturevalue(name)
    col = make(tok, pool_stride, family)
    batch = col(samples(LENGTHS, TEXTS))
    audio_id = text.audio_token_id(tok)
    for i, (n, t) in enumerate(zip(LENGTHS, TEXTS)):
        ids, labels, att = batch["input_ids"][i], batch["labels"][i], batch["attention_mask"][i]
        k = int(att.sum())
        assert att[:k].all() and not att[k:].any()  # right padding
        n_audio = family.audio_token_count(n, pool_stride)
        assert n_audio > 0 and int((ids == audio_id).sum()) == n_audio
        # the prefix is exactly what inference feeds the model
        prompt = text.prompt_ids(tok, n_audio, PROMPT)
        assert ids[: len(prompt)].tolist() == prompt
        assert (labels[: len(prompt)] == -100).all() and (labels[k:] == -100).all()
        kept = labels[labels != -100].tolist()
        assert kept == ids[len(prompt) : k].tolist()
        assert tok.decode(kept) == t + "<|im_end|>"


def test_batch_format(tok):
    col = make(tok)
    batch = col(samples(LENGTHS, TEXTS)[:2] + [dict(samples(LENGTHS, TEXTS)[2], weight=0.0)])
    B = 3
    assert batch["input_features"].dtype == torch.float32 and batch["input_features"].shape[::2] == (B, 320)
    assert batch["feature_mask"].dtype == torch.long
    assert batch["feature_mask"].sum(1).tolist() == [num_feature_frames(n) for n in LENGTHS]
    for key in ("input_ids", "attention_mask", "labels"):
        assert batch[key].dtype == torch.long and batch[key].shape[0] == B
    assert batch["input_ids"][batch["attention_mask"] == 0].eq(tok.pad_token_id).all()
    assert batch["weight"].tolist() == [1.0, 1.0, 0.0] and batch["weight"].dtype == torch.float32
    assert batch["ids"] == ["c0", "c1", "c2"]
    assert np.allclose(batch["audio_seconds"].numpy(), np.array(LENGTHS) / 16000)


def test_picklable(tok):
    col = make(tok)
    again = pickle.loads(pickle.dumps(col))
    a, b = col(samples(LENGTHS, TEXTS)), again(samples(LENGTHS, TEXTS))
    assert all(torch.equal(a[k], b[k]) for k in ("input_features", "input_ids", "labels"))


def test_loader_with_collator_in_workers(tmp_path, tok):
    path = write_set(tmp_path, "a", [3, 3, 2], min_s=0.3, max_s=0.8)
    col = make(tok)
    loader = TrainLoader([DataSet(str(path))], col, batch_size=2, num_workers=2, seed=1)
    batches = list(loader)
    assert len(batches) == loader.plan(0).steps
    for b in batches:
        n = [round(float(s) * 16000) for s in b["audio_seconds"]]
        assert (b["input_ids"] == text.audio_token_id(tok)).sum(1).tolist() == [col.num_audio_tokens(x) for x in n]
        assert all(
            tok.decode(row[row != -100].tolist()) == f"clip {i}<|im_end|>" for row, i in zip(b["labels"], b["ids"])
        )


def test_real_shards_two_ranks(synthetic_shards, tok):
    """The shard pipeline's output (speechlm.shard) through the reader and the real collator."""
    import json

    manifest = json.loads((synthetic_shards / "manifest.json").read_text())
    ids = [i for sh in manifest["splits"]["train"]["shards"] for i in sh["ids"]]
    ls = [
        TrainLoader(
            [DataSet(str(synthetic_shards))], make(tok), batch_size=4, rank=r, world_size=2, num_workers=2, seed=3
        )
        for r in range(2)
    ]
    steps = ls[0].steps_per_epoch
    runs = [list(l) for l in ls]
    assert [len(r) for r in runs] == [steps, steps]
    seen = sorted(i for r in runs for b in r for i, w in zip(b["ids"], b["weight"].tolist()) if w > 0)
    assert seen == sorted(ids)
    b = runs[0][0]
    assert b["input_features"].shape[-1] == 320 and b["labels"].ne(-100).any()


def test_shared_memory_estimate_covers_the_largest_batch(tmp_path, tok):
    """Workers hand batches over in /dev/shm; the up-front check must not underestimate a batch."""
    from speechlm.data.limits import largest_batch_seconds

    path = write_set(tmp_path, "a", [6, 6], min_s=0.3, max_s=1.5)
    collator = make(tok)
    loader = TrainLoader([DataSet(str(path))], collator, batch_size=4, num_workers=0, seed=1)
    plan = loader.plan(0)
    batches = list(loader)
    actual = max(sum(t.numel() * t.element_size() for t in b.values() if isinstance(t, torch.Tensor)) for b in batches)
    estimate = largest_batch_seconds(loader.catalog, plan.workers[0]) * collator.bytes_per_audio_second
    assert actual * 0.9 <= estimate <= actual * 1.25, (estimate, actual)


def test_too_little_shared_memory_is_a_clear_error(tmp_path, tok):
    """A /dev/shm too small for the batches in flight (Docker's 64 MiB default) would make the
    workers' sends fail in a background thread and the trainer wait forever: refuse at the start."""
    from speechlm.data.limits import check_shared_memory

    free = shutil.disk_usage(tmp_path).free
    check_shared_memory(2, 2, free / 8, shm_dir=tmp_path)  # fits: no error
    check_shared_memory(0, 2, free * 8, shm_dir=tmp_path)  # no workers: nothing goes through shm
    with pytest.raises(ConfigError, match=r"data.num_workers=2 x data.prefetch_factor=2 .* MiB free"):
        check_shared_memory(2, 2, free, shm_dir=tmp_path)
