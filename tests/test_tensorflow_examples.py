"""The TensorFlow examples run on 2 ranks and learn the digits (>= 95 % test accuracy);
the Keras one also with Keras 2 (tf_keras, TF_USE_LEGACY_KERAS=1)."""
import re
from pathlib import Path

import pytest

pytest.importorskip("tensorflow", reason="tensorflow is not installed (pip install tensorflow-cpu)")
pytest.importorskip("sklearn", reason="scikit-learn is not installed")

from mpirun import launch  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}


@pytest.mark.parametrize("script,legacy", [("tensorflow2_keras_digits.py", False),
                                           ("tensorflow2_keras_digits.py", True),
                                           ("tensorflow2_digits_tape.py", False)],
                         ids=["keras3", "tf_keras", "tape"])
def test_example_reaches_95_percent(script, legacy):
    if legacy:
        pytest.importorskip("tf_keras", reason="tf_keras is not installed (pip install tf-keras)")
    env = dict(ENV, TF_USE_LEGACY_KERAS="1") if legacy else ENV
    proc = launch(2, EXAMPLES / script, timeout=420, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:]
    accs = re.findall(r"test accuracy ([0-9.]+)", proc.stdout)
    assert len(accs) == 1, proc.stdout[-4000:]  # printed by rank 0 only
    assert float(accs[0]) >= 0.95, proc.stdout[-4000:]
