"""Where the suite's cases run: one interface, a local process pool or a Dask cluster.

`make_executor(jobs, scheduler, out_dir)` returns an `Executor`; `Executor.run(specs)` yields one
`CaseResult` per spec as cases finish (any order) and never loses a case: whatever goes wrong
with one case becomes an `ERROR` result carrying its log. Ctrl+C (KeyboardInterrupt) inside
`run` stops every queued and running case before it propagates.

* `SerialExecutor` (`--jobs 1`): cases run in this process, one after another.
* `PoolExecutor` (`--jobs N`): a spawn process pool whose workers ignore SIGINT; interruption
  terminates the pool.
* `DaskExecutor` (`--scheduler ADDRESS`): each case is a Dask task. The task runs the case in a
  child process of the Dask worker (`python -m raptor.suite.execute`), so a cancelled case is
  really stopped (Python threads cannot be interrupted) and a case that crashes its interpreter
  becomes an ERROR row instead of taking the worker down. A worker that dies mid-case has the
  case rerun on another worker by the scheduler; only the successful attempt's result reaches
  the client. At start, probe tasks check that every worker sees the out-dir at the same path.
  A case process hands its result back through files in the run's scratch directory under the
  out-dir (`SCRATCH_DIR`), which the client removes when the run ends: a worker killed mid-case
  leaves nothing behind there, nor in the workers' temporary directories.
"""

from __future__ import annotations

import os
import pickle
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from raptor.suite.cases import CaseResult, CaseSpec, CompilerResult

CLUSTER_HINT = "pip install '.[cluster]'"
DASK_RETRIES = 2  # task-level retries (exceptions); worker deaths are rescheduled by the scheduler
WAIT_FOR_WORKERS_S = float(os.environ.get("RAPTOR_DASK_WAIT_S", "60"))
PROBE_DIR = ".raptor-probe"
SCRATCH_DIR = ".raptor-cases"  # per run: the result and stderr files of its case processes


class ExecutorError(RuntimeError):
    """A one-line reason why cases cannot be run here (missing extra, unreachable cluster...)."""


def error_result(spec: CaseSpec, message: str, log: str = "") -> CaseResult:
    """A case that produced no result of its own: every selected compiler is ERROR."""
    res = CaseResult(spec=spec, log=log or f"case {spec.key}\nERROR {message}\n")
    for c in ("raptor", "pimcomp"):
        res.results[c] = (
            CompilerResult(status="ERROR", error=message)
            if c in spec.compilers
            else CompilerResult(status="SKIPPED")
        )
    return res


class Executor:
    description = ""

    def run(self, specs: list[CaseSpec]) -> Iterator[CaseResult]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SerialExecutor(Executor):
    description = "1 job"

    def run(self, specs):
        from raptor.suite.execute import run_case

        for s in specs:
            yield run_case(s)


# Cases a pool worker runs before it is replaced by a fresh process (a guard against memory a long
# suite could accumulate in one process). A replacement costs a spawn, the case modules' imports and
# the compiled simulator's load (about 2 s of CPU); with 4, every sub-run of the default ablation
# (8 cases, 2 jobs) replaced both workers once, two of them only to be shut down again.
TASKS_PER_WORKER = 32


def _worker_init() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["OMP_NUM_THREADS"] = "1"
    try:  # what every case imports, loaded while the runner prepares the models
        import raptor.compiler  # noqa: F401
        import raptor.sim  # noqa: F401
        import raptor.validation.compare  # noqa: F401
    except Exception:  # noqa: BLE001 - the case itself reports an import that fails
        pass


class PoolExecutor(Executor):
    """A spawn pool; entering the executor starts its workers (they import the case modules
    while the runner prepares the models), `run` starts them when it was not entered."""

    def __init__(self, jobs: int):
        self.jobs = jobs
        self.description = f"{jobs} jobs"
        self.pool = None

    def __enter__(self):
        self._start()
        return self

    def _start(self):
        if self.pool is None:
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")
            self.pool = ctx.Pool(
                self.jobs, initializer=_worker_init, maxtasksperchild=TASKS_PER_WORKER
            )
        return self.pool

    def run(self, specs):
        from raptor.suite.execute import run_case

        pool = self._start()
        self.pool = None  # a later run starts a new pool
        try:
            yield from pool.imap_unordered(run_case, specs)
            pool.close()
            pool.join()
        except BaseException:
            pool.terminate()
            pool.join()
            raise

    def close(self) -> None:
        if self.pool is not None:  # entered but never run (the models could not be prepared)
            self.pool.terminate()
            self.pool.join()
            self.pool = None


# --- Dask -----------------------------------------------------------------------------------


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise ExecutorError(f"--scheduler needs Dask distributed: {CLUSTER_HINT}") from None
    return distributed


def _probe_write(path: str, token: str) -> str:
    """Probe task: write the token into the out-dir (temp + rename), return where it ran."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(token)
    os.replace(tmp, p)
    return socket.gethostname()


def _probe_read(path: str) -> str | None:
    """Probe task: read a token the client wrote into the out-dir (None when not visible)."""
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _kill(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def run_case_task(spec: CaseSpec, scratch: str, cancel_event: str | None = None) -> CaseResult:
    """The Dask task: run one case in a child process of the worker; never raises.

    The child stays in the worker's process group and also watches its parent (it exits when
    the worker dies). While it runs, the task polls the run's cancel event and kills the child when the
    client sets it (Ctrl+C). The child's result and stderr files go to `scratch` (the run's
    scratch directory, which the client makes and removes: a task that finds it gone belongs to
    a run that is over).
    """
    host = socket.gethostname()
    try:
        from distributed import get_worker

        where = f"{get_worker().address} on {host}"
    except Exception:  # noqa: BLE001 - outside a worker (tests), still run the case
        where = host
    if not spec.model_path.is_file():
        return error_result(
            spec,
            f"out-dir not visible on dask worker {where}: {spec.model_path} is missing "
            "(the out-dir must be on a filesystem every worker sees, at the same path)",
        )
    if not os.path.isdir(scratch):
        return error_result(spec, "cancelled")  # the run is over: the client removed it
    fd, result_path = tempfile.mkstemp(prefix="raptor-case-", suffix=".pkl", dir=scratch)
    os.close(fd)
    env = dict(os.environ, OMP_NUM_THREADS="1", RAPTOR_CASE_WORKER=f"dask worker {where}")
    stderr_path = result_path + ".stderr"
    try:
        with open(stderr_path, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "raptor.suite.execute", result_path],
                stdin=subprocess.PIPE,
                stdout=err,
                stderr=err,
                env=env,
            )
            try:
                proc.stdin.write(pickle.dumps(spec))
                proc.stdin.close()
                event = None
                while proc.poll() is None:
                    try:
                        if cancel_event is not None and event is None:
                            from distributed import Event

                            event = Event(cancel_event)
                        if event is not None and event.wait(timeout=1.0):
                            _kill(proc)
                            return error_result(spec, "cancelled")
                        if event is None:
                            time.sleep(0.5)
                    except Exception:  # noqa: BLE001 - scheduler hiccup: keep waiting
                        time.sleep(0.5)
            except BaseException:
                _kill(proc)
                raise
        try:
            with open(result_path, "rb") as f:
                result: CaseResult = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError):
            tail = Path(stderr_path).read_text(errors="replace")[-4000:]
            return error_result(
                spec,
                f"case process exited with status {proc.returncode} on dask worker {where}",
                log=f"case {spec.key}\ndask worker {where}\n{tail}",
            )
        return result
    finally:
        for p in (result_path, stderr_path):
            try:
                os.unlink(p)
            except OSError:
                pass


class DaskExecutor(Executor):
    def __init__(self, address: str, out_dir: str | Path, retries: int = DASK_RETRIES):
        distributed = _import_distributed()
        self.address = address
        self.retries = retries
        self.out_dir = Path(out_dir).resolve()
        self.description = f"dask {address}"
        try:
            self.client = distributed.Client(address, timeout="10s", set_as_default=False)
        except Exception as e:  # noqa: BLE001 - any connection failure is one line
            raise ExecutorError(
                f"cannot connect to dask scheduler {address}: {type(e).__name__}: {e}".splitlines()[
                    0
                ]
            ) from None
        try:
            try:
                self.client.wait_for_workers(1, timeout=WAIT_FOR_WORKERS_S)
            except Exception:  # noqa: BLE001
                raise ExecutorError(
                    f"dask scheduler {address} has no workers after {WAIT_FOR_WORKERS_S:.0f} s"
                ) from None
            self.check_shared_dir(Path(out_dir))
        except BaseException:
            self.client.close()
            raise

    def check_shared_dir(self, out_dir: Path) -> None:
        """Every worker must write what the client reads and read what the client writes."""
        out_dir = out_dir.resolve()
        probe = out_dir / PROBE_DIR
        probe.mkdir(parents=True, exist_ok=True)
        workers = sorted(self.client.scheduler_info(n_workers=-1)["workers"])
        if not workers:
            raise ExecutorError(f"dask scheduler {self.address} has no workers")
        run = uuid.uuid4().hex[:12]
        try:
            write_tokens = {w: secrets.token_hex(16) for w in workers}
            futs = {
                w: self.client.submit(
                    _probe_write,
                    str(probe / f"{run}-{i}.worker"),
                    write_tokens[w],
                    workers=[w],
                    allow_other_workers=False,
                    pure=False,
                    key=f"raptor-probe-write-{run}-{i}",
                )
                for i, w in enumerate(workers)
            }
            for i, w in enumerate(workers):
                host = self._result(futs[w], w)
                path = probe / f"{run}-{i}.worker"
                seen = path.read_text() if path.is_file() else None
                if seen != write_tokens[w]:
                    raise ExecutorError(
                        f"out-dir {out_dir} is not shared with dask worker {w} ({host}): its probe "
                        "file is not visible here; use a filesystem every worker sees, at the same path"
                    )
            read_token = secrets.token_hex(16)
            (probe / f"{run}.client").write_text(read_token)
            futs = {
                w: self.client.submit(
                    _probe_read,
                    str(probe / f"{run}.client"),
                    workers=[w],
                    allow_other_workers=False,
                    pure=False,
                    key=f"raptor-probe-read-{run}-{i}",
                )
                for i, w in enumerate(workers)
            }
            for w in workers:
                if self._result(futs[w], w) != read_token:
                    raise ExecutorError(
                        f"out-dir {out_dir} is not shared with dask worker {w}: it cannot read the "
                        "client's probe file; use a filesystem every worker sees, at the same path"
                    )
        finally:
            for p in probe.glob(f"{run}*"):
                p.unlink(missing_ok=True)
            try:
                probe.rmdir()
            except OSError:
                pass  # another run is probing too

    def _result(self, fut, worker: str, timeout: float = 60):
        try:
            return fut.result(timeout=timeout)
        except Exception as e:  # noqa: BLE001
            raise ExecutorError(
                f"out-dir probe task failed on dask worker {worker}: {type(e).__name__}: {e}".splitlines()[
                    0
                ]
            ) from None

    def run(self, specs):
        from distributed import Event, as_completed

        run = uuid.uuid4().hex[:12]
        cancel = f"raptor-cancel-{run}"
        event = Event(cancel, client=self.client)
        futures = {}
        scratch = self.out_dir / SCRATCH_DIR / run
        scratch.mkdir(parents=True)
        try:
            # inside the try: `specs` may build models lazily while earlier cases already run,
            # and Ctrl+C there must cancel those too
            for i, s in enumerate(specs):
                f = self.client.submit(
                    run_case_task,
                    s,
                    str(scratch),
                    cancel,
                    key=f"raptor-case-{run}-{i}-{s.key.replace('/', '_')}",
                    retries=self.retries,
                    pure=False,
                )
                futures[f.key] = (f, s)
            for fut in as_completed([f for f, _ in futures.values()], loop=self.client.loop):
                spec = futures[fut.key][1]
                if fut.status == "finished":
                    yield fut.result()
                else:
                    try:
                        exc = fut.exception()
                        msg = f"dask task {fut.status}: {type(exc).__name__}: {exc}"
                    except Exception as e:  # noqa: BLE001 - cancelled futures raise here
                        msg = f"dask task {fut.status}: {type(e).__name__}"
                    yield error_result(spec, msg.splitlines()[0])
                fut.release()
        except BaseException:
            try:
                event.set()  # running cases kill their child process
            finally:
                self.client.cancel([f for f, _ in futures.values()], force=True)
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            try:
                scratch.parent.rmdir()
            except OSError:
                pass  # absent, or another run's scratch is there too

    def close(self) -> None:
        try:
            self.client.close(timeout=10)
        except Exception:  # noqa: BLE001
            pass


def make_executor(jobs: int, scheduler: str | None, out_dir: str | Path) -> Executor:
    if scheduler:
        return DaskExecutor(scheduler, out_dir)
    return SerialExecutor() if jobs <= 1 else PoolExecutor(jobs)
