"""Checkpoints never resume a different or damaged run: written atomically with a checksum,
checked against the run's configuration, refused with one line naming the file."""
import os
import pickle

import numpy as np
import pytest

from reproduce.common import AppendLog, Checkpoint, CheckpointError, Run


def _saved(tmp_path, state=None):
    ckpt = Checkpoint(str(tmp_path / "m.ckpt"))
    ckpt.save(state or {"params": np.arange(1000.0), "config": {"seed": 0}, "step": 3})
    return ckpt


def test_round_trip_and_config_check(tmp_path):
    ckpt = _saved(tmp_path)
    state = ckpt.load({"seed": 0})
    np.testing.assert_array_equal(state["params"], np.arange(1000.0))
    with pytest.raises(CheckpointError, match=r"m\.ckpt: made with other settings \(seed: 0 "
                                              r"there, 1 here\); rerun without --resume"):
        ckpt.load({"seed": 1})
    assert ckpt.load({"seed": 1, "epochs": 9}, ignore=("seed", "epochs"))["step"] == 3
    assert Checkpoint(str(tmp_path / "m.ckpt"), enabled=False).load() is None
    assert Checkpoint(str(tmp_path / "absent.ckpt")).load() is None


@pytest.mark.parametrize("damage", ["empty", "truncated", "bit", "garbage", "foreign_pickle",
                                    "not_a_dict"])
def test_a_damaged_checkpoint_is_refused_naming_the_file(tmp_path, damage):
    ckpt = _saved(tmp_path)
    blob = open(ckpt.path, "rb").read()
    if damage == "empty":
        blob = b""
    elif damage == "truncated":
        blob = blob[:len(blob) // 2]
    elif damage == "bit":  # one bit of one parameter
        i = len(blob) - 100
        blob = blob[:i] + bytes([blob[i] ^ 1]) + blob[i + 1:]
    elif damage == "garbage":
        blob = os.urandom(5000)
    elif damage == "foreign_pickle":
        blob = pickle.dumps({"params": 1, "config": {"seed": 0}})
    if damage == "not_a_dict":
        import hashlib
        payload = pickle.dumps([1, 2, 3])
        blob = Checkpoint.MAGIC + hashlib.sha256(payload).hexdigest().encode() + payload
    with open(ckpt.path, "wb") as f:
        f.write(blob)
    with pytest.raises(CheckpointError) as error:
        ckpt.load({"seed": 0})
    message = str(error.value)
    assert message.startswith(ckpt.path) and "\n" not in message
    assert "rerun without --resume" in message


def test_save_is_atomic(tmp_path, monkeypatch):
    """A save that dies half-way leaves the previous checkpoint intact and loadable."""
    ckpt = _saved(tmp_path)

    def dying_dumps(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pickle, "dumps", dying_dumps)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save({"params": np.zeros(3), "config": {"seed": 0}, "step": 4})
    monkeypatch.undo()
    assert ckpt.load({"seed": 0})["step"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["m.ckpt"]


def test_append_log_is_cut_back_to_its_checkpoint(tmp_path):
    log = AppendLog(str(tmp_path / "m.log.jsonl"))
    log.restore(0)
    for i in range(3):
        log.append({"i": i})
    size = log.size()
    for i in range(3, 5):  # steps after the last checkpoint, lost in a kill
        log.append({"i": i})
    log.restore(size)
    log.append({"i": 3})
    assert [r["i"] for r in log.read()] == [0, 1, 2, 3]
    with pytest.raises(CheckpointError, match="shorter"):
        AppendLog(str(tmp_path / "other.log.jsonl")).restore(10)


def test_run_configuration_holds_the_mode_and_every_numeric_flag(tmp_path):
    def config(*argv):
        return Run("x", ["--out", str(tmp_path), *argv],
                   extra_args=lambda p: p.add_argument("--tol", type=float)).config

    base = config("--smoke")
    assert base == {"experiment": "x", "mode": "smoke", "seed": 0, "tol": None}
    assert config("--smoke", "--resume", "--checkpoint-dir", str(tmp_path)) == base
    assert config("--quick") != base and config("--smoke", "--seed", "2") != base
    assert config("--smoke", "--tol", "1e-3") != base


def test_bad_flag_values_are_one_line_usage_errors(capsys):
    from reproduce.__main__ import main
    for argv in (["spirals", "--seeds", "x"], ["spirals", "--train-only-n", "7"],
                 ["poisson", "--tol", "abc"], ["cnf", "--method", "euler"],
                 ["spirals", "--smoke", "--seeds", "1", "1"], ["poisson", "--tol", "-1"],
                 ["poisson", "--tol", "nan"], ["spirals", "--stop-after", "0"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("python -m reproduce")
