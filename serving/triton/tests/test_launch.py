"""launch.py around a stand-in tritonserver (a shell script): the command line it gets (ports:
HTTP 8003, not the speech server's 8000), signals passed on, its exit status, and the temporary
folder it made removed at the end."""
import glob
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = os.path.join(os.path.dirname(HERE), "launch.py")

FAKE = """#!/bin/sh
echo "$@" > "$ARGS_OUT"
trap 'kill $pid 2>/dev/null; exit 3' TERM
sleep 60 &
pid=$!
wait $pid
"""


def test_ports_signals_exit_status_and_cleanup(tmp_path):
    fake = tmp_path / "tritonserver"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    args_out = tmp_path / "args"
    env = dict(os.environ, TMPDIR=str(tmp), ARGS_OUT=str(args_out), COSYVOICE_MODEL="m",
               COSYVOICE_VOICES="v")
    proc = subprocess.Popen([sys.executable, LAUNCH, "--kind", "cpu", "--tritonserver", str(fake)],
                            env=env, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    while not args_out.exists() or not args_out.read_text():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() - t0 < 30
        time.sleep(0.05)
    args = args_out.read_text().split()
    assert "--http-port=8003" in args and "--grpc-port=8001" in args and \
        "--metrics-port=8002" in args, args
    made = glob.glob(str(tmp / "cosyvoice-triton-*"))
    assert len(made) == 1 and os.path.isdir(os.path.join(made[0], "model_repository")), made
    assert f"--model-repository={made[0]}/model_repository" in args, args
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 3   # the server's own status
    assert not os.path.exists(made[0])
    assert os.listdir(tmp) == []


def test_a_given_workdir_is_kept(tmp_path):
    fake = tmp_path / "tritonserver"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    work = tmp_path / "work"
    rc = subprocess.call([sys.executable, LAUNCH, "--kind", "cpu", "--tritonserver", str(fake),
                          "--workdir", str(work)], stderr=subprocess.DEVNULL)
    assert rc == 0 and (work / "model_repository").is_dir()
