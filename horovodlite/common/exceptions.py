"""`horovod.common.exceptions` (Horovod 0.28): the same classes that horovodlite raises,
so a user's `except` clause written against this module catches them."""
from ..basics import HorovodInternalError  # noqa: F401 - what a failed collective raises
from ..elastic.state import HostsUpdatedInterrupt  # noqa: F401 - what a commit raises


def get_version_mismatch_message(name, version, installed_version):
    return (f"Framework {name} installed with version {installed_version} but found version "
            f"{version}: this can result in unexpected behaviour, including runtime errors.")


class HorovodVersionMismatchError(ImportError):
    """Horovod raises it when a framework's version differs from the one it was compiled
    against. horovodlite compiles against no framework (it takes tensors through DLPack
    and the array interfaces), so it never raises this; the class is here for scripts
    that name it in an `except` clause."""

    def __init__(self, name, version, installed_version):
        super().__init__(get_version_mismatch_message(name, version, installed_version))
        self.name = name
        self.version = version
        self.installed_version = installed_version
