"""The chunked label-position loss equals the unfused one: loss and projector/LoRA gradients."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from model_helpers import batch, tiny_config, waves
from speechlm.model import build_model
from speechlm.model import loss as loss_mod
from speechlm.model.loss import chunked_token_ce, fused_loss_kind, token_cross_entropy


def unfused(model, b):
    """The computation before the chunked loss: all label logits at once, then weighted CE."""
    logits, targets, rows = model.label_logits(
        b["input_features"], b["feature_mask"], b["input_ids"], b["attention_mask"], b["labels"]
    )
    ce = F.cross_entropy(logits.float(), targets, reduction="none")
    w = b["weight"][rows]
    return (ce * w).sum() / w.sum() if w.sum() > 0 else (ce * w).sum()


def loss_and_grads(model, fn, b):
    model.zero_grad(set_to_none=True)
    loss = fn(model, b)
    loss.backward()
    grads = {
        n: p.grad.clone()
        for n, p in model.named_parameters()
        if p.requires_grad and ("lora_" in n or n.startswith("projector"))
    }
    return loss.detach(), grads


@pytest.fixture
def small_chunks(monkeypatch):
    # 3 label tokens per chunk: the tiny batch's ~12 label tokens span several chunks, one partial
    monkeypatch.setattr(loss_mod, "MIN_CHUNK_TOKENS", 1)
    monkeypatch.setattr(loss_mod, "LOGIT_ELEMENTS_PER_CHUNK", 3 * 576)


# tolerances: loss (absolute and relative), gradients (max error relative to the largest entry).
# Measured on CPU: fp32 agrees to 7e-6 in gradients, bf16 autocast bit-exactly; a GPU's bf16
# matmuls on row subsets may differ by a few ulps, hence the bf16 margin.
@pytest.mark.parametrize("bf16,loss_tol,grad_tol", [(False, 1e-5, 1e-4), (True, 1e-3, 1e-2)])
def test_chunked_loss_and_gradients_equal_unfused(small_chunks, bf16, loss_tol, grad_tol):
    torch.manual_seed(0)
    cfg = tiny_config(bf16=bf16)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, model_dtype="bfloat16" if bf16 else "float32"))
    m = build_model(cfg)
    m.train(False)  # no dropout: both passes see the same function
    b = batch(
        m,
        waves([16000, 9000, 12000]),
        transcripts=("hello world", "the cat sat on the mat", "a b c"),
        weight=[1.0, 0.5, 2.0],
    )
    assert loss_mod.chunk_tokens(576) == 3 and int((b["labels"] != -100).sum()) > 6
    ours, g_ours = loss_and_grads(m, lambda mm, bb: mm(**bb).loss, b)
    ref, g_ref = loss_and_grads(m, unfused, b)
    torch.testing.assert_close(ours, ref, rtol=loss_tol, atol=loss_tol)
    assert any("lora_" in n for n in g_ref) and any(n.startswith("projector") for n in g_ref)
    for n in g_ref:
        scale = g_ref[n].abs().max().clamp_min(1e-8)
        assert (g_ours[n] - g_ref[n]).abs().max() / scale <= grad_tol, n


def test_zero_weight_batch_gives_zero_loss_with_graph(small_chunks):
    m = build_model(tiny_config())
    m.train(False)
    b = batch(m, waves(), weight=[0.0, 0.0])
    out = m(**b)
    assert out.loss.item() == 0 and out.num_tokens.item() == 0 and out.loss.requires_grad
    out.loss.backward()  # every trainable part got a (zero) gradient: every module ran
    lora = [p for n, p in m.named_parameters() if "lora_B" in n]
    assert lora and all(p.grad is not None and not p.grad.any() for p in lora)


def test_chunked_matches_a_lora_wrapped_head_and_no_labels():
    """A head peft wraps (lm_head named in target_modules) runs its own forward in every chunk."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 50))
    net = get_peft_model(net, LoraConfig(r=2, target_modules=["0"], init_lora_weights=False))
    head = net.base_model.model[0]
    assert fused_loss_kind(head, torch.device("cpu"))[0] == "chunked"
    h = torch.randn(11, 8, requires_grad=True)
    t = torch.randint(0, 50, (11,))
    ours = chunked_token_ce(head, h, t, chunk=4)
    ref = F.cross_entropy(head(h), t, reduction="none")
    torch.testing.assert_close(ours, ref)
    g1 = torch.autograd.grad(ours.sum(), [h, head.lora_A["default"].weight])
    g2 = torch.autograd.grad(ref.sum(), [h, head.lora_A["default"].weight])
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b)
    empty = token_cross_entropy(head, h[:0], t[:0])
    assert empty.shape == (0,) and empty.requires_grad


def test_chunk_size_is_a_logits_budget():
    assert loss_mod.chunk_tokens(248320) == 540
    assert loss_mod.chunk_tokens(32000) == 4194
    assert loss_mod.chunk_tokens(10**9) == loss_mod.MIN_CHUNK_TOKENS
    assert fused_loss_kind(torch.nn.Linear(4, 4), torch.device("cpu")) == ("chunked", "not on CUDA")
