#!/usr/bin/env python3
"""launch.py - start Triton Inference Server on this model repository.

    COSYVOICE_MODEL=/models/cosyvoice3.gguf COSYVOICE_VOICES=/models/voices \\
        python3 serving/triton/launch.py [--kind gpu|cpu] [--grpc-port 8001] [--http-port 8003] \\
        [--metrics-port 8002] [--address 0.0.0.0] [--workdir DIR] [-- EXTRA TRITONSERVER ARGS]

Which tritonserver: --tritonserver PATH, else `tritonserver` on PATH (an NGC Triton container,
whose Python backend is installed under /opt/tritonserver/backends), else the one bundled in the
`nvidia-pytriton` wheel. The wheel ships the server, the Python backend (libtriton_python.so)
and a backend stub per Python version, but not laid out as a backend directory: this script
makes one under WORKDIR/backends/python with the stub of the running Python (so the model runs
under this interpreter and its site-packages: numpy, cosyvoice) and puts the wheel's own
libraries on LD_LIBRARY_PATH, as pytriton itself does.

--kind cpu writes a copy of the repository whose instance_group is KIND_CPU (one engine on the
CPU); --kind gpu (the default) uses the repository as it is (one instance, so one engine, per
GPU that Triton sees: CUDA_VISIBLE_DEVICES picks them).

Ports: gRPC 8001 and metrics 8002 as Triton's defaults; HTTP 8003, not Triton's 8000, which is
the speech server's (cosyvoice-server) default, so both can run on one machine as they come.

The server runs as a child of this process, which passes SIGTERM, SIGINT and SIGHUP on to it,
exits with its status, and removes the temporary WORKDIR it made (a --workdir given is kept).
The gRPC endpoint pings idle clients (keepalive every 10 s, 5 s to answer), so a client that
vanished without closing its connection is noticed and its requests cancelled.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "model_repository")


def pytriton_server():
    """(tritonserver binary, backends source dir, stub for this Python, library dir) of the
    nvidia-pytriton wheel, or None when it is not installed."""
    try:
        import importlib.util
        spec = importlib.util.find_spec("pytriton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = list(spec.submodule_search_locations)[0]
    dist = os.path.join(root, "tritonserver")
    ver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    stub = os.path.join(dist, "python_backend_stubs", ver, "triton_python_backend_stub")
    libs = os.path.join(os.path.dirname(root), "nvidia_pytriton.libs")
    binary = os.path.join(dist, "bin", "tritonserver")
    if not os.path.exists(binary):
        return None
    if not os.path.exists(stub):
        sys.exit(f"launch.py: nvidia-pytriton has no Python backend stub for Python {ver}")
    return binary, os.path.join(dist, "backends"), stub, libs


def make_backends(workdir, backends_src, stub):
    """WORKDIR/backends/python: the wheel's Python backend with the stub of this Python."""
    dst = os.path.join(workdir, "backends", "python")
    os.makedirs(dst, exist_ok=True)
    src = os.path.join(backends_src, "python")
    files = [(os.path.join(src, n), n) for n in os.listdir(src) if n.endswith((".so", ".py"))]
    for path, name in files + [(stub, "triton_python_backend_stub")]:
        # copied aside and renamed over: a server still running from this WORKDIR keeps its files
        tmp = os.path.join(dst, f".{name}.{os.getpid()}")
        shutil.copy2(path, tmp)
        os.replace(tmp, os.path.join(dst, name))
    return os.path.join(workdir, "backends")


def cpu_repository(src, workdir):
    """A copy of the repository whose models run on the CPU (instance_group KIND_CPU)."""
    dst = os.path.join(workdir, "model_repository")
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    for model in os.listdir(dst):
        cfg = os.path.join(dst, model, "config.pbtxt")
        if not os.path.exists(cfg):
            continue
        with open(cfg) as f:
            text = f.read()
        new, n = re.subn(r"kind:\s*KIND_GPU", "kind: KIND_CPU", text)
        if n == 0 and "KIND_CPU" not in text:
            sys.exit(f"launch.py: {cfg} has no instance_group kind to change")
        with open(cfg, "w") as f:
            f.write(new)
    return dst


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--model-repository", default=REPO)
    ap.add_argument("--tritonserver", help="tritonserver binary (default: PATH, then pytriton's)")
    ap.add_argument("--workdir", help="where the backend directory and a CPU repository copy go "
                                      "(default: a new temporary directory)")
    ap.add_argument("--address", default="0.0.0.0", help="address the endpoints bind to")
    ap.add_argument("--http-port", type=int, default=8003,
                    help="(default %(default)s: Triton's 8000 is the speech server's)")
    ap.add_argument("--grpc-port", type=int, default=8001)
    ap.add_argument("--metrics-port", type=int, default=8002)
    a = ap.parse_args(argv)
    for var in ("COSYVOICE_MODEL", "COSYVOICE_VOICES"):
        if not os.environ.get(var):
            print(f"launch.py: note: {var} is not set; config.pbtxt names it unless you edited the "
                  "parameters", file=sys.stderr)
    temporary = not a.workdir
    workdir = a.workdir or tempfile.mkdtemp(prefix="cosyvoice-triton-")
    os.makedirs(workdir, exist_ok=True)
    try:
        return run(a, extra, workdir)
    finally:
        if temporary:
            shutil.rmtree(workdir, ignore_errors=True)


def run(a, extra, workdir):
    """Run tritonserver until it exits; its exit status."""
    env = dict(os.environ)
    backend_dir = None
    binary = a.tritonserver or shutil.which("tritonserver")
    if not binary:
        found = pytriton_server()
        if not found:
            sys.exit("launch.py: no tritonserver: install the nvidia-pytriton wheel, run in an NGC "
                     "Triton container, or pass --tritonserver")
        binary, backends_src, stub, libs = found
        backend_dir = make_backends(workdir, backends_src, stub)
        # the stub embeds libpython3.X: take this interpreter's own when it has a shared one
        import sysconfig
        pylib = sysconfig.get_config_var("LIBDIR") if sysconfig.get_config_var("Py_ENABLE_SHARED") \
            else None
        env["LD_LIBRARY_PATH"] = ":".join(p for p in (pylib, env.get("LD_LIBRARY_PATH"), libs) if p)
        # the stub starts this Python's interpreter: its bin first on PATH, as pytriton does
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    repo = cpu_repository(a.model_repository, workdir) if a.kind == "cpu" else a.model_repository
    cmd = [binary, f"--model-repository={repo}",
           f"--http-address={a.address}", f"--http-port={a.http_port}",
           f"--grpc-address={a.address}", f"--grpc-port={a.grpc_port}",
           f"--metrics-address={a.address}", f"--metrics-port={a.metrics_port}",
           "--grpc-keepalive-time=10000", "--grpc-keepalive-timeout=5000"]
    if backend_dir:
        cmd.append(f"--backend-directory={backend_dir}")
    cmd += extra
    print("launch.py:", " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, env=env)

    def forward(signum, _frame):
        if proc.poll() is None:
            proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    while True:
        try:
            rc = proc.wait()
            break
        except InterruptedError:
            continue
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main())
