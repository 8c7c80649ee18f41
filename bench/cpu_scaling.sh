#!/usr/bin/env bash
# Thread scaling of the CPU experts (issue #15 item 3): `moex bench --device cpu` pinned with taskset to 1, 2, 4, 8, 16
# cores (one hardware thread per physical core) and --threads alike, each pool thread pinned to its own core inside
# that set (MOEX_CPU_PIN=1; PIN=0 lets the OS place them), per CPU kernel table (MOEX_CPU_KERNELS; the default one
# and avx512, so an AMX host times AMX against AVX-512), then one table: time and parallel efficiency.
#
#   bash bench/cpu_scaling.sh                       # qwen3-30b-a3b + mixtral-8x7b, T = 512, 1024, bf16
#   MOEX=build/moex THREADS=1,2,4 KERNELS=default TOKENS=512 BACKENDS=grouped_mm bash bench/cpu_scaling.sh
#   EXTRA="--reps 3" OUT=scaling.jsonl bash bench/cpu_scaling.sh   # more bench options; keep the JSON lines
#
# Efficiency at n threads = t(1) / (n · t(n)) of the same table, backend, shape and T (issue #15 asks >= 85% at
# T >= 512). Thread counts above the machine's physical cores are skipped with a note.
set -euo pipefail

MOEX=${MOEX:-build/moex}
THREADS=${THREADS:-1,2,4,8,16}
KERNELS=${KERNELS:-default,avx512}
SHAPES=${SHAPES:-qwen3-30b-a3b,mixtral-8x7b}
TOKENS=${TOKENS:-512,1024}
BACKENDS=${BACKENDS:-grouped_mm,batched_mm}
DTYPE=${DTYPE:-bf16}
EXTRA=${EXTRA:-}
OUT=${OUT:-$(mktemp /tmp/moex_cpu_scaling.XXXXXX.jsonl)}

[[ -x $MOEX ]] || { echo "cpu_scaling: no moex program at $MOEX (set MOEX=...)" >&2; exit 1; }
command -v taskset > /dev/null || { echo "cpu_scaling: needs taskset (util-linux)" >&2; exit 1; }
command -v python3 > /dev/null || { echo "cpu_scaling: needs python3 for the table" >&2; exit 1; }

# One logical CPU per physical core, in (socket, core) order: pinning n threads to the first n of them keeps SMT
# siblings out of the count and fills one socket (one NUMA node on the usual two-socket layout) before the next.
mapfile -t cores < <(lscpu -p=CPU,CORE,SOCKET | grep -v '^#' | sort -t, -k3,3n -k2,2n -k1,1n |
    awk -F, '!seen[$3","$2]++ { print $1 }')
echo "cpu_scaling: ${#cores[@]} physical cores; JSON lines in $OUT" >&2
: > "$OUT"

IFS=, read -r -a thread_list <<< "$THREADS"
IFS=, read -r -a kernel_list <<< "$KERNELS"
status=0
for kernels in "${kernel_list[@]}"; do
    for n in "${thread_list[@]}"; do
        if (( n > ${#cores[@]} )); then
            echo "cpu_scaling: skipping $n threads: this machine has ${#cores[@]} physical cores" >&2
            continue
        fi
        cpus=$(IFS=,; echo "${cores[*]:0:n}")
        env_kernels=()
        [[ $kernels != default ]] && env_kernels=(MOEX_CPU_KERNELS="$kernels")
        echo "cpu_scaling: kernels $kernels, $n threads on CPUs $cpus" >&2
        # shellcheck disable=SC2086  # EXTRA is a list of options
        if ! env "${env_kernels[@]}" MOEX_CPU_PIN="${PIN:-1}" taskset -c "$cpus" "$MOEX" bench --device cpu --shapes "$SHAPES" --tokens "$TOKENS" \
            --dtype "$DTYPE" --backends "$BACKENDS" --threads "$n" --json $EXTRA |
            python3 -c 'import json, sys
k = sys.argv[1]
for line in sys.stdin:
    line = line.strip()
    if line.startswith("{"):
        j = json.loads(line)
        j["scaling_kernels"] = k
        print(json.dumps(j))' "$kernels" >> "$OUT"; then
            status=1  # a failed run (a case below its floor, say) still reports what it timed
            echo "cpu_scaling: the run with kernels $kernels, $n threads failed; its rows are kept" >&2
        fi
    done
done

python3 - "$OUT" << 'EOF'
import json, sys
rows, tables = [], {}
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j.get("kind") == "machine":
        tables[(j["scaling_kernels"], j["threads"])] = j["cpu_kernels"].split(" ")[0]
    elif j.get("kind") == "result" and not j.get("warmup_only"):
        rows.append(j)
base = {}
for r in rows:
    if r["threads"] == 1:
        base[(r["scaling_kernels"], r["backend"], r["shape"], r["T"])] = r["us"]
print(f"{'kernels':<12} {'backend':<11} {'shape':<15} {'T':>5} {'threads':>7} {'ms':>10} {'speedup':>8} {'efficiency':>10}"
      f" {'x_floor':>7}")
key = lambda r: (r["scaling_kernels"], r["backend"], r["shape"], r["T"], r["threads"])
for r in sorted(rows, key=key):
    k = r["scaling_kernels"]
    ran = tables.get((k, r["threads"]), k)
    t1 = base.get((k, r["backend"], r["shape"], r["T"]))
    speedup = f"{t1 / r['us']:.2f}" if t1 else "-"
    eff = f"{100 * t1 / (r['threads'] * r['us']):.0f}%" if t1 else "-"
    xf = f"{r['x_floor']:.2f}" if "x_floor" in r else "-"
    print(f"{ran:<12} {r['backend']:<11} {r['shape']:<15} {r['T']:>5} {r['threads']:>7} {r['us'] / 1e3:>10.1f}"
          f" {speedup:>8} {eff:>10} {xf:>7}")
EOF
exit $status
