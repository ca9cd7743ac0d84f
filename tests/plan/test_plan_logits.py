"""The planner's logits term follows the chunked loss: one chunk of label logits, not all of them."""

from speechlm.config import Config, load
from speechlm.model.loss import chunk_tokens
from speechlm.plan import LOGIT_BYTES, assumed_kernels, clip_tokens, model_shapes, step_memory


def test_production_logits_are_one_chunk_and_the_assumption_is_stated():
    cfg = load(Config, None, None, ["training.per_device_train_batch_size=256"])  # the recipe's clips per step
    shapes = model_shapes(cfg)
    assert shapes.vocab_size == 248320
    _, labels = clip_tokens(cfg, 19.0)
    batch = cfg.training.per_device_train_batch_size
    assert batch * labels > chunk_tokens(shapes.vocab_size) == 540  # 17,408 label tokens at batch 256
    mem = step_memory(cfg, shapes, batch=batch, world=1, clip_seconds=19.0)
    assert mem["logits"] == 540 * 248320 * LOGIT_BYTES[2]  # 1.5 GiB, was 17,408 x vocab (40-48 GiB)
    # a batch below one chunk keeps its own count
    assert step_memory(cfg, shapes, batch=1, world=1, clip_seconds=19.0)["logits"] == labels * 248320 * LOGIT_BYTES[2]
    kernels = assumed_kernels(shapes)
    assert "chunked torch" in kernels["fused_loss"] and "torch reference" in kernels["linear_attention"]


def test_a_language_of_many_tokens_per_second_sizes_the_label_tokens():
    """Japanese kana at ~22 of SmolLM2's tokens per second (docs/languages.md) against English's 3.5: the
    planner sizes a clip by the largest rate the config states."""
    cfg = load(Config, None, None, [])
    _, english = clip_tokens(cfg, 10.0)
    cfg.model.tokens_per_second_by_language = {"en": 5.1, "ja": 21.9}
    seq_en = clip_tokens(load(Config, None, None, []), 10.0)[0]
    seq, labels = clip_tokens(cfg, 10.0)
    assert english == 36 and labels == 220 and seq - seq_en == labels - english
    shapes = model_shapes(cfg)
    assert (
        step_memory(cfg, shapes, batch=8, world=1, clip_seconds=10.0)["activations"]
        > step_memory(load(Config, None, None, []), shapes, batch=8, world=1, clip_seconds=10.0)["activations"]
    )
