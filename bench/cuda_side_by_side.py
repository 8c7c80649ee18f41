# One table of moex against its GPU peers measured in the same run (issue #12 item 5), from the JSON lines of
# `moex bench --device cuda --json-file` (plain and --graph), bench/python_bench.py --peers-only (transformers' experts
# backends: plain, CUDA graphs, torch.compile), the SonicMoE bench (sonicmoe_bench.py of ../shared/perf/peers) and the
# training step: `moex bench --backward` and bench/peers/sonicmoe_train.py (issue #14 item 5).
"""Usage: python3 bench/cuda_side_by_side.py FILE.jsonl ...   (any mix of the kinds; prints markdown)

Forward, per (shape, T): moex's best (backend, +graph when replayed from a CUDA graph), transformers' best
configuration, SonicMoE (eager, or its CUDA-graph replay when faster), the floor of moex bench, and best peer ÷ best
moex (above 1: moex is faster). A peer that could not run at that point says why (its skip or error, shortened).
Training, per (shape, T) either side measured: forward and backward µs and TFLOP/s of moex grouped_mm and of SonicMoE
in training mode, the memory SonicMoE keeps for its backward, and SonicMoE ÷ moex per pass."""
import json
import sys


def load(paths):
    """{(shape, T): {"moex": [(us, label)], "transformers": [...], "sonicmoe": [...], "why": {peer: text}}}, floors."""
    cells, floors, train = {}, {}, {}
    for path in paths:
        for line in open(path):
            line = line.strip()
            if not line.startswith("{"):
                continue
            o = json.loads(line)
            if "shape" not in o or "T" not in o:
                continue
            key = (o["shape"], int(o["T"]))
            kind = o.get("kind")
            if o.get("impl") == "sonicmoe-train" or (kind == "result" and o.get("backward")):
                t = train.setdefault(key, {})
                if o.get("backward") and o.get("us") and o.get("backend") == "grouped_mm":
                    t["moex_bwd"] = (o["us"], o["gflops"] / 1e3)
                elif o.get("impl") == "sonicmoe-train" and (o.get("fwd_us") or not t.get("sonic", {}).get("fwd_us")):
                    t["sonic"] = o  # a measured row wins over a skip of another run
                continue
            c = cells.setdefault(key, {"moex": [], "transformers": [], "sonicmoe": [], "why": {}})
            if kind in ("result", "skip", "error") and "backend" in o:  # moex bench
                label = o["backend"] + ("+graph" if o.get("graph") else "")
                if kind == "result" and o.get("us"):
                    c["moex"].append((o["us"], label))
                    if o["backend"] == "grouped_mm" and not o.get("graph"):
                        c["moex_grouped"] = (o["us"], o["gflops"] / 1e3)
                    if o.get("floor_us"):
                        floors[(o["shape"], int(o["T"]))] = o["floor_us"]
            elif o.get("impl") == "sonicmoe":  # the SonicMoE bench
                if o.get("us"):
                    c["sonicmoe"].append((o["us"], "eager"))
                if o.get("us_graph"):
                    c["sonicmoe"].append((o["us_graph"], "graph"))
                if o.get("error"):
                    c["why"]["sonicmoe"] = o["error"].splitlines()[0][:80]
            elif kind == "skipped" and o.get("reason"):
                c["why"].setdefault("sonicmoe", o["reason"])
            elif "impl" in o and not o["impl"].startswith(("moex", "direct")):  # python_bench: transformers
                if o.get("us"):
                    c["transformers"].append((o["us"], o["impl"]))
                elif o.get("skip"):
                    c["why"].setdefault("transformers", f"{o['impl']}: {o['skip'][:60]}")
    return cells, floors, train


def best(entries):
    return min(entries) if entries else None


def training_table(cells, train):
    print("| shape | T | moex fwd µs (TFLOP/s) | moex bwd µs (TFLOP/s) | SonicMoE fwd µs (TFLOP/s) | SonicMoE bwd µs "
          "(TFLOP/s) | SonicMoE act MiB | SonicMoE ÷ moex fwd / bwd |")
    print("|---|---:|---|---|---|---|---:|---|")
    for (shape, T) in sorted(train):
        t, fwd = train[(shape, T)], cells.get((shape, T), {}).get("moex_grouped")
        bwd, so = t.get("moex_bwd"), t.get("sonic", {})
        mf = f"{fwd[0]:.0f} ({fwd[1]:.0f})" if fwd else "—"
        mb = f"{bwd[0]:.0f} ({bwd[1]:.0f})" if bwd else "—"
        if so.get("fwd_us"):
            sf, sb = f"{so['fwd_us']:.0f} ({so['fwd_tflops']:.0f})", f"{so['bwd_us']:.0f} ({so['bwd_tflops']:.0f})"
            act = f"{so['act_mib']:.0f}"
            rf = f"{so['fwd_us'] / fwd[0]:.2f}" if fwd else "—"
            rb = f"{so['bwd_us'] / bwd[0]:.2f}" if bwd else "—"
            ratio = f"{rf} / {rb}"
        else:
            why = (so.get("error") or so.get("reason") or "not run").splitlines()[0][:60]
            sf, sb, act, ratio = f"— ({why})", "—", "—", "—"
        print(f"| {shape} | {T} | {mf} | {mb} | {sf} | {sb} | {act} | {ratio} |")


def forward_table(cells, floors):
    print("| shape | T | moex µs (backend) | transformers µs (config) | SonicMoE µs | floor µs | best peer ÷ moex |")
    print("|---|---:|---|---|---|---:|---:|")
    for (shape, T) in sorted(cells, key=lambda k: (k[0], k[1])):
        c = cells[(shape, T)]
        m, hf, sm = best(c["moex"]), best(c["transformers"]), best(c["sonicmoe"])

        def cell(b, peer):
            if b:
                return f"{b[0]:.1f} ({b[1]})"
            return f"— ({c['why'][peer]})" if peer in c["why"] else "—"

        peers = [p for p in (hf, sm) if p]
        ratio = f"{min(peers)[0] / m[0]:.2f}" if m and peers else "—"
        floor = f"{floors[(shape, T)]:.1f}" if (shape, T) in floors else "—"
        moex = f"{m[0]:.1f} ({m[1]})" if m else "—"
        print(f"| {shape} | {T} | {moex} | {cell(hf, 'transformers')} | {cell(sm, 'sonicmoe')} | {floor} | {ratio} |")


def main(paths):
    cells, floors, train = load(paths)
    forward = {key: c for key, c in cells.items() if c["moex"] or c["transformers"] or c["sonicmoe"] or c["why"]}
    if forward:
        forward_table(forward, floors)
    if train:
        if forward:
            print()
        training_table(cells, train)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
