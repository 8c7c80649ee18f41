# Times Hugging Face transformers generating with a MoE checkpoint (made by scripts/make_bench_checkpoint.py): prefill
# tokens/s (one forward over an N-token prompt) and greedy decode tokens/s, for several experts settings, printing one
# JSON line per setting and a short table (on stderr). The reference for moex's `generate` numbers in bench/RESULTS.md.
"""Usage:
  python3 bench/hf_generate_bench.py --model DIR [--prompt-tokens 512] [--new-tokens 128] [--reps 5]
                                     [--settings grouped_mm,batched_mm,compiled] [--prefill-compile-mode MODE]
  python3 bench/hf_generate_bench.py --model DIR --cpu [--dtype f32|bf16] [--threads N]

Settings (CUDA):
  grouped_mm  experts_implementation="grouped_mm" (transformers' default): prefill in grouped_mm; generate switches
              to batched_mm for the decode loop itself (GenerationMixin._optimize_model_for_decode).
  batched_mm  batched_mm for prefill and decode.
  eager       the per-expert loop (not in the default list).
  compiled    the best setting transformers offers: generate with cache_implementation="static" and
              CompileConfig(mode="reduce-overhead"), so the decode forward is torch.compile'd and replayed as CUDA
              graphs (in batched_mm, after the switch); the prefill is timed through
              torch.compile(forward, mode=--prefill-compile-mode) in grouped_mm ("none": not compiled).
  moex, moex_grouped_mm, moex_batched_mm, ...   moex's backends inside transformers (import moex_experts.transformers):
              no switch (transformers rewrites only "grouped_mm"; "moex" picks its kernel per call).
  moex-compiled  "moex" in the compiled setting: decode with static cache and reduce-overhead (moex's kernels replayed
              in CUDA graphs), prefill through torch.compile(forward, mode=--prefill-compile-mode) (moex's experts
              stay one opaque op; inductor fuses and tunes the rest as it does for transformers).
  zero-compiled  the compiled setting with the experts replaced by a function that returns zeros (routing, attention,
              norms, lm_head unchanged): the time of everything but the experts, so that each setting's experts
              share is measured, 1 - t(zero-compiled) / t(setting), and printed beside it.
Prefill: model(prompt, logits_to_keep=1) as generate's prefill does, CUDA-synchronised, median of --reps.
Decode: greedy with EOS disabled; (median time of generate(1 + new tokens) - median time of generate(1)) / new tokens.
On the CPU (--cpu) nothing switches and nothing is compiled; the default settings are grouped_mm and batched_mm.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, CompileConfig, GenerationConfig


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def median_seconds(fn, device, reps, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def prompt_ids(model_dir, config, n, device):
    """n random token ids (fixed seed) from the tokenizer's regular vocabulary, so the prompt decodes to text."""
    limit = config.vocab_size
    tok_path = os.path.join(model_dir, "tokenizer.json")
    if os.path.isfile(tok_path):
        limit = min(limit, len(json.load(open(tok_path))["model"]["vocab"]))
    gen = torch.Generator().manual_seed(0)
    return torch.randint(0, limit, (1, n), generator=gen).to(device)


ZERO_EXPERTS = "bench_zero_experts"


def register_zero_experts():
    """An experts function that does no work (zeros of the output's shape), registered in transformers' interface."""
    from transformers.integrations.moe import ExpertsInterface

    def zero_experts(self, hidden_states, top_k_index, top_k_weights):
        return torch.zeros_like(hidden_states)
    ExpertsInterface.register(ZERO_EXPERTS, zero_experts)


class Bench:
    def __init__(self, model, ids, args, device):
        self.model, self.ids, self.args, self.device = model, ids, args, device
        self.mask = torch.ones_like(ids)
        model.generation_config.eos_token_id = None  # EOS disabled: every run makes exactly the asked tokens

    def prefill(self, forward=None):
        forward = forward or self.model

        def run():
            with torch.inference_mode():
                forward(input_ids=self.ids, attention_mask=self.mask, logits_to_keep=1, use_cache=True)
        return median_seconds(run, self.device, self.args.reps, self.args.warmup)

    def generate_seconds(self, new_tokens, warmup, **kwargs):
        config = GenerationConfig(do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                  eos_token_id=None, pad_token_id=0, **kwargs)

        def run():
            with torch.inference_mode():
                out = self.model.generate(self.ids, attention_mask=self.mask, generation_config=config)
            if out.shape[1] != self.ids.shape[1] + new_tokens:
                raise RuntimeError(f"generate made {out.shape[1] - self.ids.shape[1]} tokens, not {new_tokens}")
        return median_seconds(run, self.device, self.args.reps, warmup)

    def decode(self, warmup, **kwargs):
        n = self.args.new_tokens
        full = self.generate_seconds(1 + n, warmup, **kwargs)
        first = self.generate_seconds(1, warmup, **kwargs)
        return n / max(full - first, 1e-9)

    def compiled(self, experts, decode_experts):
        """The compiled setting with `experts` in the prefill and `decode_experts` in the decode loop."""
        a = self.args
        if self.device != "cuda":
            raise RuntimeError("the compiled (CUDA graphs) setting needs CUDA")
        self.model.set_experts_implementation(experts)
        forward = None
        if a.prefill_compile_mode != "none":
            torch._dynamo.reset()  # a fresh graph per setting: the experts function is part of it
            forward = torch.compile(self.model.forward, mode=a.prefill_compile_mode, dynamic=False)
        prefill_s = self.prefill(forward)
        tok_s = self.decode(max(a.warmup, 3), cache_implementation="static",
                            compile_config=CompileConfig(mode="reduce-overhead"))
        note = (f"prefill {experts} compiled ({a.prefill_compile_mode}); decode {decode_experts}, static cache, "
                "reduce-overhead (CUDA graphs)")
        return prefill_s, tok_s, note

    def run(self, setting):
        a, on_cuda = self.args, self.device == "cuda"
        if setting == "moex-compiled":
            prefill_s, tok_s, note = self.compiled("moex", "moex")
        elif setting == "compiled":
            prefill_s, tok_s, note = self.compiled("grouped_mm", "batched_mm")
        elif setting == "zero-compiled":
            register_zero_experts()
            prefill_s, tok_s, note = self.compiled(ZERO_EXPERTS, ZERO_EXPERTS)
        else:
            self.model.set_experts_implementation(setting)
            prefill_s = self.prefill()
            tok_s = self.decode(a.warmup)
            switched = on_cuda and setting == "grouped_mm"
            note = f"prefill {setting}; decode {'batched_mm (transformers switch)' if switched else setting}"
        return dict(prefill_tok_s=round(self.ids.shape[1] / prefill_s, 1), decode_tok_s=round(tok_s, 2), note=note)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint directory")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (default: cuda)")
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16", help="compute dtype (f32: CPU only)")
    ap.add_argument("--prompt-tokens", type=int, help="default 512 (cuda), 128 (cpu)")
    ap.add_argument("--new-tokens", type=int, help="default 128 (cuda), 32 (cpu)")
    ap.add_argument("--settings", help="comma-separated: grouped_mm, batched_mm, eager, compiled "
                                       "(default: grouped_mm,batched_mm,compiled; cpu: grouped_mm,batched_mm)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--prefill-compile-mode", default="max-autotune-no-cudagraphs",
                    help='torch.compile mode of the compiled setting\'s prefill ("none": not compiled)')
    args = ap.parse_args()
    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device (use --cpu)")
    if device == "cuda" and args.dtype != "bf16":
        raise SystemExit("--dtype f32 is for --cpu only")
    args.prompt_tokens = args.prompt_tokens or (128 if args.cpu else 512)
    args.new_tokens = args.new_tokens or (32 if args.cpu else 128)
    settings = (args.settings or ("grouped_mm,batched_mm" if args.cpu else "grouped_mm,batched_mm,compiled")).split(",")
    if args.threads:
        torch.set_num_threads(args.threads)
    if any(s.startswith("moex") for s in settings):
        import moex_experts.transformers  # noqa: F401  (registers moex_<name> and "moex" in ExpertsInterface)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype,  # no device_map: needs accelerate
                                                 experts_implementation="grouped_mm").to(device).eval()
    ids = prompt_ids(args.model, model.config, args.prompt_tokens, device)
    bench = Bench(model, ids, args, device)
    rows = []
    for setting in settings:
        row = dict(setting=setting, prefill_tokens=args.prompt_tokens, prefill_tok_s=None,
                   decode_tokens=args.new_tokens, decode_tok_s=None)
        try:
            row.update(bench.run(setting))
        except (RuntimeError, ValueError) as e:  # torch.OutOfMemoryError is a RuntimeError
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            if device == "cuda":
                torch.cuda.empty_cache()
        row.update(device=torch.cuda.get_device_name() if device == "cuda" else "cpu", dtype=args.dtype,
                   layers=model.config.num_hidden_layers, transformers=transformers.__version__,
                   torch=torch.__version__)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print_table(rows)


def experts_shares(rows):
    """Each row's experts share of prefill and decode time, 1 - t(zero-compiled) / t(row), where both were run."""
    zero = next((r for r in rows if r["setting"] == "zero-compiled" and not r.get("error")), None)
    for r in rows:
        for phase in ("prefill", "decode"):
            if zero and r is not zero and r[f"{phase}_tok_s"] and zero[f"{phase}_tok_s"]:
                r[f"{phase}_experts_share"] = round(1 - r[f"{phase}_tok_s"] / zero[f"{phase}_tok_s"], 3)


def print_table(rows):
    experts_shares(rows)

    def num(v):
        return "-" if v is None else f"{v:,.1f}"

    def share(v):
        return "-" if v is None else f"{100 * v:.0f}%"
    lines = [f"{'setting':<14} {'prefill tok/s':>14} {'experts':>8} {'decode tok/s':>13} {'experts':>8}  note",
             f"{'-' * 14} {'-' * 14} {'-' * 8} {'-' * 13} {'-' * 8}  {'-' * 4}"]
    for r in rows:
        lines.append(f"{r['setting']:<14} {num(r['prefill_tok_s']):>14} {share(r.get('prefill_experts_share')):>8} "
                     f"{num(r['decode_tok_s']):>13} {share(r.get('decode_experts_share')):>8}  "
                     f"{r.get('error') or r.get('note', '')}")
    print("\n".join(lines), file=sys.stderr)


if __name__ == "__main__":
    main()
