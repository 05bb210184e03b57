"""Shared test set-up: offline environment, Debian chromium for Playwright, the real default model.

Area-specific fixtures live in their own modules under tests/support/ (imported explicitly), not here.
"""

from __future__ import annotations

import gc
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
# The test workers share the cores, each with torch's OpenMP team of one thread per core. By default a team's
# threads spin for a while after each parallel region, taking the cores from the other workers (the model
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


DEFAULT_APP_FILES_VAR = "INSPECTOR_TEST_DEFAULT_APP_FILES"


def pytest_configure(config):
    """The run's count of served apps (tests/support/ui_server.py), and the list of the files that use the
    default app (DEFAULT_APP_UNIT): fresh files, named in the environment before the xdist workers start, so
    that they inherit them and write there."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller has set the files
        return
    from tests.support.ui_server import ARTIFACTS, SERVED_LOG_VAR

    ARTIFACTS.mkdir(exist_ok=True)
    log = ARTIFACTS / "served-apps.log"
    log.write_text("")
    os.environ[SERVED_LOG_VAR] = str(log)
    listing = ARTIFACTS / "default-app-files.txt"
    listing.unlink(missing_ok=True)
    os.environ[DEFAULT_APP_FILES_VAR] = str(listing)


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


# A run serves four apps (tests/README.md): the default app twice, in the process of each worker that runs one of
# the two units of files using it (`app_demo`, `app_url`, or a fixture built on them); the tiny mixture of
# experts; the Space bundle's.
# The files that share the tiny app or the Space's, each with the file it runs after on the same worker (one xdist
# work unit: the app is served once for both):
SAME_WORKER = {
    "tests/served/test_fuzz_api_tiny.py": "tests/browser/test_moe_e2e.py",  # `tiny_moe_app`
    "tests/served/test_load.py": "tests/served/test_space_e2e.py",  # `space_app`
}
DEFAULT_APP_UNIT = "the files that use the default app"  # one work unit: a worker takes it whole
# The default app's files are two work units, each served the default app in its own worker: one unit of them all
# was one worker's whole run (about 770 s of tests in a full run on two workers). The files here are the second
# unit (the seconds of their tests in a full run on three workers, test-artifacts/file-times.log: about 500 s); the
# other files the first (about 470 s).
DEFAULT_APP_SECOND_UNIT = frozenset({
    "tests/browser/test_ui_number_boxes.py",  # 148 s
    "tests/browser/test_ui_number_boxes_labs.py",  # 174 s
    "tests/browser/test_ui_step_lands_e2e.py",  # 106 s
    "tests/browser/test_ui_tour_e2e.py",  # 74 s
})


def uses_default_app(item) -> bool:
    return "app_demo" in getattr(item, "fixturenames", ())  # app_url and the fixtures built on it take app_demo


def write_default_app_files(items) -> None:
    """In an xdist worker, after collection: the files whose tests use the default app, to the file the controller
    named (its scheduler reads them: workers send it test ids only). Each worker writes the same list."""
    path = os.environ.get(DEFAULT_APP_FILES_VAR)
    if not path:
        return
    files = sorted({item.nodeid.split("::", 1)[0] for item in items if uses_default_app(item)})
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as out:
        out.write("".join(f"{f}\n" for f in files))
    os.replace(tmp, path)  # whole, never half written: the other worker may write it too


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own scheduler for --dist loadfile
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` with three kinds of multi-file work unit: the files that use the default app, in two
    units (DEFAULT_APP_SECOND_UNIT's files and the others), then each group of SAME_WORKER; their tests in the
    collected order."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedAppFiles(LoadFileScheduling):
        default_app_files: set[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.default_app_files is None:  # scopes are split once every worker has collected
                listing = os.environ.get(DEFAULT_APP_FILES_VAR, "")
                self.default_app_files = (set(open(listing, encoding="utf-8").read().split())
                                          if listing and os.path.exists(listing) else set())
            path = super()._split_scope(nodeid)
            if path in self.default_app_files:
                return DEFAULT_APP_UNIT + (" (second unit)" if path in DEFAULT_APP_SECOND_UNIT else "")
            return SAME_WORKER.get(path, path)

    return SharedAppFiles(config, log)


# After the default app's two work units (its files, about 470 s and 500 s of tests: two workers run one each,
# starting first), the files that take longest, longest first, so that the third worker starts them early and the
# short ones fill the workers' ends (measured: the seconds of their tests in one full run on two workers, the
# machine shared and loaded; test-artifacts/file-times.log has a run's). A file not here keeps its place below
# them.
LONG_FIRST = [
    "tests/served/test_space_e2e.py",  # 140 s with tests/served/test_load.py (SAME_WORKER): pip installs the Space
    "tests/browser/test_moe_e2e.py",  # 60 s with tests/served/test_fuzz_api_tiny.py (SAME_WORKER)
    "tests/real_model/test_gemma3_real.py",  # 71 s
    "tests/real_model/test_decoding_real.py",  # 44 s
    "tests/real_model/test_generation_golden.py",  # 40 s
]


# The first of the default app's files: the API fuzz's cases on it put their caps on it while its store is as fresh
# as an app built for them (tests/served/test_fuzz_api_default.py).
OPENS_THE_DEFAULT_APP = "tests/served/test_fuzz_api_default.py"


@pytest.hookimpl(trylast=True)  # after pytest's own reordering, so each file's tests stay together
def pytest_collection_modifyitems(config, items):
    """The files that use the default app (OPENS_THE_DEFAULT_APP first), then the other files of LONG_FIRST, then
    those that drive a browser, then those marked slow, then the rest, each file's tests in their order: the
    workers (pyproject's addopts, `--no-loadscope-reorder`) take whole work units (`pytest_xdist_make_scheduler`)
    in the order of their first test, so the default app's units and the long files start early and the short
    ones fill the end (by default xdist orders files by how many tests they hold, which put the long browser
    files last, with one worker busy and the others idle). In a worker, it then writes which files use the
    default app (`write_default_app_files`)."""
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
    first[OPENS_THE_DEFAULT_APP] = -len(LONG_FIRST) - 1
    default_app = {path(item) for item in items if uses_default_app(item)}
    items.sort(key=lambda item: (path(item) not in default_app, first.get(path(item), file_weight[path(item)]),
                                 file_index[path(item)]))
    if hasattr(config, "workerinput"):
        write_default_app_files(items)


def pytest_collection_finish(session):
    """Once a test process has collected, what it holds (the libraries its test files imported: torch, Gradio,
    transformers, and the test modules) stays until it exits: `gc.freeze()` moves it out of the cyclic garbage
    collector's reach, so each full collection afterwards (Python's own as objects pile up, and pytest's five at
    the end of the session, where it looks for exceptions raised in finalizers) walks only what the tests made.
    Objects are still freed by their reference counts as before; only cycles among the frozen are never freed."""
    gc.freeze()


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


# What a test's browser may have stored for a site, cleared after each test (CDP Storage.clearDataForOrigin): the
# page's localStorage (the guided tour's "seen"), cookies, and what a site can store besides. Not the HTTP cache
# or the compiled-code cache, which a returning visitor's browser keeps too.
SITE_STORAGE = "cookies,local_storage,indexeddb,cache_storage,service_workers,file_systems,websql"


@pytest.fixture(scope="session")
def browser_profile(playwright, browser_type_launch_args, tmp_path_factory):
    """One Chromium profile on disk for this test process: its HTTP cache and V8's compiled-code cache are kept
    from one test's page to the next, as in a visitor's browser. A fresh incognito context per test (pytest-
    playwright's `context`) compiles Gradio's and plotly's scripts anew on every load: measured here, 3.1 s of
    Chromium CPU per load of the app against 1.6-1.9 s with the profile kept. Its first tab stays open (a
    persistent context's own), holding the CDP session that clears each test's storage."""
    profile = playwright.chromium.launch_persistent_context(tmp_path_factory.mktemp("chromium-profile"),
                                                            **browser_type_launch_args)
    profile.add_init_script(QUEUE_LOG_JS)
    keeper = profile.pages[0] if profile.pages else profile.new_page()
    yield profile, keeper, profile.new_cdp_session(keeper)
    profile.close()


# What a test's pages logged (console errors and warnings, uncaught errors, failed requests), with the seconds
# since the test's context opened: kept on the test's item and shown in a failed browser test's report.
PAGE_LOG = pytest.StashKey[list]()

# Every page notes, in itself, its requests to Gradio's queue: each event joined (its function's index) and each
# stream of answers opened and how its request ended (a stream the page closes ends as an AbortError). Read only
# for a failed browser test's report: kept in the page, it costs a passing test nothing on the Python side.
QUEUE_LOG_JS = """(() => {
  const log = window.iiQueueLog = [];
  const t0 = performance.now();
  const note = (line) => {
    log.push(`${((performance.now() - t0) / 1000).toFixed(2)} s  ${line}`);
    if (log.length > 200) log.shift();
  };
  const fetch0 = window.fetch;
  window.fetch = function (input, init) {
    const url = String((input && input.url) || input);
    const stream = url.includes('/queue/data');
    if (url.includes('/queue/join')) {
      let fn = '?';
      try { fn = JSON.parse(init.body).fn_index; } catch (e) { /* not JSON: the line says '?' */ }
      note(`event joined: fn_index ${fn}`);
    } else if (stream) {
      note('stream of answers opened');
    }
    const reply = fetch0.apply(this, arguments);
    if (stream) {
      reply.then((r) => note(`stream answered: HTTP ${r.status}`), (e) => note(`stream ended: ${e && e.name}`));
    }
    return reply;
  };
})();"""


@pytest.fixture
def context(browser_profile, request):
    """The browser context of a test's `page` (pytest-playwright's fixture name): the kept profile, with nothing
    stored for any site, as a first visit finds it. After the test, its pages are closed and what they stored
    for their sites is cleared. A test that needs two browsers that share nothing takes pytest-playwright's
    `browser` and opens incognito contexts (`browser.new_context()`)."""
    import time

    profile, keeper, cdp = browser_profile
    origins: set[str] = set()  # of every page the test opened, closed ones too: each navigation's site
    log = request.node.stash.setdefault(PAGE_LOG, [])
    t0 = time.monotonic()
    note = lambda line: log.append(f"{time.monotonic() - t0:7.2f} s  {line}")  # noqa: E731

    def watch(page) -> None:
        page.on("framenavigated", lambda frame: origins.add(_origin(frame.url)) if frame.parent_frame is None else None)
        page.on("console", lambda m: note(f"console {m.type}: {m.text[:300]}") if m.type in ("error", "warning")
                else None)
        page.on("pageerror", lambda e: note(f"uncaught: {str(e)[:300]}"))
        page.on("requestfailed", lambda r: note(f"request failed: {r.method} {r.url[:160]} ({r.failure})"))

    profile.on("page", watch)
    try:
        yield profile
    finally:
        profile.remove_listener("page", watch)
        for page in profile.pages:
            if page is not keeper:
                page.close()
        for origin in sorted(o for o in origins if o.startswith("http")):
            cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": SITE_STORAGE})


def _queue_logs(item) -> str:
    """The queue log (QUEUE_LOG_JS) of each page of a failed test's context, read from the pages still open."""
    context = item.funcargs.get("context")
    out = []
    for page in getattr(context, "pages", []):
        if not page.url.startswith("http"):
            continue
        try:
            lines = page.evaluate("window.iiQueueLog || []")
        except Exception as e:  # noqa: BLE001 (a crashed or closed page: say so, the report goes on)
            lines = [f"(could not read it: {e!r:.200})"]
        out.append(f"page {page.url}:\n" + "\n".join(lines[-60:]))
    return "\n".join(out) or "no page open"


def _origin(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@pytest.fixture(scope="session")
def default_model():
    """The real embedded default model (SmolLM2-135M-Instruct, fp32), loaded once per test run: every test that
    needs it in this process takes this one."""
    from inspector.models.loader import load_model

    return load_model()


@pytest.fixture(scope="session")
def gemma3_270m():
    """The real Gemma 3 270M (`--model gemma3-270m`), loaded once per test process (about 8 s: its 262,144-token
    tokenizer and its weights laid out): tests/real_model/test_gemma3_real.py and test_heads_real.py take this
    one, as every test that needs the default model takes `default_model`. Here, not in tests/support/, so that
    it is one fixture for both files (a fixture imported into two files is two fixtures, each built)."""
    from inspector.models.loader import load_model

    return load_model("gemma3-270m")


@pytest.fixture(scope="session")
def app_demo(default_model):
    """The app over the default model, served in this process: one for the whole test run in each worker that
    runs a unit of the files using it (DEFAULT_APP_UNIT, DEFAULT_APP_SECOND_UNIT). Each browser test opens it in
    a fresh page, so in a session of its own; the API fuzz's cases on the default model put their caps on it
    while they run."""
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
def space_app(tmp_path_factory):
    """The Space bundle's `python app.py`, installed in its own venv and started as Spaces does
    (tests/support/space_app.py): one for the whole test run, shared by tests/served/test_space_e2e.py and
    tests/served/test_load.py (SAME_WORKER). Here, not in tests/support/, so that it is one fixture for both."""
    from tests.support.space_app import serve_space

    with serve_space(tmp_path_factory.mktemp("space")) as app:
        yield app


@pytest.fixture(scope="session")
def app_url(app_demo) -> str:
    from tests.support.ui_server import ARTIFACTS

    ARTIFACTS.mkdir(exist_ok=True)
    return app_demo.local_url


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A browser test that failed gets, in its report, the stacks of this process's threads when it failed (the
    default app is served in this process, so a page that waited in vain shows where its answer was), Gradio's
    queue per browser session (an event never received, or an answer made and never sent), and what its pages
    logged (console errors, uncaught errors, failed requests)."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and item.get_closest_marker("browser") is not None:
        from tests.support.ui_server import queue_state, thread_stacks

        report.sections.append(("threads of the test process (and its served app) after the failure", thread_stacks()))
        report.sections.append(("Gradio's queue of the apps served in this process, after the failure", queue_state()))
        log = item.stash.get(PAGE_LOG, [])
        report.sections.append(("what the test's pages logged (the last 80 lines)", "\n".join(log[-80:]) or "nothing"))
        report.sections.append(("each page's requests to Gradio's queue (seconds since the page opened)",
                                _queue_logs(item)))
