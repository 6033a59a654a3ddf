"""The suite on a real Dask cluster on 127.0.0.1: one `dask scheduler` and two `dask worker`
processes (--nworkers 1 --nthreads 1 each), started here and killed in the finalizer.

Same CSVs as a local run, reference data prepared once in the client, the shared out-dir probe,
Ctrl+C cancelling queued and running cases, and a worker SIGKILLed mid-case whose case is rerun
on the other worker.
"""

import csv
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from raptor.suite import executor as ex
from raptor.suite.ablation import main as ablation_main

distributed = pytest.importorskip("distributed")

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "validation/tools/pim/pimcomp/compare/run_pimcomp_models.py"
ABLATION = ROOT / "validation/tools/pim/ablation/run_ablation.py"
DASK = Path(sys.executable).with_name("dask")
SMALL = ["--models", "vgg8", "--archs", "arch-a", "--input-size", "16"]
WALL_COLUMNS = {"raptor_compile_s", "raptor_simulate_s", "pimcomp_compile_s", "pimcomp_simulate_s"}
WALL_COLUMNS |= {"wall_s"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k not in WALL_COLUMNS} for r in csv.DictReader(f)]


def _run(script: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=dict(os.environ, COLUMNS="200"),
    )


def _case_children() -> dict[int, int]:
    """pid -> process group of every running case child process (`-m raptor.suite.execute`)."""
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,args="], capture_output=True, text=True).stdout
    kids = {}
    for line in out.splitlines():
        pid, pgid, args = line.split(None, 2)
        if "-m raptor.suite.execute" in args:
            kids[int(pid)] = int(pgid)
    return kids


class Cluster:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []
        self.address = f"tcp://127.0.0.1:{_free_port()}"
        self._start(
            "scheduler",
            [
                str(DASK),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                self.address.rsplit(":", 1)[1],
            ],
        )
        self._wait_for_scheduler()
        self.workers: dict[str, subprocess.Popen] = {}
        for i in range(2):
            self.add_worker(f"w{i}")
        with distributed.Client(self.address, timeout="20s") as c:
            c.wait_for_workers(2, timeout=30)

    def _wait_for_scheduler(self) -> None:
        port = int(self.address.rsplit(":", 1)[1])
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("dask scheduler did not start")

    def _start(self, name: str, argv: list[str], prefix: list[str] = ()) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "w")
        p = subprocess.Popen(
            [*prefix, *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: a finalizer or a test can SIGKILL it whole
            cwd=self.tmp,
        )
        self.procs.append(p)
        return p

    def add_worker(self, name: str, prefix: list[str] = ()) -> str:
        port = _free_port()
        address = f"tcp://127.0.0.1:{port}"
        self.workers[address] = self._start(
            name,
            [
                str(DASK),
                "worker",
                self.address,
                "--host",
                "127.0.0.1",
                "--worker-port",
                str(port),
                "--nanny-port",
                str(_free_port()),
                "--nthreads",
                "1",
                "--nworkers",
                "1",
                "--no-dashboard",
                "--local-directory",
                str(self.tmp / name),
            ],
            prefix=prefix,
        )
        return address

    def kill(self, p: subprocess.Popen) -> None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=10)

    def close(self) -> None:
        for p in reversed(self.procs):
            self.kill(p)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("dask"))
    yield c
    c.close()


@pytest.fixture(scope="module")
def local_ablation(tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    args = ["--out-dir", str(out), *SMALL, "--variant", "no-plan", "--mode", "latency"]
    r = _run(ABLATION, *args, "--jobs", "2")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


def test_scheduler_is_a_runner_option_forwarded_by_the_ablation(capsys):
    assert ablation_main(["--dry-run", "--scheduler", "tcp://127.0.0.1:8786", *SMALL]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 8 and all("--scheduler tcp://127.0.0.1:8786" in ln for ln in lines)
    r = _run(RUNNER, "--help")
    assert "--scheduler ADDRESS" in r.stdout


def test_without_dask_scheduler_fails_in_one_line(tmp_path):
    code = (
        "import sys; sys.modules['distributed'] = None; from raptor.suite.runner import main; "
        f"sys.exit(main(['--out-dir', {str(tmp_path)!r}, '--scheduler', 'tcp://127.0.0.1:1']))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stdout + r.stderr
    assert "pip install '.[cluster]'" in lines[0]


class _FakeFuture:
    def __init__(self, value):
        self.value = value

    def result(self, timeout=None):
        return self.value


class _ElsewhereClient:
    """A client whose one worker sees `elsewhere` where the client sees `here`."""

    def __init__(self, here: Path, elsewhere: Path):
        self.here, self.elsewhere = str(here), str(elsewhere)

    def scheduler_info(self, **kw):
        return {"workers": {"tcp://10.0.0.9:4000": {}}}

    def submit(self, fn, path, *args, **kw):
        return _FakeFuture(fn(path.replace(self.here, self.elsewhere), *args))


@pytest.mark.parametrize("direction", ["worker-writes", "worker-reads"])
def test_probe_rejects_an_out_dir_workers_do_not_share(tmp_path, monkeypatch, direction):
    here, elsewhere = tmp_path / "out", tmp_path / "node2"
    e = ex.DaskExecutor.__new__(ex.DaskExecutor)
    e.address, e.client = "tcp://fake:8786", _ElsewhereClient(here, elsewhere)
    if direction == "worker-reads":  # the worker's writes land here, but it cannot read ours
        monkeypatch.setattr(ex, "_probe_read", lambda path: None)
        e.client.elsewhere = e.client.here
    with pytest.raises(ex.ExecutorError, match="not shared with dask worker tcp://10.0.0.9:4000"):
        e.check_shared_dir(here)
    assert not list(here.rglob("*.worker")) and not list(here.rglob("*.client"))


def test_dask_run_gives_the_local_csvs(cluster, local_ablation, tmp_path):
    out = tmp_path / "dask"
    args = ["--out-dir", str(out), *SMALL, "--variant", "no-plan", "--mode", "latency"]
    t0 = time.perf_counter()
    r = _run(ABLATION, *args, "--scheduler", cluster.address)
    print(f"ablation (2 runner invocations) on dask: {time.perf_counter() - t0:.1f} s")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"dask {cluster.address}" in r.stdout
    assert _rows(out / "results_ablation.csv") == _rows(local_ablation / "results_ablation.csv")
    for v in ("baseline", "no-plan"):
        rel = Path("ablation") / v / "results_comparison.csv"
        assert _rows(out / rel) == _rows(local_ablation / rel)
        log = (out / "vgg8/artifacts/arch-a/latency/ablation" / v / "case.log").read_text()
        assert "runs on dask worker tcp://127.0.0.1:" in log
    # reference data was prepared once, by the client, before any case was dispatched
    common = [p.stat().st_mtime for p in (out / "vgg8/artifacts/common").iterdir()]
    reports = [p.stat().st_mtime for p in out.rglob("compile_report.json")]
    assert common and len(reports) == 2 and max(common) <= min(reports)
    assert not (out / ex.PROBE_DIR).exists()


def test_ctrl_c_cancels_queued_and_running_cases(cluster, tmp_path):
    out = tmp_path / "suite"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ABLATION),
            "--out-dir",
            str(out),
            "--models",
            "vgg8",
            "resnet18",
            "resnet34",  # enough work that the run cannot end before the signal arrives
            "googlenet",
            "--archs",
            "arch-a",
            "--input-size",
            "32",
            "--scheduler",
            cluster.address,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    groups = {p.pid for p in cluster.workers.values()}
    deadline = time.time() + 90
    while time.time() < deadline and not set(_case_children().values()) & groups:
        time.sleep(0.2)
    running = {pid for pid, g in _case_children().items() if g in groups}
    assert running, "no case started on the workers"
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output[-2000:]
    assert "interrupted" in output
    deadline = time.time() + 10  # the cases' child processes are killed on their workers
    while time.time() < deadline and running & set(_case_children()):
        time.sleep(0.2)
    assert not running & set(_case_children())
    assert not (out / "results_ablation.csv").exists()
    assert not list(out.rglob(ex.SCRATCH_DIR))  # the run's scratch directory went with it
    with distributed.Client(cluster.address, timeout="10s") as c:  # nothing left queued
        deadline = time.time() + 10
        while time.time() < deadline and any(c.processing().values()):
            time.sleep(0.2)
        assert not any(c.processing().values())


def _can_unshare() -> bool:
    r = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True
    )
    return r.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs unshare --mount (private mount namespace)")
def test_worker_that_cannot_see_the_out_dir_stops_the_run(cluster, tmp_path):
    out, empty = tmp_path / "suite", tmp_path / "empty"
    out.mkdir()
    empty.mkdir()
    # a third worker whose view of the out-dir is another (empty) directory, as on a node
    # where the out-dir is not mounted
    mount = ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
    script = f'mount --bind "{empty}" "{out}" && exec "$0" "$@"'
    address = cluster.add_worker("w-elsewhere", prefix=[*mount, script])
    try:
        with distributed.Client(cluster.address, timeout="10s") as c:
            c.wait_for_workers(3, timeout=30)
        r = _run(RUNNER, "--out-dir", str(out), *SMALL, "--scheduler", cluster.address)
        lines = r.stdout.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stdout + r.stderr
        assert f"not shared with dask worker {address}" in lines[0]
        assert not (out / "vgg8").exists()  # nothing was prepared or run
    finally:
        cluster.kill(cluster.workers.pop(address))


def test_worker_killed_mid_case_has_its_case_rerun(cluster, local_ablation, tmp_path):
    """Last in the file: it leaves the cluster with one worker. The killed attempt's result
    and stderr files were in the run's scratch directory, which the run removes: nothing is
    left there or in the temporary directory."""
    out = tmp_path / "suite"
    before = set(Path(tempfile.gettempdir()).glob("raptor-case-*"))
    with distributed.Client(cluster.address, timeout="10s") as c:
        c.wait_for_workers(2, timeout=30)
    proc = subprocess.Popen(
        [
            sys.executable,
            str(RUNNER),
            "--out-dir",
            str(out),
            *SMALL,
            "--mode",
            "latency",
            "--raptor-only",
            "--scheduler",
            cluster.address,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, COLUMNS="200"),
    )
    by_group = {p.pid: a for a, p in cluster.workers.items()}
    victim = None
    deadline = time.time() + 90
    while time.time() < deadline and victim is None:
        for g in _case_children().values():
            if g in by_group:
                victim = by_group[g]
        time.sleep(0.1)
    assert victim, "the case never started"
    time.sleep(1.0)  # let it write part of its artifacts
    cluster.kill(cluster.workers.pop(victim))  # SIGKILL the worker, its nanny and the case child
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output[-3000:]
    rows = _rows(out / "results_comparison.csv")
    assert len(rows) == 1 and rows[0]["raptor_functional_validation"] == "PASS"
    base = _rows(local_ablation / "ablation/baseline/results_comparison.csv")[0]
    assert {k: v for k, v in rows[0].items() if k in base} == base  # same numbers as locally
    case = out / "vgg8/artifacts/arch-a/latency"
    (survivor,) = cluster.workers
    assert f"runs on dask worker {survivor}" in (case / "case.log").read_text()
    assert (case / "raptor/pim/config.json").is_file()
    leftovers = [p for p in case.rglob(".*") if p.name.startswith(".pim.") or p.suffix == ".tmp"]
    assert not leftovers
    assert not (out / ex.SCRATCH_DIR).exists()
    assert set(Path(tempfile.gettempdir()).glob("raptor-case-*")) <= before
