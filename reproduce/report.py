"""python -m reproduce report: figures/RESULTS.md, measured numbers beside the published ones."""
import glob
import json
import os

from reproduce.common import ROOT


def main(argv=None):
    rows = []
    for path in sorted(glob.glob(os.path.join(ROOT, "figures", "*", "results.json"))):
        with open(path) as f:
            record = json.load(f)
        rows.append(f"- {record['experiment']} ({record['mode']}): `{record['command']}`, "
                    f"{record['date']}, {record['duration_s']} s")
    out = os.path.join(ROOT, "figures", "RESULTS.md")
    with open(out, "w") as f:
        f.write("# Results\n\n" + ("\n".join(rows) if rows else "No results yet.") + "\n")
    print(f"wrote {out}")
    return 0
