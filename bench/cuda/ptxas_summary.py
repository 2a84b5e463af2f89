#!/usr/bin/env python3
"""One line per kernel from nvcc -Xptxas -v logs: registers, spills, stack, as a readable name."""
import re, subprocess, sys


def readable(mangled):
    try:
        name = subprocess.run(["c++filt", mangled], capture_output=True, text=True).stdout.strip()
    except OSError:
        return mangled
    m = re.search(r"FlashFwdSm(80|90)Config<\(ejk::cuda::Elem\)(\d), (\d+), (\d+), (\d+), (.*)>", name)
    if not m:
        return name
    family, elem, d, bq, bk, rest = m.groups()
    elem = {"0": "f32", "1": "bf16", "2": "f16"}[elem]
    bits = re.findall(r"true|false", rest)
    names = ("causal", "window", "segments", "softcap", "sinks", "bias")  # FlashFlags order
    on = [n for n, b in zip(names, bits) if b == "true"]
    rows = re.search(r"}, (\d+)", rest)  # the optional rows-per-warp tuning argument
    suffix = f".w{rows.group(1)}" if rows and rows.group(1) not in ("0", "16") else ""
    suffix += ".wgmma" if family == "90" else ""
    # sm90 tuning arguments (ping-pong, ring depth, schedule, Q operand), spelled as
    # Variant::name does
    tune = re.search(r"}, (true|false), (\d+), \(ejk::cuda::Sm90Schedule\)(\d)"
                     r"(?:, \(ejk::cuda::Sm90QOperand\)(\d))?", rest)
    if family == "90" and tune:
        pp, st, sched, q = tune.groups()
        suffix += (".nopp" if pp == "false" else "") + (f".st{st}" if st != "0" else "")
        suffix += {"0": "", "1": ".per_item", "2": ".persist"}[sched]
        suffix += {None: "", "0": "", "1": ".qsmem", "2": ".qreg"}[q]
    return f"{elem}.d{d}.bq{bq}.bk{bk}" + "".join("." + f for f in on) + suffix


def main():
    seen = set()
    for path in sys.argv[1:]:
        name = None; props = ""
        for line in open(path):
            m = re.search(r"Compiling entry function '([^']+)' for '(\w+)'", line)
            if m:
                name = readable(m.group(1)) + " " + m.group(2)
            m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
            if m:
                props = f"stack {m.group(1)} spill {m.group(2)}/{m.group(3)}"
            m = re.search(r"Used (\d+) registers", line)
            if m and name and name not in seen:
                seen.add(name)
                print(f"{name:48s} regs {m.group(1):>3s}  {props}")
                name = None


if __name__ == "__main__":
    main()
