"""python -m reproduce report: figures/RESULTS.md, the measured numbers beside the published ones.

Composes, for every experiment of the registry (reproduce/__main__.py's EXPERIMENTS), the
section its own `report` module renders from its results.json (the full run where there is one,
else the quick run). It also rewrites the generated blocks (between `<!-- generated:NAME -->` and
`<!-- /generated:NAME -->`) of the README (results summary, durations) and of
docs/benchmarks.md (from figures/benchmarks/*.json), so that every number there comes from a
results file, with the command that made it.
"""
import importlib
import os
import re
import sys

from reproduce import benchmarks
from reproduce.__main__ import EXPERIMENTS
from reproduce.common import ROOT, Parser, now, unwritable
from reproduce.markdown import FIGURES, ReportError, load, table

README = os.path.join(ROOT, "README.md")
DEFAULT_OUT = os.path.join(FIGURES, "RESULTS.md")
BENCHMARKS_DOC = os.path.join(ROOT, "docs", "benchmarks.md")


def render(modes):
    """(figures/RESULTS.md's text, the README's blocks), each experiment's part rendered by its
    own report module from its results files (full, else quick); ReportError naming the
    experiment whose results file lacks what its section reads."""
    parts = [
        "# Results: measured beside published",
        f"Written by `python -m reproduce report` on {now()} from `figures/*/results.json`. Every "
        "measured number comes from the run named above its table; the published numbers come "
        "from `reproduce/published.py` (Chen et al. 2018). A quick run is a shortened protocol "
        "(`--quick`): its numbers show that the experiment runs, not what the full protocol "
        "reaches. The benchmarks are in [docs/benchmarks.md](../docs/benchmarks.md)."]
    summaries, rows = [], []
    for name, (module, _) in EXPERIMENTS.items():
        report, runs = importlib.import_module(f"{module}.report"), load(name, modes)
        try:
            parts.append(report.section(runs))
            summaries += report.summary(runs)
            rows += report.durations(runs)
        except (KeyError, TypeError, IndexError, AttributeError, ValueError) as e:
            raise ReportError(f"figures/{name}: a results file lacks what its section reads "
                              f"({type(e).__name__}: {e}); rerun the experiment") from None
    summaries.append("Where each run was made, how long it took and every reproduction choice: "
                     "[figures/RESULTS.md](figures/RESULTS.md).")
    blocks = {"results": "\n\n".join(p for p in summaries if p),
              "durations": table(["experiment", "mode", "command", "date", "duration"], rows)}
    return "\n\n".join(parts) + "\n", blocks


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
    parser = Parser(prog="python -m reproduce report", description=__doc__)
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help="the report's file (default figures/RESULTS.md)")
    parser.add_argument("--no-readme", action="store_true",
                        help="do not rewrite the generated blocks of the README and "
                             "docs/benchmarks.md (a report with --out or --mode never does: "
                             "they show the default report)")
    parser.add_argument("--mode", choices=("full", "quick", "smoke"),
                        help="report only this mode's runs (default: full, else quick)")
    args = parser.parse_args(argv)
    folder = os.path.dirname(os.path.abspath(args.out))
    if not args.out.strip() or args.out.endswith(os.sep) or os.path.isdir(args.out):
        parser.error(f"--out {args.out!r}: the report's file, not a folder")
    if not os.path.isdir(folder):
        parser.error(f"--out {args.out}: no folder {folder}")
    if unwritable(folder) or (os.path.exists(args.out) and not os.access(args.out, os.W_OK)):
        parser.error(f"--out {args.out}: {unwritable(folder) or 'cannot write the file'}")
    modes = (args.mode,) if args.mode else ("full", "quick")
    try:  # composed first: a failing section leaves the files alone
        text, blocks = render(modes)
    except ReportError as e:
        print(f"python -m reproduce report: error: {e}", file=sys.stderr)
        return 1
    with open(args.out, "w") as f:
        f.write(text)
    if not args.no_readme and args.mode is None and (
            os.path.abspath(args.out) == os.path.abspath(DEFAULT_OUT)):
        update_blocks(README, blocks)
        update_blocks(BENCHMARKS_DOC, benchmarks.blocks())
    print(f"wrote {args.out}")
    return 0
