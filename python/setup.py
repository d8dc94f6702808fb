"""setup.py - the build hook of the cosyvoice Python distribution (setuptools, PEP 517).

The metadata is in pyproject.toml; this file only builds libcosyvoice and puts it in the package:

  build_py   runs `make pylib` (the repository's Makefile) and copies the library and its
             build-info.json into cosyvoice/lib/, where cosyvoice/_capi.py loads it first
  sdist      carries the C/CUDA sources (Makefile, include/, lib/, kernels/, ...) under native/,
             so that a wheel can be built from the sdist alone
  bdist_wheel  a platform wheel for any Python 3: py3-none-<platform> (the library is loaded with
             ctypes, no extension module)

What it builds (environment variables):
  COSYVOICE_CUDA=0|1        0: the CPU library; 1: the CUDA kernels. Default: 1 when nvcc is on
                            PATH and nvidia-smi lists a GPU, else 0 (a note says so)
  COSYVOICE_CUDA_ARCHS      the GPU targets with COSYVOICE_CUDA=1 (the Makefile's CUDA_ARCHS);
                            default "all": sm_80 ... sm_120 + PTX, so that the wheel runs on every
                            supported GPU wherever it is installed
  COSYVOICE_BUILD_DIR       the Makefile's build folder (default: build/python-package under the
                            source tree). Naming an existing build folder (e.g. the repository's
                            build/) reuses its objects; then, unless COSYVOICE_CUDA is set, the
                            folder's own configuration (its config.mk) is kept
  COSYVOICE_SOURCE_DIR      the source tree (default: the sdist's native/, else the parent of
                            this directory)
  COSYVOICE_MAKE_ARGS       more arguments for make (e.g. "V=1 OPT=-O3"); MAKEFLAGS is honoured,
                            and without a -j in it make runs one job per core
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
SONAME = "libcosyvoice.so.0"
# what the sdist carries of the repository (enough for `make pylib`)
NATIVE_FILES = ["Makefile", "LICENSE", "tests/fuzz/fuzz.mk"]
NATIVE_DIRS = ["include", "lib", "kernels", "pkgconfig", "abi"]


def log(msg):
    print(f"cosyvoice build: {msg}", file=sys.stderr, flush=True)


def source_dir():
    env = os.environ.get("COSYVOICE_SOURCE_DIR")
    cands = [env] if env else [os.path.join(HERE, "native"), os.path.dirname(HERE)]
    for d in cands:
        if os.path.isfile(os.path.join(d, "Makefile")) and \
                os.path.isfile(os.path.join(d, "include", "cosyvoice.h")):
            return os.path.abspath(d)
    raise SystemExit("cosyvoice build: cannot find the libcosyvoice sources (a Makefile and "
                     f"include/cosyvoice.h) in {' or '.join(cands)}; build from the repository "
                     "(pip install ./python) or an sdist, or set COSYVOICE_SOURCE_DIR")


def have_gpu():
    exe = shutil.which("nvidia-smi")
    if not exe:
        return False
    try:
        out = subprocess.run([exe, "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return any(re.fullmatch(r"\d+\.\d+", line.strip()) for line in out.splitlines())


def make_command(src, bdir):
    cmd = [os.environ.get("MAKE", "make"), "-C", src, f"B={bdir}"]
    if not re.search(r"(^|\s)-j|--jobs", os.environ.get("MAKEFLAGS", "")):
        cmd.append(f"-j{os.cpu_count() or 1}")
    cuda = os.environ.get("COSYVOICE_CUDA", "").strip()
    keep_folder_config = (not cuda and os.environ.get("COSYVOICE_BUILD_DIR")
                          and os.path.exists(os.path.join(bdir, "config.mk")))
    if keep_folder_config:
        log(f"{bdir}: its configuration (config.mk) is kept")
    else:
        if cuda not in ("", "0", "1"):
            raise SystemExit(f"cosyvoice build: COSYVOICE_CUDA={cuda}: give 0 or 1")
        if not cuda:
            nvcc = shutil.which("nvcc")
            cuda = "1" if nvcc and have_gpu() else "0"
            if cuda == "0":
                log(("nvcc on PATH but no GPU found" if nvcc else "no nvcc on PATH") +
                    ": building the CPU library; COSYVOICE_CUDA=1 builds the CUDA kernels for "
                    "every GPU target")
        cmd.append(f"CUDA={cuda}")
        if cuda == "1":
            cmd.append("CUDA_ARCHS=" + (os.environ.get("COSYVOICE_CUDA_ARCHS") or "all"))
    cmd += shlex.split(os.environ.get("COSYVOICE_MAKE_ARGS", ""))
    cmd.append("pylib")
    return cmd


def build_library():
    """Runs make; returns the folder holding the library and build-info.json."""
    src = source_dir()
    bdir = os.path.abspath(os.environ.get("COSYVOICE_BUILD_DIR") or
                           os.path.join(src, "build", "python-package"))
    cmd = make_command(src, bdir)
    log(" ".join(shlex.quote(c) for c in cmd))
    try:
        subprocess.run(cmd, check=True)
    except FileNotFoundError as e:
        raise SystemExit(f"cosyvoice build: cannot run make ({e}): GNU make and a C compiler "
                         "are needed (apt-get install build-essential libsamplerate0-dev)")
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"cosyvoice build: make failed (exit status {e.returncode}): "
                         f"{' '.join(cmd)}")
    out = os.path.join(bdir, "python")
    with open(os.path.join(out, "build-info.json")) as f:
        info = json.load(f)
    log(f"libcosyvoice {info['version']}: " +
        (f"CUDA {info['cuda_release']}, {info['targets']}" if info["cuda"] else "CPU only"))
    return out


class BuildPy(build_py):
    def run(self):
        super().run()
        built = build_library()
        # an editable install (pip install -e) imports the package from python/cosyvoice itself
        root = HERE if getattr(self, "editable_mode", False) else self.build_lib
        dest = os.path.join(root, "cosyvoice", "lib")
        os.makedirs(dest, exist_ok=True)
        for name in (SONAME, "build-info.json"):
            shutil.copyfile(os.path.join(built, name), os.path.join(dest, name))
        os.chmod(os.path.join(dest, SONAME), 0o755)


class Sdist(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        src = source_dir()
        dest = os.path.join(base_dir, "native")
        for rel in NATIVE_FILES:
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(os.path.join(src, rel), os.path.join(dest, rel))
        for d in NATIVE_DIRS:
            shutil.copytree(os.path.join(src, d), os.path.join(dest, d),
                            ignore=shutil.ignore_patterns("__pycache__", "*.o", "*.d"))


class BdistWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


class BinaryDistribution(Distribution):
    """Installs into platlib: the package carries a native library."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist, "bdist_wheel": BdistWheel},
      distclass=BinaryDistribution)
