#!/usr/bin/env python3
"""Trains moex's embedded model (models/moex-tiny-moe): a small qwen3_moe on the King James Bible, in two stages.
--stage tokenizer (needs `tokenizers`): BPE tokenizer + token ids of the text under --data (models/train-data).
--stage train (needs torch + transformers >= 5.17): trains on those ids, saves bf16 safetensors, reloads, samples.
"""
import argparse
import contextlib
import hashlib
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
EOS = "<|endoftext|>"
# Qwen2's split pattern: moex's tokenizer runs the same regex (PCRE2), so the embedded model exercises that path.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
VAL_EVERY = 100  # chapters 50, 150, ... (12 of 1189, about 1% of the tokens) are held out for validation
SAMPLE_PROMPTS = ["In the beginning", "And Jesus said unto them,", "The LORD is my shepherd;"]
MODEL_FILES = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"}


def log(msg):
    print(msg, flush=True)


# --------------------------------------------------------------------------------------------- stage tokenizer
def read_chapters(text_path):
    """The text as written by get_training_text.sh: verses one a line, chapters separated by one blank line."""
    text = Path(text_path).read_text(encoding="utf-8")
    chapters = [c.strip("\n") + "\n" for c in text.split("\n\n") if c.strip()]
    if len(chapters) < 2 * VAL_EVERY:
        sys.exit(f"{text_path}: only {len(chapters)} chapters; is it the output of get_training_text.sh?")
    return text, chapters


def build_tokenizer(chapters, vocab_size):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    # All 256 byte symbols stay in the vocabulary (the text is ASCII) so that any UTF-8 prompt can be encoded.
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(chapters, trainer=trainer)
    return tok


def stage_tokenizer(args):
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        text_path = args.text
        if text_path is None:
            text_path = str(Path(tmp) / "kjv.txt")
            subprocess.run(["bash", str(REPO / "scripts/get_training_text.sh"), text_path], check=True)
        text, chapters = read_chapters(text_path)

    t0 = time.time()
    tok = build_tokenizer(chapters, args.vocab_size)
    eos_id = tok.token_to_id(EOS)
    log(f"tokenizer: {tok.get_vocab_size()} tokens, {EOS} = {eos_id}, trained in {time.time() - t0:.1f} s")

    encodings = tok.encode_batch(chapters)
    for i in (0, len(chapters) // 2, len(chapters) - 1):  # byte-level BPE must give the text back exactly
        if tok.decode(encodings[i].ids, skip_special_tokens=False) != chapters[i]:
            sys.exit(f"tokenizer does not round-trip chapter {i}")
    train, val = [], []
    for i, enc in enumerate(encodings):
        (val if i % VAL_EVERY == VAL_EVERY // 2 else train).extend(enc.ids + [eos_id])
    assert tok.get_vocab_size() <= 65536, "ids are stored as uint16"
    np.save(data / "train_ids.npy", np.asarray(train, dtype=np.uint16))
    np.save(data / "val_ids.npy", np.asarray(val, dtype=np.uint16))
    tok.save(str(data / "tokenizer.json"), pretty=False)
    meta = {
        "source": "King James Version (public domain), Debian package bible-kjv-text, via get_training_text.sh",
        "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "text_bytes": len(text.encode("utf-8")),
        "chapters": len(chapters),
        "val_chapters": sum(1 for i in range(len(chapters)) if i % VAL_EVERY == VAL_EVERY // 2),
        "vocab_size": tok.get_vocab_size(),
        "eos_token_id": eos_id,
        "train_tokens": len(train),
        "val_tokens": len(val),
    }
    (data / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    size = sum(f.stat().st_size for f in data.iterdir())
    log(f"wrote {data}: {len(train)} train + {len(val)} val tokens "
        f"({len(text) / (len(train) + len(val)):.2f} bytes/token), {size / 1e6:.2f} MB in all")


# --------------------------------------------------------------------------------------------- stage train
def model_config(args, meta):
    from transformers import Qwen3MoeConfig

    if args.tiny:  # proves the pipeline on a CPU in a minute; not a useful model
        dims = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                    num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64)
    else:  # ~6.0 M parameters = ~12 MB in bf16; the embedding (4096 x 256, tied) is 1 M of them
        dims = dict(hidden_size=256, num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                    num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128)
    eos = meta["eos_token_id"]
    return Qwen3MoeConfig(
        vocab_size=meta["vocab_size"], intermediate_size=4 * dims["hidden_size"], hidden_act="silu",
        max_position_embeddings=512, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        rms_norm_eps=1e-6, tie_word_embeddings=True, norm_topk_prob=True, decoder_sparse_step=1,
        router_aux_loss_coef=0.01, eos_token_id=eos, pad_token_id=eos, bos_token_id=None,
        experts_implementation=args.experts_implementation, **dims)


def lr_at(args, step, progress):
    """Linear warm-up, then cosine from --lr to --lr/10 over the run's progress (time or steps, 0..1)."""
    warm = min(1.0, (step + 1) / args.warmup_steps)
    return args.lr * warm * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))))


def evaluate(model, val, args, autocast, with_routing=False):
    """Mean cross-entropy over the held-out chapters in non-overlapping windows; optionally the experts' load."""
    import torch
    import torch.nn.functional as F

    n = (len(val) - 1) // args.seq_len
    starts = torch.arange(n, device=val.device) * args.seq_len
    offsets = torch.arange(args.seq_len + 1, device=val.device)
    total, count, load = 0.0, 0, None
    model.eval()
    with torch.no_grad(), autocast():
        for b in range(0, n, args.batch_size):
            window = val[starts[b:b + args.batch_size, None] + offsets]
            out = model(input_ids=window[:, :-1], output_router_logits=with_routing)
            loss = F.cross_entropy(out.logits.float().flatten(0, 1), window[:, 1:].flatten(), reduction="sum")
            total, count = total + loss.item(), count + window[:, 1:].numel()
            if with_routing and getattr(out, "router_logits", None):
                k, e = model.config.num_experts_per_tok, model.config.num_experts
                hits = torch.stack([torch.bincount(r.topk(k, dim=-1).indices.flatten(), minlength=e)
                                    for r in out.router_logits]).float()
                load = hits if load is None else load + hits
    model.train()
    return total / max(count, 1), load


def train_loop(model, train, val, args, autocast, device):
    import torch
    import torch.nn.functional as F

    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95),
                            fused=device.type == "cuda")
    tokens_per_step = args.batch_size * args.seq_len
    max_steps = args.max_steps or (math.ceil(args.epochs * len(train) / tokens_per_step) if args.epochs else 0)
    log(f"training: {tokens_per_step} tokens/step, at most {args.minutes} min"
        + (f" or {max_steps} steps ({max_steps * tokens_per_step / len(train):.1f} epochs)" if max_steps else ""))
    gen = torch.Generator().manual_seed(args.seed)
    offsets = torch.arange(args.seq_len + 1, device=device)
    best, best_state, history = float("inf"), None, []
    budget, t0, step, seen = args.minutes * 60.0, time.time(), 0, 0
    model.train()
    while True:
        progress = max((time.time() - t0) / budget, step / max_steps if max_steps else 0.0)
        if progress >= 1.0:
            break
        lr = lr_at(args, step, progress)
        for group in opt.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, len(train) - args.seq_len - 1, (args.batch_size, 1), generator=gen).to(device)
        window = train[starts + offsets]
        with autocast():
            out = model(input_ids=window[:, :-1], output_router_logits=True)
            ce = F.cross_entropy(out.logits.float().flatten(0, 1), window[:, 1:].flatten())
            aux = out.aux_loss if getattr(out, "aux_loss", None) is not None else torch.zeros((), device=device)
            loss = ce + model.config.router_aux_loss_coef * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step, seen = step + 1, seen + tokens_per_step
        if step % args.log_every == 0:
            el = time.time() - t0
            log(f"step {step:6d}  {el:6.1f} s  epoch {seen / len(train):5.2f}  lr {lr:.2e}  loss {ce.item():.4f}  "
                f"aux {aux.item():.3f}  {seen / el:,.0f} tok/s")
        if step % args.eval_every == 0:
            v, _ = evaluate(model, val, args, autocast)
            history.append((step, v))
            log(f"step {step:6d}  val loss {v:.4f}" + ("  (best)" if v < best else ""))
            if v < best:
                best, best_state = v, {k: t.detach().clone() for k, t in model.state_dict().items()}
    v, load = evaluate(model, val, args, autocast, with_routing=True)
    history.append((step, v))
    log(f"stopped after {step} steps, {time.time() - t0:.1f} s, {seen / len(train):.2f} epochs: "
        f"train loss {ce.item():.4f}, val loss {v:.4f}")
    if load is not None:
        for layer, row in enumerate(load):
            log(f"  layer {layer} experts' share of routed tokens: "
                + " ".join(f"{x:.2f}" for x in (row / row.sum()).tolist()))
    if args.keep == "best" and best_state is not None and best < v:
        log(f"keeping the weights of step {min(history, key=lambda h: h[1])[0]} (val loss {best:.4f})")
        model.load_state_dict(best_state)


def save_model(model, meta, data, out):
    """Writes the four files of the checkpoint to a fresh folder, then swaps it in: no half-written model in out."""
    import torch
    from transformers import GenerationConfig

    eos = meta["eos_token_id"]
    model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=eos, do_sample=True,
                                               temperature=0.8, top_k=40, top_p=1.0)
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))  # transformers 5 writes safetensors only (safe_serialization is gone in 5.24)
    shutil.copyfile(Path(data) / "tokenizer.json", tmp / "tokenizer.json")
    config = json.loads((tmp / "config.json").read_text())
    # transformers 5.24 writes num_experts under its alias num_local_experts; the hub's Qwen3-MoE files spell it
    # num_experts, which every transformers 5 reads, so that spelling is written too.
    if "num_local_experts" in config:
        config.setdefault("num_experts", config["num_local_experts"])
    (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    written = {p.name for p in tmp.iterdir()}
    if written != MODEL_FILES:
        sys.exit(f"save_pretrained wrote {sorted(written)}, expected {sorted(MODEL_FILES)}")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    for f in out.iterdir():
        f.chmod(0o644)  # save_pretrained leaves model.safetensors at 0600
    size = (out / "model.safetensors").stat().st_size
    log(f"saved {out}: model.safetensors {size / 1e6:.2f} MB, {sum(p.numel() for p in model.parameters()):,} params")


def check_and_sample(out, saved_state, device, seed):
    """Reloads the checkpoint the way a user would, checks every tensor came back as saved, prints 3 samples."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(out)).to(device)
    loaded = model.state_dict()
    for name, t in saved_state.items():
        if name not in loaded or not torch.equal(loaded[name].to(t.device, t.dtype), t):
            sys.exit(f"{out}: tensor {name} did not come back as saved")
    tok = Tokenizer.from_file(str(Path(out) / "tokenizer.json"))
    torch.manual_seed(seed)
    for prompt in SAMPLE_PROMPTS:
        ids = torch.tensor([tok.encode(prompt).ids], device=device)
        new = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=60)
        log(f"--- sample: {prompt!r}\n{prompt}{tok.decode(new[0, ids.shape[1]:].tolist(), skip_special_tokens=True)}")


def stage_train(args):
    import torch
    from transformers import Qwen3MoeForCausalLM

    data = Path(args.data)
    meta = json.loads((data / "meta.json").read_text())
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.batch_size is None:
        args.batch_size = 8 if args.tiny else 64
    torch.manual_seed(args.seed)
    train = torch.from_numpy(np.load(data / "train_ids.npy").astype(np.int64)).to(device)
    val = torch.from_numpy(np.load(data / "val_ids.npy").astype(np.int64)).to(device)
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")  # TF32 for what autocast leaves in float32
        autocast = lambda: torch.autocast(device_type="cuda", dtype=torch.bfloat16)  # noqa: E731
    else:
        autocast = contextlib.nullcontext
    model = Qwen3MoeForCausalLM(model_config(args, meta)).to(device)
    experts = getattr(model.config, "_experts_implementation", "?")
    log(f"model: {sum(p.numel() for p in model.parameters()):,} params on {device}, experts {experts}; "
        f"data: {len(train):,} train / {len(val):,} val tokens")
    train_loop(model, train, val, args, autocast, device)
    save_model(model, meta, data, args.out)
    saved = {k: t.detach().clone() for k, t in model.state_dict().items()}
    check_and_sample(args.out, saved, device, args.seed)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", choices=["tokenizer", "train"], required=True)
    p.add_argument("--data", default=str(REPO / "models/train-data"), help="tokenizer.json + token ids (both stages)")
    p.add_argument("--text", help="tokenizer: training text (default: run scripts/get_training_text.sh)")
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--out", default=str(REPO / "models/moex-tiny-moe"), help="train: checkpoint folder (replaced)")
    p.add_argument("--minutes", type=float, default=4.0, help="train: time budget of the training loop")
    p.add_argument("--epochs", type=float, default=20.0, help="train: stop earlier after this many passes (0: none)")
    p.add_argument("--max-steps", type=int, default=0, help="train: stop earlier after this many steps (over --epochs)")
    p.add_argument("--tiny", action="store_true", help="train: a toy config for a CPU smoke test")
    p.add_argument("--batch-size", type=int, default=None, help="train: sequences per step (64; --tiny 8)")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--lr", type=float, default=1.5e-3)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--keep", choices=["best", "last"], default="best", help="train: weights of the best val loss")
    p.add_argument("--experts-implementation", default="eager",
                   help="train: transformers experts backend while training (eager: plain autocast-safe loop)")
    p.add_argument("--device", help="train: cuda | cpu (default: cuda when available)")
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()
    (stage_tokenizer if args.stage == "tokenizer" else stage_train)(args)


if __name__ == "__main__":
    main()
