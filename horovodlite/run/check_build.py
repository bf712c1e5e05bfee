"""`horovodlite-run --check-build`: what this installation can do. Frameworks are looked
up, not imported, so the report is instant even with torch and TensorFlow installed."""
import importlib.metadata
import importlib.util
import subprocess

FRAMEWORKS = (  # (display name, module, distribution names, horovodlite frontend)
    ("PyTorch", "torch", ("torch",), "horovodlite.torch"),
    ("TensorFlow", "tensorflow", ("tensorflow", "tensorflow-cpu", "tf-nightly"), "horovodlite.tensorflow"),
    ("Keras", "keras", ("keras",), "horovodlite.keras"),
    ("JAX", "jax", ("jax",), "horovodlite.jax"),
)


def _found(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _version(dists):
    for d in dists:
        try:
            return importlib.metadata.version(d)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def _mpirun_version(mpirun):
    if not mpirun:
        return "no mpirun found"
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30).stdout
        return (out.strip().splitlines() or ["unknown version"])[0] + f" ({mpirun})"
    except (OSError, subprocess.SubprocessError) as e:
        return f"{mpirun}: {e}"


def _mark(ok):
    return "[X]" if ok else "[ ]"


def report(mpirun):
    """The report as text. Never raises: a broken build is reported, not crashed on."""
    try:
        version = importlib.metadata.version("horovodlite")
    except importlib.metadata.PackageNotFoundError:
        version = "(not installed as a package)"
    lines = [f"horovodlite v{version}:", ""]
    try:
        from .. import basics
        from .._loader import _core

        core_ok, core_info = True, _core.__file__
        mpi, cuda, nccl = basics.mpi_built(), basics.cuda_built(), basics.nccl_built()
        isa = _core.reduce_isa()
    except Exception as e:  # noqa: BLE001 - the report shows why the core is unusable
        core_ok, core_info = False, f"cannot be loaded: {type(e).__name__}: {e}"
        mpi = cuda = nccl = False
        isa = "?"
    lines += ["Core library:", f"    {_mark(core_ok)} {core_info}", ""]
    lines += ["Available Frameworks:"]
    for name, module, dists, frontend in FRAMEWORKS:
        if _found(module):
            fe = "horovodlite frontend present" if _found(frontend) else "no horovodlite frontend in this build"
            lines.append(f"    [X] {name} {_version(dists)} ({fe})")
        else:
            lines.append(f"    [ ] {name} (not installed)")
    lines += ["", "Available Controllers:", f"    {_mark(mpi)} MPI: {_mpirun_version(mpirun)}",
              "    [ ] Gloo", "",
              "Available Tensor Operations:",
              f"    {_mark(core_ok)} CPU ring collectives (reduce kernels: {isa})",
              f"    {_mark(mpi)} MPI transport",
              f"    {_mark(cuda)} CUDA kernels",
              f"    {_mark(nccl)} NCCL", "",
              "Tools:",
              f"    {_mark(_found('matplotlib'))} matplotlib (python -m horovodlite.timeline renders timelines)"]
    return "\n".join(lines)
