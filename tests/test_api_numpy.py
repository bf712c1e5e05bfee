"""`import horovodlite as hvd` (Horovod's torch API on numpy arrays) has Horovod 0.28's
framework-free names: the basics, process sets, reduce ops and every collective with the
parameters Horovod users pass (the lists are test_api_torch.py's)."""
from api_walk import run_walks
from test_api_torch import BASICS, COLLECTIVES


def test_horovodlite_numpy_api_has_horovods_framework_free_names():
    problems = run_walks({"horovodlite": BASICS + COLLECTIVES})
    assert problems == {"horovodlite": []}, problems


def test_horovods_common_exceptions_are_the_classes_horovodlite_raises():
    """`from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt`
    (elastic scripts do) works with the package renamed, and names the very classes
    horovodlite raises, so the scripts' except clauses catch them."""
    problems = run_walks({"horovodlite.common.exceptions": """
HorovodInternalError
HostsUpdatedInterrupt(skip_sync)
HorovodVersionMismatchError(name, version, installed_version)
get_version_mismatch_message(name, version, installed_version)
"""})
    assert problems == {"horovodlite.common.exceptions": []}, problems
    import horovodlite as hvd
    from horovodlite import elastic
    from horovodlite.common import exceptions

    assert exceptions.HorovodInternalError is hvd.HorovodInternalError
    assert exceptions.HostsUpdatedInterrupt is elastic.HostsUpdatedInterrupt
    assert exceptions.HostsUpdatedInterrupt(True).skip_sync is True
    err = exceptions.HorovodVersionMismatchError("torch", "2.13.0", "2.12.0")
    assert isinstance(err, ImportError) and (err.name, err.version, err.installed_version) == (
        "torch", "2.13.0", "2.12.0")
    assert "torch" in str(err) and "2.12.0" in str(err) and "2.13.0" in str(err)
