"""Issue #7, item 7: loading files from elsewhere never runs code from them.

Malicious pickles (that would write a marker file when unpickled) are planted wherever a loader
might look; loading the export must work, give the same logits, and never create the marker.
trust_remote_code stays off unless the caller's config turns it on, even if the export asks for it.
"""

from __future__ import annotations

import base64
import json
import pickle
import shutil

import pytest
import torch

from model_helpers import batch, tiny_config, waves
from speechlm import config as config_mod
from speechlm.config import Config, ConfigError
from speechlm.model import build_model, from_pretrained, parts, save_pretrained
from speechlm.train import checkpoint as ckpt_mod


class Evil:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    root = tmp_path_factory.mktemp("untrusted")
    m = build_model(tiny_config())
    save_pretrained(m, root / "model")
    return m, root


def test_planted_pickles_are_never_loaded(export):
    m, root = export
    d = root / "model"
    marker = root / "pwned"
    evil = pickle.dumps(Evil(marker))
    for name in (
        "pytorch_model.bin",
        "model.pt",
        "projector.bin",
        "projector.pt",
        "training_args.bin",
        "adapter/adapter_model.bin",
        "tokenizer/tokenizer.pkl",
        "optimizer.pt",
    ):
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(evil)
    again = from_pretrained(d)
    b = batch(m, waves())
    m.eval()
    with torch.no_grad():
        assert torch.equal(m(**b).loss, again(**b).loss)
    assert not marker.exists()


def test_payload_is_live(tmp_path):
    # guards the test above: the planted bytes really execute when unpickled
    pickle.loads(pickle.dumps(Evil(tmp_path / "m")))
    assert (tmp_path / "m").read_text() == "pwned"


def _remote_code_dir(path, marker):
    path.mkdir(parents=True)
    (path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "evil_model",
                "auto_map": {
                    "AutoConfig": "evil.EvilConfig",
                    "AutoModel": "evil.EvilModel",
                    "AutoModelForCausalLM": "evil.EvilModel",
                },
            }
        )
    )
    (path / "evil.py").write_text(
        f"open({str(marker)!r}, 'w').write('pwned')\n"
        "from transformers import PretrainedConfig\n"
        "class EvilConfig(PretrainedConfig):\n    model_type = 'evil_model'\n"
    )
    return path


def test_trust_remote_code_off_by_default(tmp_path):
    assert config_mod.load(Config, "production").model.trust_remote_code is False
    assert config_mod.load(Config, "tiny").model.trust_remote_code is False
    marker = tmp_path / "pwned"
    d = _remote_code_dir(tmp_path / "remote", marker)
    with pytest.raises((ConfigError, ValueError, OSError)):
        parts.load_config(str(d), config_mod.load(Config, "tiny").model.trust_remote_code)
    assert not marker.exists()


def test_an_export_cannot_turn_trust_remote_code_on_for_itself(export, tmp_path):
    _, root = export
    d = tmp_path / "model"
    shutil.copytree(root / "model", d, ignore=shutil.ignore_patterns("*.bin", "*.pt", "*.pkl"))
    meta = json.loads((d / "config.json").read_text())
    meta["speechlm"]["trust_remote_code"] = True
    meta["bases"]["encoder"]["folder"] = "encoder"  # the folder says its encoder is inside, with code
    (d / "config.json").write_text(json.dumps(meta))
    marker = tmp_path / "pwned"
    _remote_code_dir(d / "encoder", marker)
    with pytest.raises(Exception):  # noqa: B017
        from_pretrained(d)
    assert not marker.exists()


def test_resume_state_holds_no_pickle(tmp_path):
    state = ckpt_mod.rng_state()
    again = json.loads(json.dumps(state))  # plain JSON: numbers and strings only
    a = torch.rand(3)
    assert "pickle" not in json.dumps(state)
    torch.manual_seed(0)
    ckpt_mod.set_rng_state(again)
    assert torch.equal(torch.rand(3), a)  # and it still restores the RNG exactly
    marker = tmp_path / "pwned"
    evil = {"pickle_b64": base64.b64encode(pickle.dumps(Evil(marker))).decode()}
    with pytest.raises(Exception):  # noqa: B017
        ckpt_mod.set_rng_state(evil)
    assert not marker.exists()
