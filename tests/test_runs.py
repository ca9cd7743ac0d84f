"""The run folder's layout (speechlm.runs): which complete checkpoint a path names, as resuming and
`-m RUN` both read it."""

from __future__ import annotations

from speechlm import runs


def _checkpoint(ckpts, step: int, complete: bool = True):
    d = ckpts / runs.step_name(step)
    (d / runs.MODEL).mkdir(parents=True)
    if complete:
        (d / runs.STATE).write_text("{}")
    return d


def test_a_run_its_checkpoints_and_a_step_name_the_checkpoint_latest_points_at(tmp_path):
    ckpts = tmp_path / runs.CHECKPOINTS
    _checkpoint(ckpts, 2)
    newest = _checkpoint(ckpts, 4)
    (ckpts / runs.LATEST).write_text("step-4\n")
    assert runs.checkpoint_at(tmp_path) == newest
    assert runs.checkpoint_at(ckpts) == newest
    assert runs.checkpoint_at(ckpts / "step-2") == ckpts / "step-2"
    assert runs.latest(ckpts) == newest
    assert runs.STEP_RE.match(newest.name).group(1) == "4"


def test_an_incomplete_checkpoint_or_no_pointer_names_nothing(tmp_path):
    ckpts = tmp_path / runs.CHECKPOINTS
    _checkpoint(ckpts, 6, complete=False)  # killed before trainer_state.json was written
    assert runs.checkpoint_at(tmp_path) is None  # no pointer yet
    (ckpts / runs.LATEST).write_text("step-6")
    assert runs.checkpoint_at(tmp_path) is None
    assert runs.checkpoint_at(ckpts / "step-6") is None
    assert runs.latest(tmp_path / "nowhere") is None
