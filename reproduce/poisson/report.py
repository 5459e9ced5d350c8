"""The Poisson process section of the report: the learned intensity's errors and
log-likelihoods, Figure 8, the solver measurements and the reproduction choices."""
from reproduce import published
from reproduce.latent import solver_speed_block
from reproduce.markdown import (best, choices_block, duration_row, figure_links, not_run,
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
        f"Published (Figure 8, no numbers given): {published.FIGURE8}.",
        figure_links(record, ["fig8.png", "training.png"]),
        solver_speed_block(res.get("solver_speed"), "the trained model"),
        choices_block(record)])


def summary(runs):
    """Nothing in the README's summary: Figure 8 has no published numbers."""
    return []


def durations(runs):
    return [duration_row("poisson", r, trained_seconds(r)) for _, r in sorted(runs.items())]
