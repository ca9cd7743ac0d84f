"""Shared fixtures, and the layout of tests/.

Layout: tests/<pkg>/ holds the tests of speechlm/<pkg> (tests/model/ for speechlm/model/, ...);
a test file directly in tests/ tests a top-level module (tests/test_text.py: speechlm/text.py) or the
whole package (imports, structure); tests/test_structure.py keeps it so. A folder's own fixtures live
in its conftest.py; the ones several folders use live here.

No __init__.py in the test folders (pytest's default "prepend" import mode, rootdir-relative): each
test file imports under its basename, with its folder put on sys.path, and this file puts tests/
there too, so the helper modules beside it (model_helpers, data_helpers, paths, synthetic_set,
nospeechlm, faults/) import by name from any folder. The price is that basenames must be unique
across folders (tests/test_structure.py checks it); __init__.py files would instead make every
test a `tests.<pkg>.test_x` module and put the repository root, not tests/, on sys.path, so each
`from model_helpers import ...` would have to change. A test never imports a conftest by name
(several folders have one): shared constants live in helper modules.

`synthetic_shards`: a small shard set built once per session (once per run under pytest-xdist: the
workers share it) by the real shard pipeline from the shipped synthetic recipe (espeak-ng speech; a
few seconds on 2 cores; tests/synthetic_set.py). It returns the output dir
(`manifest.json` + `synthetic-{train,eval,test}-%06d.tar`): train 64 clips in 8 shards, eval 16
clips in 2 shards, test 8 clips in 1 shard, so rank/worker splitting has something to split.
"""

from __future__ import annotations

import fcntl
import os

# never wait on Hub retries in tests (a hub id fails only after ~28 s otherwise)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

from synthetic_set import small_synthetic_recipe  # noqa: E402

# torch's own, before any test can start DeepSpeed ZeRO-3 (which replaces it: see pytest_runtest_setup)
_STOCK_LINEAR = torch.nn.functional.linear


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # An in-process trainer test starts a process group: it sets MASTER_PORT in os.environ (as a
    # plain `python launch/train.py` does) and its TCPStore keeps listening there. A training
    # child launched by a later test would inherit the port and fail with EADDRINUSE; without it,
    # a world-size-1 child takes a free port of its own.
    if _SESSION_MASTER_PORT is None:
        os.environ.pop("MASTER_PORT", None)
    # DeepSpeed ZeRO-3 replaces torch.nn.functional.linear for the rest of the process (pitfall 14):
    # after an in-process ZeRO-3 test, every later test in the worker would compute its linear layers
    # through DeepSpeed's function. Each test starts from the stock one, as it would run alone (a
    # ZeRO-3 engine it builds installs DeepSpeed's again: DeepSpeed re-patches when it finds the stock one).
    torch.nn.functional.linear = _STOCK_LINEAR


_SESSION_MASTER_PORT = os.environ.get("MASTER_PORT")

# Under pytest-xdist (`make test`: -n 2 --dist loadfile) a test file runs whole on one worker, so its
# module fixtures (a trained run, a tiny model) are built once.
# The longest files first (`pytest --durations`, summed per file), so that no worker is left with a
# long file at the end while the others idle (the Makefile keeps xdist from reordering them).
LONGEST_FIRST = [
    # seconds summed per file (`pytest -m '' -n 3 --durations=0`, every test but the two demos; 2026-12-06,
    # the slow 2-core host, 3 workers sharing its cores): slow and fast files alike
    "test_elastic_resume.py",  # 611 s
    "test_launch_slurm.py",  # 302 s
    "test_longform_demo.py",  # 296 s
    "test_train_multiproc.py",  # 277 s
    "test_readme_own_data.py",  # 243 s
    "test_launch_torchrun.py",  # 232 s
    "test_reliability_faults.py",  # 211 s
    "test_vllm_serve.py",  # 192 s
    "test_vllm_languages.py",  # 165 s
    "test_train_e2e.py",  # 163 s
    "test_launch_runpod.py",  # 150 s
    "test_shard_scale.py",  # 109 s
    "test_export.py",  # 103 s
    "test_shard_slurm.py",  # 90 s
    "test_serve_fuzz.py",  # 79 s
    "test_train_whisper.py",  # 75 s
    "test_model_loss_zero3.py",  # 73 s
    "test_shard_cli.py",  # 62 s
    "test_cli.py",  # 62 s
    "test_serve_hostile.py",  # 60 s
    "test_data_remote.py",  # 59 s
    "test_whisper_base.py",  # 52 s
    "test_vllm_families.py",  # 52 s
    "test_serve_live.py",  # 46 s
    "test_plan.py",  # 38 s
    # the default suite's next longest
    "test_train_units.py",
    "test_shard.py",
]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole, in order


@pytest.fixture(scope="session")
def synthetic_shards(tmp_path_factory):
    from speechlm.shard import build

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, shared by its xdist workers: the set is built once
    out = root / "shared-shards" / "synthetic"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / "build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first worker builds; the others find it up to date
        return build(small_synthetic_recipe(), out, workers=2)
