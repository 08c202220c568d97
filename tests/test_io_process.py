"""Every registered estimator, saved here, loads in a fresh process that ran only
``import xpml`` and gives bit-identical predictions / transforms there.

One child process loads all the files (one per estimator would be too slow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from test_common import ESTIMATORS, _data, _fit, _make, _outputs

import xpml
from xpml.parity import fitted_arrays

_CHILD = r"""
import json, sys, traceback
import numpy as np
import xpml
from xpml.parity import fitted_arrays

folder = sys.argv[1]
preloaded = sorted(m for m in sys.modules if m.startswith("xpml."))
cases = json.loads(open(folder + "/cases.json").read())
errors = {}
for name, methods in cases.items():
    try:
        est = xpml.load(f"{folder}/{name}.xpml")
        X = np.load(f"{folder}/{name}.X.npy")
        out = {m: np.asarray(getattr(est, m)(X)) for m in methods}
        np.savez(f"{folder}/{name}.out.npz", **out)
        from xpml.parity import fitted_arrays

        np.savez(f"{folder}/{name}.fit.npz", **fitted_arrays(est))
    except Exception:
        errors[name] = traceback.format_exc(limit=3)
json.dump({"errors": errors, "preloaded": preloaded}, open(folder + "/report.json", "w"))
"""


def _bits(a):
    a = np.asarray(a)
    return a.dtype.str, a.shape, a.tobytes()


def test_every_estimator_loads_in_a_fresh_process(tmp_path):
    cases, expected, fitted = {}, {}, {}
    for name, cls in ESTIMATORS:
        est = _make(cls)
        X, y = _data(est)
        _fit(est, X, y)
        expected[name] = _outputs(est, X)
        fitted[name] = {k: np.asarray(v) for k, v in fitted_arrays(est).items()}
        assert expected[name] or fitted[name], f"{name}: nothing to compare"
        est.save(tmp_path / f"{name}.xpml")
        np.save(tmp_path / f"{name}.X.npy", X)
        cases[name] = sorted(expected[name])
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    root = str(Path(xpml.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": root}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    families = {cls.__module__ for _, cls in ESTIMATORS}
    assert not families & set(report["preloaded"]), (
        "`import xpml` alone already imported estimator modules: the test proves nothing"
    )
    assert report["errors"] == {}, "\n".join(report["errors"].values())
    for name, outs in expected.items():
        with np.load(tmp_path / f"{name}.out.npz", allow_pickle=False) as got:
            assert sorted(got.files) == sorted(outs), name
            for m, v in outs.items():
                assert _bits(got[m]) == _bits(v), f"{name}.{m} differs in a new process"
        with np.load(tmp_path / f"{name}.fit.npz", allow_pickle=False) as got:
            assert sorted(got.files) == sorted(fitted[name]), name
            for k, v in fitted[name].items():
                assert _bits(got[k]) == _bits(v), f"{name}.{k} differs in a new process"
