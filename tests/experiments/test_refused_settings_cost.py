"""A setting an experiment refuses is refused before the experiment imports matplotlib (0.4 s of a refusal that
should answer at once): every experiment, in one fresh process."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
from markovformer.experiments import EXPERIMENTS, run_experiment
refused = {}
for name in EXPERIMENTS:
    try:
        run_experiment(name, sys.argv[1] + "/" + name, overrides={"no_such_setting": 1}, log=lambda line: None)
    except ValueError as error:
        refused[name] = "no_such_setting" in str(error)
print(json.dumps({"refused": refused, "matplotlib": "matplotlib" in sys.modules}))
"""


def test_every_experiment_refuses_an_unknown_setting_before_importing_matplotlib(tmp_path):
    from markovformer.experiments import EXPERIMENTS

    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True, text=True, timeout=120,
                          check=True)  # fmt: skip
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["refused"] == {name: True for name in EXPERIMENTS}
    assert result["matplotlib"] is False  # four experiments imported it first (landscape, icl-depth, ...)
