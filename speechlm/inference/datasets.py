"""The clips of a test set, whatever names it: a built shard set (a folder with manifest.json, or its
URL: s3://, https://, ... read as training reads it), a data recipe (`shards/NAME.yaml` or NAME; its
`test` split, built first if needed) or a manifest of audio paths and texts (JSONL, TSV, CSV, or an
audiofolder's metadata.csv: read as a shard recipe's kind manifest reads one)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from speechlm import shard
from speechlm.config import REPO_ROOT, ConfigError, DataSet
from speechlm.data import Clips, EvalLoader, remote
from speechlm.data.catalog import read_manifest
from speechlm.data.reader import TASK_KEYS
from speechlm.data.remote import RemoteIO
from speechlm.shard import Source, sources
from speechlm.shard.sources.manifest import read_records

MANIFEST_SUFFIXES = (".jsonl", ".tsv", ".csv", ".txt")


class ShardClips:
    """The clips of one split of a shard set (a folder or a URL), read by the training reader
    (speechlm.data: the same manifest catalog, streaming and retries) in manifest order, at most `n`.
    Iterates (id, wave, text); clips the reader could not use are counted in `skipped`; the language and
    task labels of the clips that carry them (speechlm.shard.languages) are in `labels` by clip id."""

    def __init__(self, path: str, split: str | None, n: int | None, batch_size: int = 8):
        io_ = RemoteIO()
        if split is None:
            split = "test" if "test" in read_manifest(path, "dataset", io_).get("splits", {}) else "eval"
        self.loader = EvalLoader(
            [DataSet(path=path, split=split)],
            Clips(),
            batch_size=batch_size,
            max_samples_per_set=n or 0,
            remote_io=io_,
            what="dataset",
        )

    def __iter__(self) -> Iterator[tuple[str, object, str]]:
        self.words: dict[str, list] = {}  # clip id -> true word times, for sets that carry them (kind timed)
        self.labels: dict[str, dict] = {}  # clip id -> its language, task, target text (issue 38)
        for batch in self.loader:
            for c in batch["clips"]:
                if c.get("words"):
                    self.words[c["id"]] = c["words"]
                if any(k in c for k in TASK_KEYS):
                    self.labels[c["id"]] = {k: c[k] for k in TASK_KEYS if k in c}
                yield c["id"], c["audio"], c["text"]

    @property
    def skipped(self) -> int:
        return sum(self.loader.stats[k] for k in ("missing_clips", "bad_clips"))


def _manifest_clips(path: Path) -> Iterator[tuple[str, object, str]]:
    """A list of audio paths and texts, read as the shard build reads one (kind: manifest): columns
    `audio` (or audiofolder's `file_name`) and `text`, and `id` when the file has one."""
    _, columns = read_records(path)
    id_column = "id" if "id" in columns else None
    src = Source(name="eval", kind="manifest", id_column=id_column, splits={"test": [str(path.resolve())]})
    for unit in sources.of(src).list_units(src, "test", "dataset"):
        for oid, text, apath, *_ in unit["rows"]:
            if not text:
                raise ConfigError(f"{path}: clip {oid} has no 'text' (a reference is needed to score it)")
            yield oid, apath, text


def dataset_clips(
    spec: str, split: str | None = None, n: int | None = None, batch_size: int = 8
) -> tuple[str, Iterable]:
    """(name, iterable of (id, wave or audio path, reference text)) for any dataset spec: a shard set
    (folder or URL), a JSONL/TSV manifest, or a data recipe (built first if needed; its test split)."""
    if remote.is_url(spec):
        return spec.rstrip("/").rsplit("/", 1)[-1], ShardClips(spec, split, n, batch_size)
    p = Path(spec)
    if p.is_dir():
        if not (p / "manifest.json").is_file():
            raise ConfigError(f"{spec}: a dataset folder must hold a manifest.json (built by speechlm.shard)")
        return p.name, ShardClips(str(p), split, n, batch_size)
    if p.suffix in MANIFEST_SUFFIXES and p.is_file():
        return p.stem, _manifest_clips(p)
    # a data recipe: build its shards if they are not there yet (the test split is reserved for eval)
    if not (p.suffix in (".yaml", ".yml") and p.is_file()) and not (REPO_ROOT / "shards" / f"{spec}.yaml").is_file():
        raise ConfigError(f"dataset '{spec}' is not a shard folder or URL, a manifest or a data recipe")
    out = shard.build(spec)  # returns at once when the shards are up to date
    return out.name, ShardClips(str(out), split or "test", n, batch_size)
