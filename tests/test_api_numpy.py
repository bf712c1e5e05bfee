"""`import horovodlite as hvd` (Horovod's torch API on numpy arrays) has Horovod 0.28's
framework-free names: the basics, process sets, reduce ops and every collective with the
parameters Horovod users pass (the lists are test_api_torch.py's)."""
from api_walk import run_walks
from test_api_torch import BASICS, COLLECTIVES


def test_horovodlite_numpy_api_has_horovods_framework_free_names():
    problems = run_walks({"horovodlite": BASICS + COLLECTIVES})
    assert problems == {"horovodlite": []}, problems
