"""python -m reproduce report: figures/RESULTS.md, the measured numbers beside the published ones.

Composes, for every experiment of the registry (reproduce/__main__.py's EXPERIMENTS), the
section its own `report` module renders from its results.json (the full run where there is one,
else the quick run). It also rewrites the generated blocks (between `<!-- generated:NAME -->` and
`<!-- /generated:NAME -->`) of the README (results summary, durations) and of
docs/benchmarks.md (from figures/benchmarks/*.json), so that every number there comes from a
results file, with the command that made it.
"""
import argparse
import importlib
import os
import re

from reproduce import benchmarks
from reproduce.__main__ import EXPERIMENTS
from reproduce.common import ROOT, now
from reproduce.markdown import FIGURES, load, table

README = os.path.join(ROOT, "README.md")
BENCHMARKS_DOC = os.path.join(ROOT, "docs", "benchmarks.md")


def sections(modes):
    """(name, the experiment's report module, its runs) for every experiment, in registry order."""
    return [(name, importlib.import_module(f"{module}.report"), load(name, modes))
            for name, (module, _) in EXPERIMENTS.items()]


def results_markdown(modes):
    parts = [
        "# Results: measured beside published",
        f"Written by `python -m reproduce report` on {now()} from `figures/*/results.json`. Every "
        "measured number comes from the run named above its table; the published numbers come "
        "from `reproduce/published.py` (Chen et al. 2018). A quick run is a shortened protocol "
        "(`--quick`): its numbers show that the experiment runs, not what the full protocol "
        "reaches. The benchmarks are in [docs/benchmarks.md](../docs/benchmarks.md)."]
    parts += [report.section(runs) for _, report, runs in sections(modes)]
    return "\n\n".join(parts) + "\n"


def readme_blocks(modes):
    parts, rows = [], []
    for _, report, runs in sections(modes):
        parts += report.summary(runs)
        rows += report.durations(runs)
    parts.append("Where each run was made, how long it took and every reproduction choice: "
                 "[figures/RESULTS.md](figures/RESULTS.md).")
    return {"results": "\n\n".join(p for p in parts if p),
            "durations": table(["experiment", "mode", "command", "date", "duration"], rows)}


def update_blocks(path, blocks):
    """Replace each `<!-- generated:NAME -->...<!-- /generated:NAME -->` block of a file."""
    if not os.path.exists(path):
        return
    with open(path) as f:
        text = f.read()
    for name, body in blocks.items():
        pattern = re.compile(rf"(<!-- generated:{name} -->\n).*?(<!-- /generated:{name} -->)",
                             re.S)
        text = pattern.sub(lambda m: m.group(1) + body.rstrip() + "\n" + m.group(2), text)
    with open(path, "w") as f:
        f.write(text)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m reproduce report", description=__doc__)
    parser.add_argument("--out", default=os.path.join(FIGURES, "RESULTS.md"))
    parser.add_argument("--no-readme", action="store_true",
                        help="do not rewrite the generated blocks of the README and "
                             "docs/benchmarks.md")
    parser.add_argument("--mode", choices=("full", "quick", "smoke"),
                        help="report only this mode's runs (default: full, else quick)")
    args = parser.parse_args(argv)
    folder = os.path.dirname(os.path.abspath(args.out))
    if not args.out.strip() or args.out.endswith(os.sep) or os.path.isdir(args.out):
        parser.error(f"--out {args.out!r}: the report's file, not a folder")
    if not os.path.isdir(folder):
        parser.error(f"--out {args.out}: no folder {folder}")
    modes = (args.mode,) if args.mode else ("full", "quick")
    text = results_markdown(modes)  # composed first: a failing section leaves the file alone
    with open(args.out, "w") as f:
        f.write(text)
    if not args.no_readme:
        update_blocks(README, readme_blocks(modes))
        update_blocks(BENCHMARKS_DOC, benchmarks.blocks())
    print(f"wrote {args.out}")
    return 0
