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
    # --evaluate-only reads a checkpoint without --resume (force): other settings are refused
    # there too, and the advice says that leaving out --resume alone does not help
    with pytest.raises(CheckpointError, match=r"seed: 0 there, 1 here\); rerun without --resume "
                                              r"\(nor --evaluate-only"):
        Checkpoint(str(tmp_path / "m.ckpt"), enabled=False).load({"seed": 1}, force=True)
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


def test_a_checkpoint_that_is_a_folder_or_a_damaged_log_is_refused_naming_the_file(tmp_path):
    folder = tmp_path / "m.ckpt"
    folder.mkdir()
    with pytest.raises(CheckpointError, match=f"^{folder}: unreadable"):
        Checkpoint(str(folder)).load(force=True)
    log = AppendLog(str(tmp_path / "m.log.jsonl"))
    log.append({"loss": 1.0})
    size = log.size()
    with open(log.path, "r+b") as f:  # the right length, garbage: a disk that lost a block
        f.write(b"\xff" * size)
    for read in (log.read, lambda: log.read(size)):
        with pytest.raises(CheckpointError, match=f"^{log.path}: unreadable"):
            read()


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


# The configuration every checkpoint of these units holds. A run resumes a checkpoint only if
# its configuration equals the saved one, so these literals are those of the checkpoints that
# long runs have written: changing one makes those runs unresumable.
SAVED_CONFIGS = {
    "spirals": (["--full", "--only", "latent_ode_n30_seed0", "--seeds", "0", "--resume"], {
        "experiment": "spirals", "mode": "full", "method": "adams", "no_seminorm": False,
        "seed": 0, "tol": None, "model": "latent_ode_n30_seed0", "n_iters": 20000,
        "clip": 1000.0, "validate_every": 250, "batch_size": 100, "n_spirals": 1000,
        "lr": 0.01, "lr_final": 0.0001, "encode_cut": 0.5}),
    "poisson": (["--quick", "--seed", "2", "--tol", "1e-4"], {
        "experiment": "poisson", "mode": "quick", "method": "adams", "no_seminorm": False,
        "seed": 2, "tol": 0.0001, "model": "latent_ode", "n_iters": 500, "clip": None,
        "validate_every": None, "lr": 0.01, "lr_final": None}),
    "cnf": (["--smoke", "--train-only", "cnf"], {
        "experiment": "cnf", "mode": "smoke", "method": "adams", "seed": 0, "trace": "exact",
        "model": "fig4_U1_cnf2", "n_iters": 3, "clip": None, "validate_every": None,
        "lr": 0.001, "batch": 32, "tol": 1e-05}),
    "mnist": (["--full", "--only", "odenet", "--resume", "--epochs", "16"], {
        "experiment": "mnist", "mode": "full", "epochs": 16, "no_xla": False, "seed": 0,
        "model": "odenet", "n_train": 60000, "n_test": 10000, "batch_size": 128}),
}


# the same units selected by the older flags, as the long runs' commands do
OLD_FLAGS = {"spirals": ["--full", "--train-only", "latent_ode", "--train-only-n", "30", "--seeds",
                         "0", "--resume"],
             "mnist": ["--full", "--models", "odenet", "--resume", "--epochs", "16"]}


@pytest.mark.parametrize("name,old_flags", [(n, False) for n in sorted(SAVED_CONFIGS)]
                         + [(n, True) for n in sorted(OLD_FLAGS)])
def test_checkpoint_configs_stay_those_of_earlier_runs(tmp_path, monkeypatch, name, old_flags):
    """The configuration a unit's checkpoint must match, built from the command line, equals the
    one earlier runs saved: flags, names and settings may be refactored, these may not."""
    import importlib

    from reproduce.__main__ import EXPERIMENTS

    if name == "mnist":
        pytest.importorskip("tensorflow")
        from reproduce.mnist import data
        try:
            data.check(data.data_dir())
        except data.MNISTDataError:
            pytest.skip("no MNIST files")

    class Loaded(Exception):
        pass

    def load(self, config=None, force=False, ignore=()):
        assert os.path.basename(self.path) == SAVED_CONFIGS[name][1]["model"] + ".ckpt"
        raise Loaded(config)

    monkeypatch.setattr(Checkpoint, "load", load)
    argv, expected = SAVED_CONFIGS[name]
    argv = OLD_FLAGS[name] if old_flags else argv
    main = importlib.import_module(EXPERIMENTS[name][0]).main
    with pytest.raises(Loaded) as loaded:
        main(argv + ["--out", str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path)])
    assert loaded.value.args[0] == expected


def test_a_thinned_training_curve_keeps_the_step_of_each_point(tmp_path, monkeypatch):
    # final weights keep at most HISTORY_POINTS points of a curve: read back (by --resume or
    # --evaluate-only, without the checkpoint), each point carries its own step, so that figures
    # plot a 500,000-step curve over 500,000 steps, not over its point count
    from reproduce import common
    monkeypatch.setattr(common, "HISTORY_POINTS", 4)

    def objective(params, rng, step, stats):
        return float(params["w"] ** 2), {"w": 2 * params["w"]}

    def fit(*flags):
        run = Run("thin_test", ["--smoke", "--out", str(tmp_path / "out"),
                                "--checkpoint-dir", str(tmp_path / "ck"), *flags])
        return common.fit(run, "m", {"w": 1.0}, objective, common.SGD(0.1, momentum=0.0), 10,
                          every=5)

    trained = fit()
    assert trained["history"]["iteration"] == list(range(1, 11))
    (tmp_path / "ck" / "m.ckpt").unlink()  # only the final weights are left
    for flags in (["--resume"], ["--evaluate-only"]):
        kept = fit(*flags)["history"]
        assert kept["iteration"][0] == 1 and kept["iteration"][-1] == 10
        assert len(kept["iteration"]) == len(kept["loss"]) == 4
        assert kept["loss"] == pytest.approx(
            [trained["history"]["loss"][i - 1] for i in kept["iteration"]])
