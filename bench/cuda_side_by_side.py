# One table of moex against its GPU peers measured in the same run (issue #12 item 5), from the JSON lines of
# `moex bench --device cuda --json-file` (plain and --graph), bench/python_bench.py --peers-only (transformers' experts
# backends: plain, CUDA graphs, torch.compile) and the SonicMoE bench (sonicmoe_bench.py of ../shared/perf/peers).
"""Usage: python3 bench/cuda_side_by_side.py FILE.jsonl ...   (any mix of the three kinds; prints markdown)

Per (shape, T): moex's best (backend, +graph when replayed from a CUDA graph), transformers' best configuration, SonicMoE
(eager, or its CUDA-graph replay when faster), the floor of moex bench, and best peer ÷ best moex (above 1: moex is
faster). A peer that could not run at that point says why (its skip or error, shortened)."""
import json
import sys


def load(paths):
    """{(shape, T): {"moex": [(us, label)], "transformers": [...], "sonicmoe": [...], "why": {peer: text}}}, floors."""
    cells, floors = {}, {}
    for path in paths:
        for line in open(path):
            line = line.strip()
            if not line.startswith("{"):
                continue
            o = json.loads(line)
            if "shape" not in o or "T" not in o:
                continue
            c = cells.setdefault((o["shape"], int(o["T"])), {"moex": [], "transformers": [], "sonicmoe": [], "why": {}})
            kind = o.get("kind")
            if kind in ("result", "skip", "error") and "backend" in o:  # moex bench
                label = o["backend"] + ("+graph" if o.get("graph") else "")
                if kind == "result" and o.get("us"):
                    c["moex"].append((o["us"], label))
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
    return cells, floors


def best(entries):
    return min(entries) if entries else None


def main(paths):
    cells, floors = load(paths)
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


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
