"""training.encoder_cache_gb (speechlm.model.encoder_cache): a clip that comes again is read from memory
instead of encoded, with what the encoder gave it before, in whatever batch it comes; the cap holds; the
settings under which the encoder's output is not the clip's alone are refused by name."""

import pytest
import torch

from model_helpers import batch, tiny_config, waves
from speechlm.config import ConfigError
from speechlm.model import build_model


def _clips_encoded(model) -> list[int]:
    """Batch sizes the encoder ran on: a forward hook, the encoder itself untouched."""
    seen = []
    model.encoder.register_forward_hook(lambda mod, args, kwargs, out: seen.append(args[0].shape[0]), with_kwargs=True)
    return seen


@pytest.mark.parametrize("encoder", ["tiny/granite_speech5", "tiny/whisper"])
def test_a_cached_clip_is_not_encoded_again_and_projects_as_before(encoder):
    torch.manual_seed(0)
    plain = build_model(tiny_config(encoder=encoder))
    cached = build_model(tiny_config(encoder=encoder, encoder_cache_gb=0.01))
    cached.load_state_dict(plain.state_dict())
    assert plain.encoder_cache is None and cached.encoder_cache is not None
    encoded = _clips_encoded(cached)
    w = waves((16000, 9000, 12000, 7000), seed=1)

    def both(clips):
        b = batch(plain, clips, transcripts=["a b"] * len(clips))
        ref, ref_len = plain.encode_audio(b["input_features"], b["feature_mask"])
        out, out_len = cached.encode_audio(b["input_features"], b["feature_mask"])
        assert torch.equal(out_len, ref_len)
        return ref, out, ref_len

    both(w[:3])
    assert encoded == [3] and cached.encoder_cache.misses == 3 and len(cached.encoder_cache.store) == 3
    # two cached clips in a batch of another width and order, beside a new one: only the new one is encoded
    ref, out, lengths = both([w[3], w[1], w[0]])
    assert encoded == [3, 1] and cached.encoder_cache.hits == 2
    assert cached.encoder_cache.figures()["perf/encoder_cache_hit_share"] == 2 / 6
    valid = torch.arange(ref.shape[1])[None, :] < lengths[:, None]
    # the same clip's frames encoded in another batch: equal but for the order of float sums in the
    # encoder's bf16 matmuls (2^-8 relative each); a few roundings of the largest output allowed
    torch.testing.assert_close(out[valid], ref[valid], rtol=0, atol=2**-6 * ref[valid].abs().max().item())


def test_the_cap_holds_and_clips_past_it_are_encoded_each_time():
    torch.manual_seed(0)
    m = build_model(tiny_config(encoder="tiny/whisper", encoder_cache_gb=1e-9))
    encoded = _clips_encoded(m)
    b = batch(m, waves((16000, 9000)))
    first = m.encode_audio(b["input_features"], b["feature_mask"])[0]
    again = m.encode_audio(b["input_features"], b["feature_mask"])[0]
    assert m.encoder_cache.store == {} and m.encoder_cache.bytes == 0
    assert encoded == [2, 2]
    assert torch.equal(first, again)


def test_a_trained_encoder_never_reads_the_cache():
    m = build_model(tiny_config(encoder="tiny/whisper", encoder_cache_gb=0.01))
    m.trainable["encoder"] = True  # as a run with freeze_audio_encoder=false builds it (refused by config)
    encoded = _clips_encoded(m)
    b = batch(m, waves((16000, 9000)))
    for _ in range(2):
        m.encode_audio(b["input_features"], b["feature_mask"])
    assert encoded == [2, 2] and m.encoder_cache.store == {}


@pytest.mark.parametrize(
    "setting, named",
    [
        ({"freeze_audio_encoder": False}, "training.freeze_audio_encoder=false"),
        ("augment", "data.augment.enabled=true"),
        ("zero3", "deepspeed.zero_stage=3"),
    ],
)
def test_settings_where_the_output_is_not_the_clips_alone_are_refused(setting, named):
    cfg = tiny_config(encoder_cache_gb=1.0, **(setting if isinstance(setting, dict) else {}))
    if setting == "augment":
        cfg.data.augment.enabled = True
    if setting == "zero3":
        cfg.deepspeed.zero_stage = 3
    with pytest.raises(ConfigError, match=f"training.encoder_cache_gb: .*{named}"):
        cfg.validate()
    cfg.training.encoder_cache_gb = 0.0
    cfg.validate()
