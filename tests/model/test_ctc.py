"""The CTC head's loss (speechlm.model.ctc) normalizes over the whole vocabulary one chunk of frames at
a time and keeps only the batch's tokens: the same loss and gradient as the full [frames, V + 1]
log-softmax, without its memory. On a training reader's batch it falls, training the projector
alone (the warm start's loss: tests/demo/test_listening.py runs it in the trainer)."""

import torch
import torch.nn.functional as F

from model_helpers import batch, tiny_config, waves
from speechlm import config as config_mod
from speechlm.config import Config
from speechlm.model import build_model, ctc
from speechlm.train.inputs import make_loaders


def test_compact_head_equals_the_full_softmax_in_loss_and_gradient(monkeypatch):
    torch.manual_seed(0)
    m = build_model(tiny_config())
    b = batch(m, waves((16000, 9000, 12000)), transcripts=("hello world", "the cat sat", "a b c d"))
    proj, lengths = m.encode_audio(b["input_features"], b["feature_mask"])
    monkeypatch.setattr(ctc, "chunk_frames", lambda vocab: 7)  # several chunks, a ragged last one
    compact, _ = ctc.projected_ctc_loss(m, proj, lengths, b["labels"])
    frames, rows, inv_norm, blank = ctc.head_inputs(m, proj)
    targets = ctc.transcript_targets(b["labels"])
    n = torch.tensor([len(t) for t in targets])

    def full(cosines):  # the whole [frames, V + 1] log-softmax, then torch's CTC
        logits = ctc.COSINE_SCALE * torch.cat([cosines, (frames @ blank)[..., None]], -1)
        logp = logits.log_softmax(-1).transpose(0, 1)
        loss = F.ctc_loss(logp, torch.cat(targets), lengths, n, blank=logp.shape[-1] - 1, reduction="none")
        return (loss / n).mean()

    # the same arithmetic (cosines from the table in its own dtype, bf16 here): equal but for sum order
    same = full((frames.to(rows.dtype) @ rows.T).float() * inv_norm)
    torch.testing.assert_close(compact, same, rtol=1e-5, atol=0)
    g_compact = torch.autograd.grad(compact, proj, retain_graph=True)[0]
    g_same = torch.autograd.grad(same, proj, retain_graph=True)[0]
    # the gradient passes bf16 matmuls (2^-8 relative each) summed per chunk in another order: measured
    # 0.5% of its largest entry; a few bf16 roundings of it allowed
    torch.testing.assert_close(g_compact, g_same, rtol=0, atol=2**-6 * g_same.abs().max().item())
    # against fp32 cosines: one bf16 rounding of each cosine (2^-8 relative) moves the loss by less than that
    exact = full(frames @ F.normalize(rows.float(), dim=-1).T)
    torch.testing.assert_close(compact, exact, rtol=2**-8, atol=0)


def test_ctc_loss_falls_on_one_batch_and_ignores_the_decoder(synthetic_shards):
    # the tiny recipe: production's precision and freeze flags, outside DeepSpeed
    cfg = config_mod.load(
        Config,
        "tiny",
        None,
        [f"data.train=[{{path: {synthetic_shards}, split: train}}]", "data.eval=[]", "data.num_workers=1"],
    )
    model = build_model(cfg)
    train, _ = make_loaders(cfg, model, 0, 1)
    b = next(iter(train))
    proj = [p for p in model.projector.parameters()]
    opt = torch.optim.AdamW(proj, lr=3e-3)
    model.train()
    first = None
    for _ in range(8):
        loss, n = ctc.ctc_loss(model, b["input_features"], b["feature_mask"], b["labels"], b["weight"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first if first is not None else float(loss.detach())
        assert all(p.grad is None for n_, p in model.decoder.named_parameters() if "lora_" in n_)
    assert float(loss) < first
    assert float(n) == sum(len(t) for t in ctc.transcript_targets(b["labels"]))


def test_the_forward_aligns_ctc_labels_where_the_batch_has_them():
    """A batch with ctc_labels (a translation's transcript) scores the CTC head on them, in the warm
    start and as the LM step's auxiliary loss, while the LM loss stays on the answer."""
    model = build_model(tiny_config(ctc_weight=1.0))
    b = batch(model, waves(), ["one two", "three four five"])
    spoken = batch(model, waves(), ["six", "seven eight"])["labels"]
    model.train()
    with torch.no_grad():
        plain = model(**b, objective="ctc").loss
        aligned = model(**b, objective="ctc", ctc_labels=spoken).loss
        want, _ = ctc.ctc_loss(model, b["input_features"], b["feature_mask"], spoken, b["weight"])
        assert torch.equal(aligned, want) and not torch.equal(aligned, plain)
        torch.manual_seed(0)  # the same dropout masks in both LM steps
        lm_plain = model(**b).loss
        torch.manual_seed(0)
        lm_aligned = model(**b, ctc_labels=spoken).loss
        with model._autocast(b["input_ids"].device):  # the LM step projects under the run's autocast
            projected = model.encode_audio(b["input_features"], b["feature_mask"])
        diff = (
            ctc.projected_ctc_loss(model, *projected, spoken)[0]
            - ctc.projected_ctc_loss(model, *projected, b["labels"])[0]
        )
    assert abs(float(diff)) > 0.1  # the two targets score apart
    torch.testing.assert_close(lm_aligned - lm_plain, diff, rtol=1e-4, atol=1e-4)  # the same arithmetic on both sides
