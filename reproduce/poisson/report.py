"""The Poisson process section of the report: the learned intensity's errors and
log-likelihoods, Figure 8, the solver measurements and the reproduction choices."""
from reproduce import published
from reproduce.latent import solver_speed_block
from reproduce.markdown import (best, choices_block, duration_row, figure_links, fmt, not_run,
                                run_line, table)

TITLE = "Figure 8: latent ODE Poisson process likelihood (Section 5)"


def trained_seconds(record):
    return record["results"]["training"].get("seconds_total") or 0


def section(runs):
    record = best(runs)
    if record is None:
        return not_run(TITLE)
    res = record["results"]
    windows = [("in_sample", "training events (in sample)"),
               ("held_out", "fresh events, observed window (held out)"),
               ("held_out_extrapolated", "fresh events, extrapolated window (held out)")]
    ll = [[label] + [res.get(f"log_likelihood_{w}_{k}") for k in ("learned", "true", "constant")]
          for w, label in windows if f"log_likelihood_{w}_learned" in res]
    errors = [["relative L2 error of the learned intensity (observed window)",
               res["intensity_relative_l2_error"]],
              ["relative L2 error, extrapolated beyond the window",
               res["extrapolated_intensity_relative_l2_error"]]]
    return "\n\n".join([
        f"## {TITLE}",
        run_line(record, trained_seconds(record)),
        table(["measured", "value"], errors),
        "Log-likelihood per sequence under the learned intensity, the true one and a constant "
        "rate. In sample the per-sequence z0 were fitted to these very events, so the learned "
        "intensity can beat the true one there; the held-out rows score fresh sequences drawn "
        f"from the same intensities ({res.get('fresh_sequences_per_intensity', '-')} per "
        "intensity).",
        table(["events", "learned", "true", "constant rate"], ll),
        reading(res),
        f"Published (Figure 8, no numbers given): {published.FIGURE8}.",
        figure_links(record, ["fig8.png", "training.png"]),
        solver_speed_block(res.get("solver_speed"), "the trained model"),
        choices_block(record)])


def reading(res):
    """What the log-likelihood table says, worded from its numbers: the learned intensity against
    the true one and the constant rate, in sample and held out."""
    ll = {(w, k): res.get(f"log_likelihood_{w}_{k}") for w in ("in_sample", "held_out",
                                                               "held_out_extrapolated")
          for k in ("learned", "true", "constant")}
    if ll["held_out", "learned"] is None:
        return "No fresh sequences were drawn, so the learned intensity is scored in sample only."

    def against(window, other):
        diff = ll[window, "learned"] - ll[window, other]
        if abs(diff) < 5e-4:  # 0.000 as printed
            return "level with"
        return f"{fmt(abs(diff))} {'above' if diff > 0 else 'below'}"

    n_seq = len(res.get("intensity_relative_l2_error_per_sequence") or [])
    sequences = f"the {n_seq} sequences'" if n_seq else "the sequences'"
    text = (f"In sample the learned intensity scores {against('in_sample', 'true')} the true "
            f"one; held out it scores {against('held_out', 'true')} the true one in the "
            f"observed window and {against('held_out_extrapolated', 'true')} it in the "
            f"extrapolated one, where it scores {against('held_out_extrapolated', 'constant')} "
            "a constant rate (each sequence's maximum-likelihood rate).")
    if (ll["in_sample", "learned"] > ll["in_sample", "true"]
            and ll["held_out", "learned"] < ll["held_out", "true"]):
        text += (f" Its edge in sample is over-fitting: each of {sequences} z0 was fitted to "
                 "its own training events, and on fresh events of the same intensities it falls "
                 "behind the truth. The held-out rows are the comparison "
                 "to read; they come from one training run (one seed) and redraw events, not "
                 "intensities.")
    return text


def summary(runs):
    """Nothing in the README's summary: Figure 8 has no published numbers."""
    return []


def durations(runs):
    return [duration_row("poisson", r, trained_seconds(r)) for _, r in sorted(runs.items())]
