import contextlib
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _shm_folder():
    """OpenMPI's shared-memory segments of every job the tests start (mpirun, singletons,
    the launcher where a test leaves the choice to the user) go into one folder of the
    session's, removed when it ends: a rank that is killed or exits without finalizing
    (a test about failures) leaves its segment, which in /dev/shm itself stayed after
    every run (measured: 4 per run from test_settings.py and test_optional_deps.py)."""
    import atexit
    import shutil
    import tempfile

    if "OMPI_MCA_btl_sm_backing_directory" in os.environ or not os.path.isdir("/dev/shm"):
        return
    folder = tempfile.mkdtemp(prefix="hvdl-tests-", dir="/dev/shm")
    os.environ["OMPI_MCA_btl_sm_backing_directory"] = folder
    atexit.register(shutil.rmtree, folder, True)


_shm_folder()


@pytest.fixture(scope="session")
def local_cluster():
    """A factory of simulated clusters (horovodlite/run/local_cluster.py, the code behind
    `horovodlite-run --local-cluster`): `with local_cluster(hosts, slots) as c:` gives
    started hosts for tests/mpirun.py's run(..., cluster=c), removed again afterwards.
    Skips where the machine cannot make them (not root, no iproute2)."""
    import shutil

    from horovodlite.run.local_cluster import LocalCluster

    if os.geteuid() != 0:
        pytest.skip("simulated hosts need root (network namespaces, veth, bridge)")
    missing = [t for t in ("ip", "tc", "unshare") if not shutil.which(t)]
    if missing:
        pytest.skip(f"simulated hosts need {', '.join(missing)} (iproute2, util-linux)")

    @contextlib.contextmanager
    def make(hosts, slots, link_rate="1gbit"):
        c = LocalCluster(hosts, slots, link_rate=link_rate)
        c.start()  # a failure here is a failure of the cluster code: not skipped
        try:
            yield c
        finally:
            c.close()

    return make
