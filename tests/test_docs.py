"""The worked example of docs/DEVELOPING.md runs as written (in a fresh
process, so its class stays out of this process's registry)."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _block_after(heading):
    text = (ROOT / "docs" / "DEVELOPING.md").read_text()
    section = text[text.index(heading) :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_add_an_estimator_example_runs_and_agrees_with_sklearn():
    code = _block_after("## Add an estimator") + textwrap.dedent(
        """
        import numpy as np
        from sklearn.neighbors import NearestCentroid as SkNC
        rng = np.random.default_rng(0)
        X = np.concatenate([rng.normal(m, 1.0, (30, 3)) for m in (0, 3, 6)])
        y = np.repeat(np.array([10, 20, 30]), 30)
        ours = NearestCentroid().fit(X, y)
        theirs = SkNC().fit(X, y)
        np.testing.assert_allclose(ours.centroids_, theirs.centroids_, rtol=1e-12)
        assert (ours.predict(X) == theirs.predict(X)).all()
        print("ok")
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert r.stdout.strip().endswith("ok"), r.stdout + r.stderr
