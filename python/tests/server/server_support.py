"""Starting and stopping a real server process for the server tests."""
import os
import socket
import subprocess
import sys
import time

import httpx


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model, log_dir, *extra, timeout=120):
    """(process, base URL, log file) of `python -m cosyvoice.server --model model *extra`."""
    port = free_port()
    log = open(os.path.join(log_dir, f"server-{port}.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "cosyvoice.server", "--model", model,
                             "--port", str(port), "--log-level", "warning", *extra],
                            stdout=log, stderr=subprocess.STDOUT, cwd=log_dir)
    url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    while True:
        if proc.poll() is not None:
            log.close()
            raise RuntimeError(f"server exited with {proc.returncode}: "
                               + open(log.name).read()[-3000:])
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url, log
        except httpx.TransportError:
            pass
        if time.monotonic() - t0 > timeout:
            proc.kill()
            raise RuntimeError("server did not start in time")
        time.sleep(0.1)


def stop_server(proc, log):
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()
