"""The CTC head's loss (speechlm.model.ctc) normalizes over the whole vocabulary one chunk of frames at
a time and keeps only the batch's tokens: the same loss and gradient as the full [frames, V + 1]
log-softmax, without its memory."""

import torch
import torch.nn.functional as F

from model_helpers import batch, tiny_config, waves
from speechlm.model import build_model, ctc


def test_compact_head_equals_the_full_softmax_in_loss_and_gradient(monkeypatch):
    torch.manual_seed(0)
    m = build_model(tiny_config())
    b = batch(m, waves((16000, 9000, 12000)), transcripts=("hello world", "the cat sat", "a b c d"))
    proj, lengths = m.encode_audio(b["input_features"], b["feature_mask"])
    monkeypatch.setattr(ctc, "chunk_tokens", lambda vocab: 7)  # several chunks, a ragged last one
    compact, _ = ctc.projected_ctc_loss(m, proj, lengths, b["labels"])
    frames, table, blank = ctc.head_inputs(m, proj)
    logp = (ctc.COSINE_SCALE * frames @ torch.cat([table, blank[None]]).T).log_softmax(-1).transpose(0, 1)
    targets = ctc.transcript_targets(b["labels"])
    n = torch.tensor([len(t) for t in targets])
    full = F.ctc_loss(logp, torch.cat(targets), lengths, n, blank=logp.shape[-1] - 1, reduction="none")
    full = (full / n).mean()
    torch.testing.assert_close(compact, full, rtol=1e-5, atol=0)
    g_compact = torch.autograd.grad(compact, proj, retain_graph=True)[0]
    g_full = torch.autograd.grad(full, proj)[0]
    # fp32 sums in another order (measured 3e-4 of the gradient's largest entry): 1e-3 of it
    torch.testing.assert_close(g_compact, g_full, rtol=0, atol=1e-3 * g_full.abs().max().item())
