"""The kernel report: what transformers really resolved for Qwen3.5, the fused loss, the start-up log."""

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from model_helpers import tiny_config
from paths import REPO
from speechlm.model import build_model
from speechlm.model.kernels import INSTALL_COMMAND, fallback_kernels, kernel_report


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config())


def test_report_names_every_kernel_on_the_tiny_twin(model):
    rep = kernel_report(model, "cpu")
    assert rep.attention == "sdpa"
    # nothing of the gpu extra is installed on this CPU machine: transformers runs its torch kernels
    assert rep.linear_attention == "torch reference (flash-linear-attention not installed)"
    assert rep.causal_conv1d == "torch reference (causal-conv1d not installed)"
    assert rep.fused_loss.startswith("chunked torch cross-entropy") and "not on CUDA" in rep.fused_loss
    assert rep.warnings == []
    line = rep.line()
    assert line.startswith("kernels: attention sdpa, linear attention torch reference") and "loss chunked" in line


def test_cuda_without_fla_warns_once_with_the_install_command(model):
    rep = kernel_report(model, "cuda")  # the report is about the device type; no GPU needed to build it
    assert len(rep.warnings) == 1 and INSTALL_COMMAND in rep.warnings[0] and "\n" not in rep.warnings[0]
    assert "liger-kernel>=0.8.5 not installed" in rep.fused_loss


def test_a_decoder_without_linear_attention_reports_none():
    rep = kernel_report(build_model(tiny_config(decoder="tiny/qwen3")), "cuda")
    assert rep.linear_attention is None and rep.causal_conv1d is None and rep.warnings == []


def test_an_importable_fla_is_what_transformers_resolves(tmp_path):
    """A stand-in `fla` package (the module path transformers imports) on sys.path at import time:
    the report must follow transformers' own resolution, in a fresh interpreter."""
    ops = tmp_path / "fla" / "ops" / "gated_delta_rule"
    ops.mkdir(parents=True)
    (tmp_path / "fla" / "__init__.py").write_text("from . import ops\n")
    (tmp_path / "fla" / "ops" / "__init__.py").write_text("from . import gated_delta_rule\n")
    (ops / "__init__.py").write_text(
        textwrap.dedent("""
        def chunk_gated_delta_rule(q, k, v, g, beta, **kw): raise NotImplementedError
        def fused_recurrent_gated_delta_rule(q, k, v, g, beta, **kw): raise NotImplementedError
    """)
    )
    code = (
        "import json; from speechlm.model.kernels import fallback_kernels; "
        "print(json.dumps(fallback_kernels('transformers.models.qwen3_5.modeling_qwen3_5')))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)

    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["fla"] == {
        "chunk_gated_delta_rule": "fla.ops.gated_delta_rule",
        "fused_recurrent_gated_delta_rule": "fla.ops.gated_delta_rule",
    }
    assert found["causal_conv1d"] == {"causal_conv1d_fn": False, "causal_conv1d_update": False}
    # and this interpreter, without it, resolved the torch path
    assert not any(fallback_kernels("transformers.models.qwen3_5.modeling_qwen3_5")["fla"].values())


def test_trainer_logs_the_kernels_at_start(tmp_path, synthetic_shards, caplog):
    from speechlm import config as config_mod
    from speechlm.config import Config
    from speechlm.train.loop import Trainer

    cfg = config_mod.load(
        Config,
        "tiny",
        None,
        [
            f"training.output_dir={tmp_path}",
            "training.run_name=k",
            "training.max_steps=1",
            "data.num_workers=0",
            f"data.train=[{{path: {synthetic_shards}, split: train}}]",
            f"data.eval=[{{path: {synthetic_shards}, split: eval}}]",
        ],
    )
    with caplog.at_level(logging.INFO, logger="speechlm"):
        Trainer(cfg).setup()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("kernels: ")]
    assert len(lines) == 1 and "attention sdpa" in lines[0] and "linear attention torch reference" in lines[0]
