"""The package and its library: the copy inside the package is found first (after $COSYVOICE_LIB),
build-info.json describes it, and the CUDA libraries are looked for in NVIDIA's pip wheels before
the system (python/cosyvoice/_capi.py)."""
import os
import sys

import pytest

import cosyvoice
from cosyvoice import _capi


def test_library_override_then_package_copy(monkeypatch, tmp_path):
    bundled = os.path.join(_capi.PACKAGE_LIB_DIR, _capi.SONAME)
    monkeypatch.setenv("COSYVOICE_LIB", str(tmp_path / "nowhere.so"))
    with pytest.raises(cosyvoice.LibraryNotFound, match="COSYVOICE_LIB"):
        _capi.find_library()
    monkeypatch.setenv("COSYVOICE_LIB", sys.executable)   # any existing file: the override wins
    assert _capi.find_library() == sys.executable
    monkeypatch.delenv("COSYVOICE_LIB")
    if not os.path.exists(bundled):
        pytest.skip("this installation carries no library (built without python/setup.py)")
    assert _capi.find_library() == bundled


def test_build_info_matches_library():
    info = cosyvoice.build_info()
    if info is None:
        pytest.skip("this installation carries no library (built without python/setup.py)")
    assert set(info) >= {"version", "cuda", "cuda_major", "cuda_release", "targets", "cuda_libs"}
    assert info["cuda"] in (0, 1)
    if info["cuda"]:
        assert info["cuda_major"].isdigit() and info["targets"], info
        assert f"libcudart.so.{info['cuda_major']}" in info["cuda_libs"], info
    else:
        assert info["targets"] == "" and info["cuda_libs"] == [], info
    # the version it was built as is the package's and the library's
    assert info["version"] == cosyvoice.__version__


def test_cuda_search_order(monkeypatch, tmp_path):
    """NVIDIA's wheels (CUDA 13's flat nvidia/cu13/lib first, then CUDA 12's per-library
    folders) in sys.path order, then the system's toolkit."""
    site_a, site_b, home = tmp_path / "a", tmp_path / "b", tmp_path / "cuda"
    for d in (site_a / "nvidia" / "cublas" / "lib", site_b / "nvidia" / "cu13" / "lib",
              site_b / "nvidia" / "cuda_runtime" / "lib", home / "lib64"):
        d.mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "empty"), str(site_a), str(site_b)])
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    wheel_dirs, system_dirs = _capi._cuda_search_dirs("13")
    assert wheel_dirs == [str(site_a / "nvidia" / "cublas" / "lib"),
                          str(site_b / "nvidia" / "cu13" / "lib"),
                          str(site_b / "nvidia" / "cuda_runtime" / "lib")]
    assert system_dirs[0] == str(home / "lib64")
    # CUDA 12's wheels have no cu12 folder of their own: the same per-library folders
    wheel_dirs, _ = _capi._cuda_search_dirs("12")
    assert str(site_b / "nvidia" / "cu13" / "lib") not in wheel_dirs


def test_debug_info_names_what_was_loaded(engine):
    info = cosyvoice.debug_info()
    assert info["library"] == _capi._loaded_from
    assert info["version"] == cosyvoice.version()[1]
    for soname, where in info["cuda_libraries"].items():
        assert soname.startswith(("libcudart.so.", "libcublas"))
