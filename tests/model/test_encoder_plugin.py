"""A new encoder family is one file plus one registration line: this file is that file, for a toy
encoder (one strided conv and two linear layers), and the test builds, trains, plans and exports a
SpeechLM with it through the production code, as with the real families, then loads the export with
transformers alone in a virtualenv where speechlm does not import."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import soundfile as sf
import torch
from torch import nn
from transformers import AutoConfig, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

import nospeechlm
from model_helpers import batch, tiny_config, waves
from speechlm.config import ConfigError
from speechlm.model import build_model, encoders, from_pretrained, save_pretrained
from speechlm.model.encoders.base import EncoderFamily, LogMelFeatures
from speechlm.model.folder import write_export


class ToyEncoderConfig(PretrainedConfig):
    model_type = "toy_encoder"

    def __init__(self, hidden_size: int = 32, num_mel_bins: int = 16, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size, self.num_mel_bins = hidden_size, num_mel_bins


class ToyEncoder(PreTrainedModel):
    config_class = ToyEncoderConfig
    main_input_name = "input_features"

    def __init__(self, config: ToyEncoderConfig):
        super().__init__(config)
        self.conv = nn.Conv1d(config.num_mel_bins, config.hidden_size, kernel_size=3, stride=2, padding=1)
        self.layers = nn.ModuleList(nn.Linear(config.hidden_size, config.hidden_size) for _ in range(2))
        self.post_init()

    def forward(self, input_features, attention_mask=None):
        x = self.conv(input_features.transpose(1, 2)).transpose(1, 2)
        for layer in self.layers:
            x = x + torch.tanh(layer(x))
        return BaseModelOutput(last_hidden_state=x)


@dataclass
class ToyFeatures(LogMelFeatures):
    num_mel_bins: int = 16
    n_fft: int = 30  # 16 frequency bins: the toy's "mel" bins

    def num_feature_frames(self, num_samples: int) -> int:
        return int(num_samples) // self.hop_length + 1

    def extract(self, audio, lengths):
        spec = torch.stft(
            audio, self.n_fft, self.hop_length, window=torch.hann_window(self.n_fft), center=True, return_complex=True
        ).abs()
        return spec.clamp_min(1e-5).log().transpose(1, 2).contiguous()


class ToyFamily(EncoderFamily):
    name = "toy"
    pretrained_class = ToyEncoder
    attn_implementation = None  # no attention layers

    @staticmethod
    def encoder_config(config):
        if not isinstance(config, ToyEncoderConfig):
            raise ValueError(f"expected a toy encoder config, got model_type '{config.model_type}'")
        return config

    def make_features(self, settings):
        return ToyFeatures.from_dict(settings) if settings else ToyFeatures(num_mel_bins=self.config.num_mel_bins)

    def conv_layers(self):
        return [[1, 3, 2]]

    def encode(self, encoder, input_features, feature_mask):
        hidden = encoder(input_features).last_hidden_state
        return hidden, self.encoder_frames(feature_mask.long().sum(-1))


FAMILY = ToyFamily
EXPORT = ("ToyEncoderConfig", "ToyEncoder", "ToyFeatures", "ToyFamily")  # what a model folder's code carries
AutoConfig.register("toy_encoder", ToyEncoderConfig)  # transformers' own: any custom config needs it


@pytest.fixture
def toy_checkpoint(tmp_path):
    encoders.register("toy", __name__, ("toy_encoder",))  # <- the one registration line
    torch.manual_seed(0)
    ToyEncoder(ToyEncoderConfig()).save_pretrained(tmp_path / "toy")
    yield str(tmp_path / "toy")
    del encoders.FAMILIES["toy"]


def test_a_toy_family_trains_plans_and_exports_like_the_real_ones(toy_checkpoint, tmp_path):
    from speechlm.plan import make_plan

    cfg = tiny_config(encoder=toy_checkpoint, stride=2)
    model = build_model(cfg)
    assert model.family.name == "toy" and not model.encoder.training
    b = batch(model, waves((16000, 7000)))
    # the family's frame arithmetic decides the placeholders: 101 and 44 feature frames -> 51 and 22 -> pooled by 2
    assert (b["input_ids"] == model.audio_token_id).sum(1).tolist() == [25, 11]
    model.train()
    frozen = model.encoder.layers[0].weight.detach().clone()
    opt = torch.optim.AdamW(model.parameter_groups(cfg.training))
    loss = model(**b).loss
    loss.backward()
    opt.step()
    assert torch.isfinite(loss) and torch.equal(model.encoder.layers[0].weight, frozen)
    plan = make_plan(cfg)
    assert plan["params"]["encoder_params"] == sum(p.numel() for p in model.encoder.parameters())
    save_pretrained(model, tmp_path / "export")
    # a base from a local folder is recorded by name and content hash, never by this machine's path
    with pytest.raises(ConfigError, match=r"its encoder is the local model 'toy' .*bases=\{'encoder': PATH\}"):
        from_pretrained(tmp_path / "export")
    again = from_pretrained(tmp_path / "export", bases={"encoder": toy_checkpoint})
    assert again.family.name == "toy" and again.features.to_dict() == model.features.to_dict()
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(**b).loss, again(**b).loss)
    # the export carries the family's code (EXPORT) and loads where neither speechlm nor this file imports
    folder = write_export(again, tmp_path / "final")
    clip = tmp_path / "clip.wav"
    sf.write(clip, waves((12000,))[0], 16000)
    expected = again.transcribe([sf.read(clip, dtype="float32")[0]], max_new_tokens=4)
    python = nospeechlm.make_env(tmp_path / "env")
    got = nospeechlm.run(python, LOAD, str(folder), str(clip), cwd=tmp_path)
    assert got == {"family": "toy", "text": expected}


LOAD = """
import json, sys
import soundfile as sf
from transformers import AutoModel
model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True)
text = model.model.transcribe([sf.read(sys.argv[2], dtype="float32")[0]], max_new_tokens=4)
print(json.dumps({"family": model.family.name, "text": text}))
"""
