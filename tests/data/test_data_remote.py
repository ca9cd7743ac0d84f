"""Shard sets at a URL, read from real servers on 127.0.0.1 that the tests start: a plain HTTP server
(http.server in a thread) and an S3-compatible one (moto's server mode). Equal steps, exact resume
and batches identical to the same set on local disk; missing objects; a server stopped mid-epoch
(an error naming the object, or a logged retry that recovers); a server that never answers."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from data_helpers import all_ids, ids_collate, write_set
from speechlm.config import Config, ConfigError, DataSet
from speechlm.data import TrainLoader
from speechlm.data.remote import RemoteIO, StorageError, cache_name, is_url, join
from tests.infra.httpfolder import HTTPFolder

WORLD, WORKERS = 2, 1
FAST = RemoteIO(retries=2, timeout_s=5, backoff_s=0.2)  # a dead server is reported within seconds


@contextlib.contextmanager
def deadline(seconds: float):
    """Fail instead of hanging: SIGALRM interrupts whatever the main thread waits on."""

    def on_alarm(*_):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture()
def http_folder(tmp_path):
    srv = HTTPFolder(tmp_path)
    yield srv
    with contextlib.suppress(Exception):
        srv.stop()


class S3:
    """moto's S3-compatible server on 127.0.0.1; s3:// reaches it through AWS_ENDPOINT_URL."""

    def __init__(self, monkeypatch, tmp_path):
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        _, port = self.server.get_host_and_port()
        for k, v in {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": str(tmp_path / "none"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        }.items():
            monkeypatch.setenv(k, v)  # DataLoader workers inherit it
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()  # a client made for an earlier test's server
        self.fs = s3fs.S3FileSystem()
        self.bucket = f"shards-{uuid.uuid4().hex[:8]}"  # moto keeps buckets across its servers in a process
        self.fs.mkdir(self.bucket)

    def upload(self, folder: Path) -> str:
        self.fs.put(str(folder), f"{self.bucket}/{folder.name}", recursive=True)
        return f"s3://{self.bucket}/{folder.name}"

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture()
def s3(monkeypatch, tmp_path):
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = S3(monkeypatch, tmp_path)
    yield srv
    with contextlib.suppress(Exception):
        srv.stop()


def publish(kind: str, folder: Path, http_folder, request) -> str:
    if kind == "http":
        return http_folder.url(folder.name)
    return request.getfixturevalue("s3").upload(folder)


def loaders(path: str, world=WORLD, workers=WORKERS, remote_io=FAST, **kw):
    kw.setdefault("batch_size", 3)
    return [
        TrainLoader(
            [DataSet(path)],
            ids_collate,
            rank=r,
            world_size=world,
            num_workers=workers,
            seed=7,
            shuffle_shards_per_block=2,
            remote_io=remote_io,
            **kw,
        )
        for r in range(world)
    ]


def batches(loader) -> list[tuple]:
    return [(tuple(b["ids"]), tuple(b["weight"]), tuple(b["num_samples"])) for b in loader]


# ------------------------------------------------------------------ the reader's guarantees


@pytest.mark.parametrize("kind", ["http", "s3"])
def test_url_set_reads_exactly_as_local(kind, tmp_path, http_folder, request):
    local = write_set(tmp_path, "a", [5, 5, 4, 6, 5, 5])
    url = publish(kind, local, http_folder, request)
    with deadline(120):
        remote_ls, local_ls = loaders(url), loaders(str(local))
        assert [l.steps_per_epoch for l in remote_ls] == [l.steps_per_epoch for l in local_ls]
        per_rank = [batches(l) for l in remote_ls]
        assert per_rank == [batches(l) for l in local_ls]  # the same batches, in the same order
        assert len(per_rank[0]) == len(per_rank[1]) == remote_ls[0].steps_per_epoch
        seen = sorted(i for b in per_rank for ids, w, _ in b for i, x in zip(ids, w) if x > 0)
        assert seen == sorted(all_ids(local))
        stats = remote_ls[0].stats + remote_ls[1].stats
        assert stats["tar_errors"] == stats["missing_clips"] == 0
        # exact resume from a URL, without workers
        (full,) = loaders(url, world=1, workers=0)
        ref = batches(full)
        (first,) = loaders(url, world=1, workers=0)
        it = iter(first)
        for _ in range(4):
            next(it)
        state = first.state_dict()
        (resumed,) = loaders(url, world=1, workers=0)
        resumed.load_state_dict(state)
        assert batches(resumed) == ref[4:]


def test_missing_objects_are_named(tmp_path, http_folder, caplog):
    with pytest.raises(
        ConfigError, match=r"data.train\[0\].path: no such object: http://127.0.0.1:\d+/nope/manifest.json"
    ):
        loaders(http_folder.url("nope"), world=1)
    local = write_set(tmp_path, "a", [4] * 4)
    gone = sorted(local.glob("*.tar"))[2]
    gone.unlink()
    caplog.set_level(logging.WARNING)
    with deadline(60):
        ls = loaders(http_folder.url("a"), workers=0)
        per_rank = [batches(l) for l in ls]
    assert len(per_rank[0]) == len(per_rank[1]) == ls[0].steps_per_epoch  # steps unchanged
    stats = ls[0].stats + ls[1].stats
    assert stats["tar_errors"] == 1 and stats["missing_clips"] == 4  # a missing local tar counts the same
    assert http_folder.url(f"a/{gone.name}") in caplog.text


def test_unknown_protocol_is_a_config_error():
    with pytest.raises(ConfigError, match=r"data.train\[0\].path: cannot open 'nosuchproto://b/a'.*nosuchproto"):
        loaders("nosuchproto://b/a", world=1)


def test_s3_missing_manifest(s3, tmp_path):
    from speechlm.data import EvalLoader

    with pytest.raises(ConfigError, match=rf"data.eval\[0\].path: no such object: s3://{s3.bucket}/none/manifest.json"):
        EvalLoader([DataSet(f"s3://{s3.bucket}/none")], ids_collate, batch_size=2, remote_io=FAST)
    with pytest.raises(ConfigError, match=r"data.eval\[0\].path: no such object: s3://no-such-bucket/a/manifest.json"):
        EvalLoader([DataSet("s3://no-such-bucket/a")], ids_collate, batch_size=2, remote_io=FAST)


# ------------------------------------------------------------------ failures: no hang


def test_s3_server_stopped_mid_epoch_is_a_clear_error(s3, tmp_path):
    url = s3.upload(write_set(tmp_path, "a", [4] * 12))
    # moto's stop() leaves its socket listening: requests then connect and time out (a hung server)
    (ld,) = loaders(url, world=1, workers=1, batch_size=2, remote_io=RemoteIO(retries=1, timeout_s=1, backoff_s=0.2))
    t0 = time.monotonic()
    with (
        deadline(60),
        pytest.raises(
            StorageError, match=rf"{url}/a-train-\d+\.tar: storage unreachable while reading, after 2 attempts"
        ),
    ):
        for i, _ in enumerate(ld):
            if i == 0:
                s3.stop()
    assert time.monotonic() - t0 < 30


def test_http_server_back_within_the_retries(tmp_path, http_folder, caplog):
    local = write_set(tmp_path, "a", [4] * 8)
    (ref,) = loaders(str(local), world=1, workers=0, batch_size=2)
    want = batches(ref)
    patient = RemoteIO(retries=6, timeout_s=5, backoff_s=0.25)  # waits 0.25, 0.5, 1, 2 ... s
    (ld,) = loaders(http_folder.url("a"), world=1, workers=0, batch_size=2, remote_io=patient)
    caplog.set_level(logging.WARNING)
    got = []
    with deadline(60):
        for b in ld:
            got.append((tuple(b["ids"]), tuple(b["weight"]), tuple(b["num_samples"])))
            if len(got) == 2:
                http_folder.stop()
                threading.Timer(1.0, http_folder.start).start()
    assert got == want  # nothing lost: the reads were retried, then continued
    assert "retry 1/6" in caplog.text and "again after" in caplog.text
    assert ld.stats["tar_errors"] == 0


def test_server_that_never_answers_times_out(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)  # connections complete in the kernel; no request is ever answered
    try:
        t0 = time.monotonic()
        with deadline(30), pytest.raises(StorageError, match="storage unreachable.*after 2 attempts"):
            loaders(
                f"http://127.0.0.1:{sock.getsockname()[1]}/a",
                world=1,
                remote_io=RemoteIO(retries=1, timeout_s=1.0, backoff_s=0.1),
            )
        assert time.monotonic() - t0 < 10
    finally:
        sock.close()


# ------------------------------------------------------------------ cache


def test_cache_serves_the_next_epoch_and_keeps_its_cap(tmp_path, http_folder):
    local = write_set(tmp_path, "a", [4] * 6)
    url = http_folder.url("a")
    tars = sorted(local.glob("*.tar"))
    big = RemoteIO(retries=1, timeout_s=5, backoff_s=0.1, cache_dir=str(tmp_path / "cache"), cache_bytes=1 << 30)
    with deadline(60):
        (ld,) = loaders(url, world=1, workers=2, remote_io=big)
        first = batches(ld)
        assert {p.name for p in (tmp_path / "cache").iterdir()} == {cache_name(join(url, t.name)) for t in tars}
        (again,) = loaders(url, world=1, workers=2, remote_io=big)  # fetches the manifest
        http_folder.stop()  # every tar is cached now: the epoch needs no server
        assert batches(again) == first
    (disk,) = loaders(str(local), world=1, workers=2)
    assert batches(disk) == first
    # a cap of about two tars: the folder never holds more
    http_folder.start()
    cap = 2 * max(t.stat().st_size for t in tars) + 1
    small = RemoteIO(retries=1, timeout_s=5, backoff_s=0.1, cache_dir=str(tmp_path / "small"), cache_bytes=cap)
    with deadline(60):
        (ld,) = loaders(http_folder.url("a"), world=1, workers=2, remote_io=small)
        assert batches(ld) == first
    sizes = [p.stat().st_size for p in (tmp_path / "small").iterdir()]
    assert len(sizes) in (1, 2) and sum(sizes) <= cap
    # a cap below one tar: every tar is streamed, nothing is kept
    tiny = RemoteIO(retries=1, timeout_s=5, backoff_s=0.1, cache_dir=str(tmp_path / "tiny"), cache_bytes=1000)
    with deadline(60):
        (ld,) = loaders(http_folder.url("a"), world=1, workers=2, remote_io=tiny)
        assert batches(ld) == first
    assert list((tmp_path / "tiny").iterdir()) == []


# ------------------------------------------------------------------ helpers and the trainer side


def test_paths_and_urls():
    assert is_url("s3://b/x") and is_url("https://h/x") and is_url("gs://b") and not is_url("/data/x")
    assert not is_url("shards/synthetic") and not is_url("C:/x")
    assert join("s3://b/set/", "manifest.json") == "s3://b/set/manifest.json"
    assert join("/data/set", "a.tar") == "/data/set/a.tar"


def test_ensure_shards_never_builds_a_url_set(tmp_path, monkeypatch):
    from speechlm.train import inputs as train_data

    cfg = Config()
    cfg.data.recipe = "shards/synthetic.yaml"
    cfg.data.train = [DataSet("s3://bucket/synthetic")]
    cfg.data.eval = [DataSet("https://example.org/synthetic", split="eval")]
    built = []
    monkeypatch.setattr("speechlm.shard.build", lambda *a, **k: built.append(a))
    train_data.ensure_shards(cfg)
    assert built == []


def test_planner_reads_a_url_sets_manifest(tmp_path, http_folder):
    from speechlm.plan import data_facts

    local = write_set(tmp_path, "a", [3, 3], audio=False, min_s=1.0, max_s=7.0)
    longest = max(max(s.durations) for s in loaders(str(local), world=1, workers=0)[0].catalog.shards)
    cfg = Config()
    cfg.data.recipe = "shards/synthetic.yaml"
    cfg.data.train = [DataSet(http_folder.url("a"))]
    facts = data_facts(cfg)
    assert facts["max_clip_seconds"] == longest and facts["shard_bytes"] == 0 and facts["unknown"] == []
    assert "source_bytes" not in facts  # never sized as a build
    cfg.data.cache_dir, cfg.data.cache_max_gb = str(tmp_path / "cache"), 1e-6
    assert data_facts(cfg)["shard_bytes"] == pytest.approx(1e-6 * 2**30)  # the cache, at most its cap
    http_folder.stop()
    cfg.data.train = [DataSet(http_folder.url("a"))]
    assert data_facts(cfg)["unknown"] == [http_folder.url("a")]


def test_io_settings_validated():
    from speechlm.config import load

    with pytest.raises(ConfigError, match="data.io_timeout_s: must be > 0"):
        load(Config, "tiny", overrides=["data.io_timeout_s=0"])
    with pytest.raises(ConfigError, match="data.io_retries: must be >= 0"):
        load(Config, "tiny", overrides=["data.io_retries=-1"])
    cfg = load(Config, "tiny", overrides=["data.cache_dir=/tmp/x", "data.cache_max_gb=2", "data.io_retries=3"])
    io_ = RemoteIO.from_config(cfg.data)
    assert io_.cache_dir == "/tmp/x" and io_.cache_bytes == 2 * 2**30 and io_.retries == 3


@pytest.mark.slow
def test_trainer_from_s3_matches_trainer_from_disk(s3, synthetic_shards, tmp_path):
    """The real trainer (tiny twin, world size 1) reading its shards from moto's S3 server takes the
    same steps with the same losses as from local disk."""
    import json

    from speechlm import config as config_mod
    from speechlm.train.loop import Trainer

    url = s3.upload(Path(synthetic_shards))

    def train(name: str, shards: str) -> list[float]:
        cfg = config_mod.load(
            Config,
            "tiny",
            None,
            [
                "training.per_device_train_batch_size=8",
                "training.max_steps=6",
                "training.warmup_steps=1",
                "training.eval_steps=6",
                "training.save_steps=0",
                "training.logging_steps=1",
                "data.num_workers=1",
                "data.max_eval_samples_per_dataset=8",
                "data.io_retries=1",
                f"training.output_dir={tmp_path}",
                f"training.run_name={name}",
                f"data.train=[{{path: '{shards}', split: train}}]",
                f"data.eval=[{{path: '{shards}', split: eval}}]",
            ],
        )
        assert Trainer(cfg).run() == 0
        rows = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        return [r["train/loss"] for r in rows if "train/loss" in r] + [r["eval/loss"] for r in rows if "eval/loss" in r]

    from_s3 = train("s3", url)
    assert len(from_s3) == 7 and from_s3 == train("disk", str(synthetic_shards))
