"""The README stays a five-minute read whose example runs as printed."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme():
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def test_readme_is_short():
    assert len(_readme()) <= 12_000


def test_readme_example_runs_as_printed(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", _readme(), re.S)
    assert len(blocks) == 1
    script = tmp_path / "example.py"
    script.write_text(blocks[0])
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    nfe_forward, nfe_backward = map(int, out.stdout.split())
    assert nfe_forward > 0 and nfe_backward > 0


def test_readme_links_point_at_files():
    for target in re.findall(r"\]\(([^)#]+)\)", _readme()):
        if "://" not in target:
            assert os.path.exists(os.path.join(ROOT, target)), target


def test_durations_table_leaves_out_only_the_checkpoint_dir():
    from reproduce.markdown import duration_row
    record = {"mode": "quick", "date": "2026-12-02T10:00", "duration_s": 60.0,
              "command": "python -m reproduce cnf --quick --checkpoint-dir /tmp/x/ckpt --seed 3"}
    row = duration_row("cnf", record)
    assert row[2] == "`python -m reproduce cnf --quick --seed 3`"
    record["command"] = "python -m reproduce cnf --quick --checkpoint-dir=/tmp/y"
    assert duration_row("cnf", record)[2] == "`python -m reproduce cnf --quick`"
    record["command"] = "python -m reproduce cnf --checkpoint-dir '/tmp/a b/c' --quick"
    assert duration_row("cnf", record)[2] == "`python -m reproduce cnf --quick`"
