"""Optional dependencies of horovodlite's commands: a missing one ends the command with
one line that says how to get it, not a traceback."""
import importlib


class MissingDependency(ImportError):
    pass


# module -> the extra of horovodlite that brings it
EXTRAS = {"matplotlib": "plot"}


def require(module, what):
    """Imports `module` or raises MissingDependency("<what> needs <module>: pip install ...")."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        extra = EXTRAS.get(module.split(".")[0])
        how = f"pip install 'horovodlite[{extra}]'" if extra else f"pip install {module.split('.')[0]}"
        raise MissingDependency(f"{what} needs {module.split('.')[0]}, which is not installed: "
                                f"{how}") from e
