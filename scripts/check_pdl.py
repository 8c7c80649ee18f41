#!/usr/bin/env python3
# The rule of cuda/common/pdl.cuh, checked on the sources: every kernel launched through launch_pdl calls pdl_enter()
# near the top of its body. A kernel launched with programmatic stream serialization that does not wait reads its
# predecessor's outputs while they are being written: a race no test reliably sees, so it is checked here. A kernel
# that does allowed work before its wait (pdl.cuh's two rules) says so near its top with a "pdl: late wait" comment
# naming what it does first.
# Usage: python3 scripts/check_pdl.py (from scripts/check_style.sh); exit 1 with the offending kernels named.
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
KERNEL_DEF = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(")
LAUNCH = re.compile(r"launch_pdl\(\s*([\w:]+)\s*[,<]")  # a call, not the helper's own definition
NAMED = re.compile(r"([\w:]+)\s*<")  # a template kernel named in an expression: batched::batched_proj_kernel<T, ...>
ENTER_WITHIN_LINES = 30  # pdl_enter must come before the kernel reads anything: near the top


def kernel_names_launched(text):
    """The kernels handed to launch_pdl, resolving `auto kernel = ...;` one step back."""
    names = set()
    for m in LAUNCH.finditer(text):
        name = m.group(1)
        if "::" not in name and not name.endswith("_kernel"):  # a variable: find its `auto NAME = ...;`
            defs = list(re.finditer(r"auto\s+" + re.escape(name) + r"\s*=([^;]*);", text[: m.start()]))
            if not defs:
                names.add(name)  # unresolved: reported as a kernel without a definition that enters
                continue
            d = defs[-1]
            names.update(n.split("::")[-1] for n in NAMED.findall(d.group(1)) if n.endswith("_kernel"))
        else:
            names.add(name.split("::")[-1])
    return names


def kernels_entering(texts):
    """{kernel name: True when one of its definitions calls pdl_enter() (or says "pdl: late wait") within the
    first lines of its body}."""
    found = {}
    for text in texts:
        lines = text.splitlines()
        for i, line in enumerate(lines):
            m = KERNEL_DEF.search(line) if "__global__" in line else None
            if m is None:
                continue
            head = "\n".join(lines[i: i + ENTER_WITHIN_LINES])
            enters = "pdl_enter()" in head or "pdl: late wait" in head
            found[m.group(1)] = found.get(m.group(1), False) or enters
    return found


def main():
    files = [p for p in (ROOT / "cuda").rglob("*") if p.suffix in (".cu", ".cuh", ".h")]
    texts = [p.read_text() for p in files]
    entering = kernels_entering(texts)
    launched = set().union(*(kernel_names_launched(t) for t in texts))
    bad = sorted(k for k in launched if not entering.get(k, False))
    if bad:
        print("check_pdl: launched by launch_pdl without pdl_enter() near the top of the kernel: " + ", ".join(bad))
        return 1
    if not launched:
        print("check_pdl: found no launch_pdl call (has the helper moved?)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
