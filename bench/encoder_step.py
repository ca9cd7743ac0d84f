"""Step time per part for the production shape: frozen encoder, fresh projector, frozen decoder + LoRA.

One training step on a batch of clips, split into: features (the collator's work), the frozen
encoder's forward (no grad), and the rest of the step (projector + decoder forward + backward with
LoRA, logits at label positions). Models are ids, local dirs or bundled configs; a bundled config
(no weights offline) builds a random model of the real shape, which times the same as real weights.

    python bench/encoder_step.py [--encoder openai/whisper-tiny.en] [--decoder smollm2-135m]
                                 [--batch 8] [--seconds 3] [--stride 4] [--lora-rank 16] [--repeats 3]

`--decoder smollm2-135m` is SmolLM2-135M-Instruct's shape (LlamaForCausalLM, hidden 576, 30 layers).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT]

import numpy as np  # noqa: E402
import torch  # noqa: E402

SMOLLM2_135M = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_theta=100000.0,
    tie_word_embeddings=True,
)


def load_encoder(model_id: str, family):
    from pathlib import Path

    from speechlm.model import ids, parts

    if Path(ids.resolve(model_id)).is_dir():
        return parts.load_encoder(family, model_id, torch.float32), "weights"
    enc = family.meta_encoder().to_empty(device="cpu")  # bundled config: random weights, real shape
    for p in enc.parameters():
        torch.nn.init.normal_(p, std=0.02)
    return enc, "random (bundled config)"


def load_decoder(name: str):
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    from speechlm.model import parts

    if name == "smollm2-135m":
        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M)), "random (SmolLM2-135M shape)"
    try:
        return parts.load_decoder(name, torch.float32, "sdpa"), "weights"
    except OSError:
        cfg = parts.text_config(parts.load_config(name, allow_bundled=True))
        return AutoModelForCausalLM.from_config(cfg), "random (bundled config)"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoder", default="openai/whisper-tiny.en")
    ap.add_argument("--decoder", default="smollm2-135m")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--words", type=int, default=8, help="transcript words per clip")
    ap.add_argument("--stride", type=int, default=4)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))

    from speechlm import text
    from speechlm.config import Config, ModelConfig, TrainingConfig
    from speechlm.data import Collator
    from speechlm.model import encoders, tiny
    from speechlm.model.build import assemble

    family = encoders.family_for(args.encoder, allow_bundled=True)
    encoder, enc_src = load_encoder(args.encoder, family)
    decoder, dec_src = load_decoder(args.decoder)
    tok = text.load_tokenizer(str(tiny.ensure("qwen3")), "<audio>")  # ChatML; its ids fit any vocabulary here
    mcfg = ModelConfig(
        audio_model_id=args.encoder,
        text_model_id=args.decoder,
        model_dtype="float32",
        projector_pool_stride=args.stride,
        projector_hidden_dim=2048,
        lora_rank=args.lora_rank,
        lora_alpha=args.lora_rank,
        calibrate_projector=False,
    )
    cfg = Config(model=mcfg, training=TrainingConfig(bf16=False))
    trainable = {"encoder": False, "projector": True, "decoder": False, "embed_tokens": False, "lora": True}
    model = assemble(cfg, encoder, decoder, tok, trainable, family).train()
    opt = torch.optim.AdamW(model.parameter_groups(cfg.training))
    collator = Collator(tok, prompt=mcfg.prompt, audio_token=mcfg.audio_token, family=family, pool_stride=args.stride)
    rng = np.random.default_rng(0)
    words = "the quick brown fox jumps over a lazy dog near seven green houses".split()
    samples = [
        {
            "id": str(i),
            "text": " ".join(rng.choice(words, args.words)),
            "audio": (0.1 * rng.standard_normal(int(16000 * args.seconds))).astype(np.float32),
        }
        for i in range(args.batch)
    ]
    # wall and CPU seconds (all threads): on a shared machine the CPU time is the steadier measure
    clocks = {"wall": time.perf_counter, "cpu": time.process_time}
    times = {(c, k): [] for c in clocks for k in ("features", "encoder", "rest", "step")}
    for r in range(args.repeats + 1):  # the first is a warm-up
        t = [{c: f() for c, f in clocks.items()}]
        batch = collator(samples)
        t.append({c: f() for c, f in clocks.items()})
        with torch.no_grad():
            family.encode(model.encoder, batch["input_features"], batch["feature_mask"])
        t.append({c: f() for c, f in clocks.items()})
        opt.zero_grad()
        model(**batch).loss.backward()
        opt.step()
        t.append({c: f() for c, f in clocks.items()})
        if r:
            for c in clocks:
                times[c, "features"].append(t[1][c] - t[0][c])
                times[c, "encoder"].append(t[2][c] - t[1][c])
                times[c, "step"].append(t[3][c] - t[2][c])  # the whole model step, the encoder's forward included
                times[c, "rest"].append((t[3][c] - t[2][c]) - (t[2][c] - t[1][c]))
    med = {k: float(np.median(v)) for k, v in times.items()}
    n_audio = collator.num_audio_tokens(int(16000 * args.seconds))
    print(
        f"encoder {args.encoder} [{family.name}, {enc_src}] + decoder {args.decoder} [{dec_src}], "
        f"LoRA r{args.lora_rank}, "
        f"stride {args.stride}; batch {args.batch} x {args.seconds:g} s ({n_audio} <audio> tokens each), "
        f"sequence {batch['input_ids'].shape[1]} tokens; {torch.get_num_threads()} threads; median of {args.repeats}"
    )
    print(f"  {'part':<28}{'wall s':>8}{'CPU s':>8}")
    for k in ("features", "encoder", "rest", "step"):
        label = {"rest": "projector+decoder fwd+bwd", "step": "model step (enc+rest)"}.get(k, k)
        print(f"  {label:<28}{med['wall', k]:8.3f}{med['cpu', k]:8.3f}")


if __name__ == "__main__":
    main()
