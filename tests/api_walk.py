"""Checks a module against a list of public names written as their signatures, the way
Horovod documents them:

    allreduce(tensor, average=None, compression=Compression.none, name=None)
    Sum                                   # a value: it must exist
    callbacks.MetricAverageCallback(device='')   # a name inside a submodule
    tape.gradient(target, sources, output_gradients=None)   # `tape` given in `extra`

A signature is compatible when a Horovod user's call still works and means the same:
every documented parameter exists under its name, at the same position (positional
calls), with a default wherever the documented one has one, equal to it (defaults are
evaluated in the checked module, so `Compression.none` means ours); parameters we add
have defaults. `walk` returns the problems as strings (empty when all is well). Tests
run it in a subprocess (`run_walks`), so frameworks that are slow to import, or need an
environment variable set before import, are checked as a user would import them."""
import ast
import importlib
import inspect
import json
import os
import subprocess
import sys

_MISSING = inspect.Parameter.empty


def _parse(line):
    """(dotted name, [(param, default source or None, keyword-only)] or None for a
    plain value)."""
    line = line.split("  #")[0].strip()
    if "(" not in line:
        return line, None
    name, params = line.split("(", 1)
    inner = params.strip()[:-1]  # drop the closing parenthesis
    tree = ast.parse(f"def f({inner}): pass")
    args = tree.body[0].args
    plain = args.posonlyargs + args.args
    defaults = [None] * (len(plain) - len(args.defaults)) + [ast.unparse(d) for d in args.defaults]
    out = [(a.arg, d, False) for a, d in zip(plain, defaults)]
    out += [(a.arg, None if d is None else ast.unparse(d), True)
            for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return name.strip(), out


def _resolve(module, dotted, extra):
    first, *rest = dotted.split(".")
    obj = extra[first] if first in extra else getattr(module, first)
    for part in rest:
        obj = getattr(obj, part)
    return obj


def _signature_of(obj):
    if inspect.isclass(obj):
        params = list(inspect.signature(obj.__init__).parameters.values())[1:]
        return params
    return list(inspect.signature(obj).parameters.values())


def _same_default(ours, documented_src, namespace):
    try:
        want = eval(documented_src, dict(vars(namespace)))  # noqa: S307 - our own spec text
    except Exception as e:  # noqa: BLE001
        return False, f"cannot evaluate documented default {documented_src!r}: {e}"
    if ours is want:
        return True, ""
    try:
        same = bool(ours == want) and type(ours) is type(want) or (
            isinstance(want, (int, float)) and not isinstance(want, bool)
            and isinstance(ours, (int, float)) and not isinstance(ours, bool) and ours == want)
    except Exception:  # noqa: BLE001
        same = False
    return same, f"default {ours!r}, documented {documented_src}"


def check(module, line, extra=None):
    name, documented = _parse(line)
    try:
        obj = _resolve(module, name, extra or {})
    except AttributeError:
        return [f"{name}: missing"]
    if documented is None:
        return []
    return [f"{name}: {p}" for p in _check_params(obj, documented, module)]


def _check_params(obj, documented, module):
    if not callable(obj):
        return [f"not callable ({type(obj).__name__})"]
    try:
        ours = _signature_of(obj)
    except (TypeError, ValueError) as e:
        return [f"no signature: {e}"]
    by_name = {p.name: p for p in ours}
    positional = [p for p in ours if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    has_var_kw = any(p.kind == p.VAR_KEYWORD for p in ours)
    problems = []
    for i, (pname, dsrc, kwonly) in enumerate(documented):
        p = by_name.get(pname)
        if p is None:
            if not has_var_kw:
                problems.append(f"parameter {pname!r} missing")
            continue
        if kwonly:
            if p.kind == p.POSITIONAL_ONLY:
                problems.append(f"parameter {pname!r} cannot be passed by keyword")
        elif i >= len(positional) or positional[i].name != pname:
            where = positional[i].name if i < len(positional) else "a keyword-only parameter"
            problems.append(f"parameter {pname!r} is not at position {i} (we have {where!r})")
        if dsrc is None:
            continue
        if p.default is _MISSING:
            problems.append(f"parameter {pname!r} has no default (documented {dsrc})")
            continue
        ok, why = _same_default(p.default, dsrc, module)
        if not ok:
            problems.append(f"parameter {pname!r}: {why}")
    documented_names = {n for n, _, _ in documented}
    for p in ours:
        if p.name not in documented_names and p.default is _MISSING and \
                p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            problems.append(f"our extra parameter {p.name!r} has no default")
    return problems


def walk(module_name, spec, extra=None):
    module = importlib.import_module(module_name)
    problems = []
    for line in spec.strip().splitlines():
        if line.strip() and not line.strip().startswith("#"):
            problems += check(module, line, extra)
    return problems


def run_walks(specs, setup="", env=None, timeout=240):
    """Walks {module name: spec} in a fresh Python (after `setup`, which may define
    `extra`, a dict of objects the specs name); returns {module name: problems}."""
    code = "\n".join([
        "import json, sys",
        f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})",
        "import api_walk",
        "extra = {}",
        setup,
        f"specs = {specs!r}",
        "print('API_WALK ' + json.dumps({m: api_walk.walk(m, s, extra) for m, s in specs.items()}))",
    ])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
    for line in proc.stdout.splitlines():
        if line.startswith("API_WALK "):
            return json.loads(line[len("API_WALK "):])
    raise AssertionError(f"the API walk did not finish (exit {proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
