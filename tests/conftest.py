import contextlib
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


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
