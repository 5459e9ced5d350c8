"""The CNF section of the report: Figure 4's KL and Figure 6's likelihoods and reconstruction
errors, with the models a cut-short run did not finish marked."""
from reproduce import published
from reproduce.common import progress_label
from reproduce.markdown import (best, choices_block, duration_row, figure_links, fmt, image,
                                not_run, run_line, table)

TITLE = "Figures 4 and 6: continuous normalizing flows (Section 4.1)"


def trained_seconds(record):
    return sum(v["seconds"] for v in record["results"]["seconds_per_iteration"].values())


def tables(record):
    """Figure 4 and 6 tables; a model trained for fewer than its planned iterations (a full run
    cut short) has its cell marked with the iterations it ran."""
    res = record["results"]
    iterations = res.get("iterations", {})

    def cell(value, key):
        it = iterations.get(key)
        label = it and progress_label(it["run"], it["planned"])
        return f"{fmt(value)} ({label})" if label else value

    rows = []
    for target, entry in res["figure4"].items():
        for kind, label in (("nf", "planar NF (K layers)"), ("cnf", "planar CNF (M units)")):
            cells = entry[kind]
            rows.append([target, label] + [cell(cells[k]["kl"], f"fig4_{target}_{kind}{k}")
                                           for k in sorted(cells, key=int)])
    sizes = sorted(next(iter(res["figure4"].values()))["nf"], key=int)
    fig4 = table(["target", "model"] + [f"K = M = {k}" for k in sizes], rows)
    rows = []
    for dataset, entry in res["figure6"].items():
        ll = entry["test_log_likelihood"]
        rec = entry.get("reconstruction", {}).get("training_tolerance", {})
        key = entry["models"]
        rows.append([dataset.replace("_", " "), cell(ll["cnf"]["mean"], key["cnf"]),
                     cell(ll["nf"]["mean"], key["nf"]),
                     rec.get("max_abs_error"), rec.get("tolerance")])
    fig6 = table(["dataset", "CNF test log-lik.", "NF test log-lik.",
                  "CNF forward+backward max error", "at tolerance"], rows)
    return fig4, fig6


def records(runs):
    """The runs to show: the best one, and the quick one beside a full run cut short (whose
    models did not all train)."""
    record = best(runs)
    if record is None:
        return []
    if record["mode"] == "full" and record["results"].get("note") and "quick" in runs:
        return [record, runs["quick"]]
    return [record]


def section(runs):
    shown = records(runs)
    if not shown:
        return not_run(TITLE)
    text = _record_section(shown[0])
    if len(shown) > 1:
        text += ("\n\nThe full run above was cut short; below, the quick run, whose models "
                 "all finished their (shortened) training.\n\n"
                 + _record_section(shown[1], heading=False))
    return text


def _record_section(record, heading=True):
    fig4, fig6 = tables(record)
    return "\n\n".join([
        f"## {TITLE}" if heading else "### The quick run",
        run_line(record, trained_seconds(record)),
        "Figure 4, density matching: KL(q || p) in nats after training (lower is better; "
        "estimated on fresh samples, log Z by quadrature).",
        fig4,
        f"Published (Figure 4, no numbers given): {published.FIGURE4}.",
        "Figure 6, maximum likelihood: test log-likelihood per point (higher is better), and "
        "the Section 6 check: base samples run forward then backward through the trained CNF.",
        fig6,
        f"Published: {published.FIGURE6}. Section 6: {published.SECTION6}.",
        figure_links(record, ["figure4.png", "figure4_samples.png", "figure6.png",
                              "training_curves.png"]),
        choices_block(record)])


def summary(runs):
    parts = []
    for record in records(runs):
        fig4, fig6 = tables(record)
        parts += [f"**Figure 4, density matching**: KL(q || p) ({record['mode']}: "
                  f"`{record['command']}`)", fig4,
                  image(record, "figure4.png", "Figure 4"),
                  f"**Figure 6, maximum likelihood** ({record['mode']})", fig6,
                  image(record, "figure6.png", "Figure 6")]
    return parts


def durations(runs):
    return [duration_row("cnf", r, trained_seconds(r)) for _, r in sorted(runs.items())]
