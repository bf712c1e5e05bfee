"""horovodlite's settings, from the one table in the core (csrc/common/settings.h).

Every setting is an environment variable HOROVODLITE_<NAME>, or Horovod's spelling
HOROVOD_<NAME> (read when the first is not set), read at ``hvd.init()``: the core reads
its own there, and the Python layer reads its settings through :func:`read` at the same
moment, so ``os.environ[...] = ...`` before ``hvd.init()`` works for every setting.

    python -m horovodlite.settings            # the table, as the README shows it
    python -m horovodlite.settings --current  # the values the environment gives now
"""
import argparse
import sys

from ._loader import _core

PREFIXES = ("HOROVODLITE_", "HOROVOD_")


def table():
    """Every setting: dicts with name, type, default, tunable (autotune may change it
    at run time) and meaning."""
    return _core.settings_table()


def read():
    """Every setting as the environment gives it now: {name: (value, is_set, variable)};
    value is typed per the table (None for an unset "auto")."""
    return _core.read_settings()


def value(name, settings=None):
    """One setting's value (see read()); KeyError for a name not in the table."""
    return (settings if settings is not None else read())[name][0]


def at_init(name):
    """One setting, from those hvd.init() read (the Python layer reads its settings once
    per init, with the core's); before the first init, from the environment now."""
    from . import basics

    return value(name, basics._state["settings"])


def markdown():
    """The README's settings table."""
    lines = ["| variable | type | default | autotune | meaning |", "|---|---|---|---|---|"]
    for s in table():
        default = s["default"] if s["default"] != "" else "—"
        lines.append(f"| `HOROVODLITE_{s['name']}` | {s['type']} | {default} | "
                     f"{'yes' if s['tunable'] else ''} | {s['meaning']} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m horovodlite.settings",
                                description="horovodlite's settings (environment variables)")
    p.add_argument("--current", action="store_true",
                   help="the values the environment gives now, and which variable set each")
    a = p.parse_args(argv)
    if a.current:
        for name, (v, is_set, var) in read().items():
            print(f"{name} = {v!r}" + (f"  ({var})" if is_set else ""))
    else:
        print(markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
