"""What the report sections share: reading an experiment's results files, and markdown tables,
numbers, run lines and figure links."""
import os
import re

from reproduce.common import ROOT, read_json

FIGURES = os.path.join(ROOT, "figures")
PREFERENCE = ("full", "quick", "smoke")  # the run a section shows when there are several


class ReportError(Exception):
    """A results file the report cannot read (python -m reproduce report prints it, exits 1)."""


def load(name, modes=("full", "quick")):
    """{mode: record} of an experiment's results files (full in figures/NAME, others below)."""
    runs = {}
    for mode in modes:
        folder = name if mode == "full" else f"{name}/{mode}"
        path = os.path.join(FIGURES, folder, "results.json")
        try:
            record = read_json(path)
        except (OSError, ValueError) as e:  # ValueError: not JSON, or not UTF-8
            raise ReportError(f"{path}: unreadable ({e}); rerun its experiment") from None
        if record is not None and not (isinstance(record, dict) and "mode" in record
                                       and isinstance(record.get("results"), dict)):
            raise ReportError(f"{path}: not a results file of python -m reproduce (no mode "
                              "and results); rerun its experiment")
        if record is not None:
            record["folder"] = folder
            runs[record.get("mode", mode)] = record
    return runs


def best(runs):
    """The full run's record if there is one, else the quick run's, else smoke's, else None."""
    return next((runs[m] for m in PREFERENCE if m in runs), None)


def fmt(x, digits=3):
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e6 and x != 0:
        x = int(x)
    if isinstance(x, int):
        return f"{x:,}"
    if abs(x) >= 1000 or (x != 0 and abs(x) < 10 ** -digits):
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}f}"


def minutes(seconds):
    return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def duration_text(record, trained=0.0):
    """The run's own duration, and `trained` (the training seconds its models' checkpoints
    recorded, in this run and earlier ones) when that is more: the run resumed or evaluated
    models trained before it."""
    duration = record.get("duration_s", 0)
    text = minutes(duration)
    if trained > duration:
        text += f"; its models trained {minutes(trained)} in all"
    return text


def duration_row(name, record, trained=0.0):
    """A row of the README's durations table; the command without its --checkpoint-dir (where
    a run kept its checkpoints changes nothing it computes; figures/RESULTS.md has it)."""
    command = re.sub(r" --checkpoint-dir(=| )('[^']*'|\S+)", "", record["command"])
    return [name, record["mode"], f"`{command}`", record.get("date", "?")[:10],
            duration_text(record, trained)]


def run_line(record, trained=0.0):
    """Which command made a record, when, how long it took and on what."""
    machine = record.get("machine", {})
    where = f"{machine.get('cpus', '?')} CPUs"
    if machine.get("gpus"):
        where += ", GPU " + ", ".join(machine["gpus"])
    return (f"**{record['mode']}** run: `{record['command']}` (seed {record.get('seed')}), "
            f"{record.get('date', '?')}, {duration_text(record, trained)} on {where} "
            f"({machine.get('platform', '?')}, numpy {machine.get('numpy', '?')}, "
            f"scipy {machine.get('scipy', '?')}, autograd {machine.get('autograd', '?')}"
            + (f", tensorflow {machine['tensorflow']}" if machine.get("tensorflow") else "")
            + ")" + (f". Note: {record['results']['note']}"
                     if isinstance(record.get("results"), dict)
                     and isinstance(record["results"].get("note"), str) else ""))


def choices_block(record):
    items = record.get("choices", {})
    if not items:
        return ""
    return "Reproduction choices (the paper is silent on these):\n\n" + "\n".join(
        f"- **{k}**: {v}" for k, v in items.items())


def image(record, name, title):
    """A README image link (paths from the project root), or nothing if the file is missing."""
    path = os.path.join(FIGURES, record["folder"], name)
    return f"![{title}](figures/{record['folder']}/{name})" if os.path.exists(path) else ""


def figure_links(record, names):
    """Image links relative to figures/ (for RESULTS.md), for the files that exist."""
    return "\n".join(f"![{n}]({record['folder']}/{n})" for n in names
                     if os.path.exists(os.path.join(FIGURES, record["folder"], n)))


def not_run(title):
    return f"## {title}\n\nNot run yet."
