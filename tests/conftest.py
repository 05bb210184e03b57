"""Shared test set-up: offline environment, Debian chromium for Playwright, the real default model.

Area-specific fixtures live in their own modules under tests/support/ (imported explicitly), not here.
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings

import pytest

# Tests never reach the Hub or Gradio's telemetry.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Two test workers share the cores, each with torch's OpenMP team of one thread per core. By default a team's
# threads spin for a while after each parallel region, taking the cores from the other worker (the model
# checks ran 2.4x slower for it): here they sleep instead. Read by OpenMP when torch loads, so set before
# any test imports torch; the servers and CLIs the tests start inherit it. Thread counts, and so the code
# paths the tests exercise, stay as they are.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if "torch" in sys.modules:  # too late for this process (the tests still pass, only slower beside another worker)
    warnings.warn("torch was imported before tests/conftest.py set OMP_WAIT_POLICY=PASSIVE", stacklevel=1)

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def pytest_configure(config):
    """The run's count of served apps (tests/support/ui_server.py): a fresh file, named in the environment before
    the xdist workers start, so that they inherit it and append their apps' lines."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller has set the file
        return
    from tests.support.ui_server import ARTIFACTS, SERVED_LOG_VAR

    ARTIFACTS.mkdir(exist_ok=True)
    log = ARTIFACTS / "served-apps.log"
    log.write_text("")
    os.environ[SERVED_LOG_VAR] = str(log)


_file_times: dict[str, list] = {}  # file -> [worker, first start, last stop, seconds in its tests' phases]


def pytest_runtest_logreport(report):
    """Per file: the worker that ran it, when it began and ended, and the time its tests took (the controller
    writes them to test-artifacts/file-times.log at the end: where a run's time went, and the workers' balance)."""
    worker = getattr(getattr(report, "node", None), "gateway", None)
    path = report.nodeid.split("::", 1)[0]
    t = _file_times.setdefault(path, [getattr(worker, "id", "-"), report.start, report.stop, 0.0])
    t[1], t[2], t[3] = min(t[1], report.start), max(t[2], report.stop), t[3] + report.duration


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput") or not _file_times:
        return
    from tests.support.ui_server import ARTIFACTS

    t0 = min(t[1] for t in _file_times.values())
    rows = sorted(_file_times.items(), key=lambda kv: (kv[1][0], kv[1][1]))
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / "file-times.log", "w", encoding="utf-8") as out:
        out.write("worker\tbegan_s\tended_s\ttests_s\tfile\n")
        for path, (worker, start, stop, seconds) in rows:
            out.write(f"{worker}\t{start - t0:.0f}\t{stop - t0:.0f}\t{seconds:.1f}\t{path}\n")


def pytest_terminal_summary(terminalreporter, config):
    """Say how many apps the run served and which (one line each: test process, first test, what it serves)."""
    from tests.support.ui_server import SERVED_LOG_VAR

    path = os.environ.get(SERVED_LOG_VAR)
    if hasattr(config, "workerinput") or not path or not os.path.exists(path):
        return
    lines = [line for line in open(path, encoding="utf-8").read().splitlines() if line.strip()]
    terminalreporter.write_sep("-", f"served apps this run: {len(lines)}")
    for line in lines:
        terminalreporter.write_line(line)
    if _file_times:
        t0 = min(t[1] for t in _file_times.values())
        ends = {}
        for worker, _start, stop, _seconds in _file_times.values():
            ends[worker] = max(ends.get(worker, 0.0), stop - t0)
        terminalreporter.write_line("each worker's last test ended (s after the first began): " + ", ".join(
            f"{w} {e:.0f}" for w, e in sorted(ends.items())) + "; per file: test-artifacts/file-times.log")


# Files that share one served app beside the browser tests' own (a session fixture below: `tiny_moe_app`):
# file -> the file it runs after, on the same xdist worker, so that the app is served once for both.
SAME_WORKER = {"tests/served/test_fuzz_api.py": "tests/browser/test_moe_e2e.py"}


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own scheduler for --dist loadfile
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` with the files of SAME_WORKER in one work unit (their tests in the collected order)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedAppFiles(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return SAME_WORKER.get(path, path)

    return SharedAppFiles(config, log)


# The files that take longest, longest first, run before every other file (measured: the seconds of their tests
# in one run of tests/browser, tests/served and the browser test of tests/unit/ui on two workers, the machine
# shared and loaded; test-artifacts/file-times.log has a run's). Longest first, the two workers end together:
# one takes each number-box file, and no long file starts while the other worker runs out of work. A file not
# here keeps its place below them.
LONG_FIRST = [
    "tests/browser/test_ui_number_boxes_labs.py",  # 462 s
    "tests/browser/test_ui_number_boxes.py",  # 452 s
    "tests/browser/test_ui_tour_e2e.py",  # 245 s
    "tests/served/test_space_e2e.py",  # 236 s: pip installs the Space's requirements into a fresh venv
    "tests/browser/test_ui_e2e.py",  # 216 s
    "tests/browser/test_ui_step_lands_e2e.py",  # 214 s
    "tests/browser/test_ui_page.py",  # 152 s
    "tests/browser/test_moe_e2e.py",  # 145 s with tests/served/test_fuzz_api.py (SAME_WORKER)
    "tests/browser/test_ui_layout.py",  # 137 s
    "tests/browser/test_ui_decoding_e2e.py",  # 122 s
    "tests/browser/test_ui_branches_e2e.py",  # 114 s
    "tests/browser/test_ui_serving_e2e.py",  # 112 s
    "tests/served/test_load.py",  # 103 s
]


@pytest.hookimpl(trylast=True)  # after pytest's own reordering, so each file's tests stay together
def pytest_collection_modifyitems(config, items):
    """The files of LONG_FIRST first, then those that drive a browser, then those marked slow, then the rest,
    each file's tests in their order: the two workers (pyproject's addopts, `--no-loadscope-reorder`) take whole
    files in this order, so the long files start early and the short ones fill the end (by default xdist orders
    files by how many tests they hold, which put the long browser files last, with one worker busy and the
    other idle)."""
    def weight(item) -> int:
        marks = {m.name for m in item.iter_markers()}
        return 0 if "browser" in marks else 1 if "slow" in marks else 2

    def path(item) -> str:
        return item.nodeid.split("::", 1)[0]

    file_weight: dict[str, int] = {}
    file_index: dict[str, int] = {}
    for i, item in enumerate(items):
        file_weight[path(item)] = min(file_weight.get(path(item), 2), weight(item))
        file_index.setdefault(path(item), i)
    first = {name: -len(LONG_FIRST) + i for i, name in enumerate(LONG_FIRST)}  # before weight 0
    items.sort(key=lambda item: (first.get(path(item), file_weight[path(item)]), file_index[path(item)]))


@pytest.fixture(autouse=True)
def _settle_the_model_thread():
    """After each test, let the work the app queued on its decode thread (forwards run ahead after a delay) run
    out, so none of it lands in the next test (which may count forwards or patch the session)."""
    yield
    model_thread = sys.modules.get("inspector.ui.model_thread")
    if model_thread is not None:
        model_thread.settle()


def chromium_path() -> str | None:
    return os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """pytest-playwright cannot download browsers here: drive Debian's chromium instead."""
    path = chromium_path()
    if path is None:
        pytest.fail("chromium not found: install it (apt-get install -y chromium) or set CHROMIUM_PATH")
    return {**browser_type_launch_args, "executable_path": path, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def default_model():
    """The real embedded default model (SmolLM2-135M-Instruct, fp32), loaded once per test run: every test that
    needs it in this process takes this one."""
    from inspector.models.loader import load_model

    return load_model()


@pytest.fixture(scope="session")
def app_demo(default_model):
    """The app over the default model, served in this process: one for the whole test run (each browser test
    opens it in a fresh page, so in a session of its own)."""
    from tests.support.ui_server import start_app

    demo = start_app(default_model)
    yield demo
    demo.close()


@pytest.fixture(scope="session")
def tiny_moe_app(tmp_path_factory):
    """The app over a tiny random mixture of experts, with small caps (tests/support/ui_server.py's
    `serve_tiny_moe`), served in this process: one for the whole test run. Here, not in tests/support/, so that
    it is one fixture for every file (a fixture imported into two files is two fixtures, each built)."""
    from tests.support.ui_server import ARTIFACTS, serve_tiny_moe

    ARTIFACTS.mkdir(exist_ok=True)
    app = serve_tiny_moe(tmp_path_factory.mktemp("tiny") / "tiny-mixtral")
    yield app
    app.demo.close()


@pytest.fixture(scope="session")
def app_url(app_demo) -> str:
    from tests.support.ui_server import ARTIFACTS

    ARTIFACTS.mkdir(exist_ok=True)
    return app_demo.local_url
