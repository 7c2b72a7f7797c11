"""What `tfdist ui` costs and how fast it answers.

Builds a private ``TFDIST_HOME`` with 1,000 finished jobs, a 20-trial study (by
the store's own API) and one running local job whose trainer counts loop
iterations per second, starts ``tfdist ui`` on it, and measures:

- ``GET /api/jobs`` with 1,000+ jobs: the median time of 10 calls and the body's size;
- in Debian's headless Chromium (skipped without chromium/chromedriver and selenium): the job
  list's load to rendered, and the time from a measurement stored to the study chart showing it
  (5 rounds);
- the cost to a running job: its iterations/s for ``--window`` seconds with no dashboard,
  then with the job's page open (live log, polling every second), and the CPU the
  ``tfdist ui`` process used meanwhile;
- peak RSS of ``tfdist ui`` (VmHWM) at the end.

Not a test: a shared 2-core machine moves these figures; compare within one run.

Usage:
    python benchmarks/bench_ui.py [--window 20]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_ROOT), str(_ROOT / "tests")]

from _ui_store import clone_jobs, make_study  # noqa: E402

from toolkit.jobs import JobSpec, JobState, JobStore, api  # noqa: E402

SPIN = '''import sys, time
end = time.monotonic() + float(sys.argv[1])
count, mark = 0, time.monotonic()
while time.monotonic() < end:
    count += 1
    if count % 20000 == 0 and time.monotonic() - mark >= 1.0:
        print(f"rate {count / (time.monotonic() - mark):.0f}", flush=True)
        count, mark = 0, time.monotonic()
'''


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rates(log: Path, since: int) -> list[float]:
    return [float(x) for x in re.findall(r"rate (\d+)", log.read_text()[since:])]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", type=float, default=20.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-ui-"))
    home = root / "home"
    store = JobStore(home)
    (root / "spin").mkdir()
    (root / "spin" / "__init__.py").write_text("")
    (root / "spin" / "task.py").write_text(SPIN)
    store.create("bulk", backend="local", spec={"trainingInput": {}})
    store.transition("bulk", JobState.FAILED, error="old")
    clone_jobs(store, "bulk", 999)
    make_study(store, "study-1", trials=20, job_dir=str(root / "study"))
    spec = JobSpec.from_dict({}, job_id="spin-1", overrides={
        "pythonModule": "spin.task", "packagePath": str(root / "spin"), "args": [str(4 * args.window + 30)]})
    api.submit(spec, home=home)
    env = {**os.environ, "TFDIST_HOME": str(home), "PYTHONPATH": str(_ROOT)}
    ui = subprocess.Popen([sys.executable, "-m", "toolkit", "ui", "--port", "0"], env=env, stderr=subprocess.PIPE,
                          text=True)
    try:
        assert ui.stderr is not None
        url = next(line.strip() for line in ui.stderr if "?token=" in line)
        base, token = url.split("/?token=")
        times, size = [], 0
        for _ in range(10):
            started = time.perf_counter()
            request = urllib.request.Request(base + "/api/jobs", headers={"Authorization": f"token {token}"})
            with urllib.request.urlopen(request) as answer:
                size = len(answer.read())
            times.append(time.perf_counter() - started)
        print(f"GET /api/jobs, {len(store.names())} jobs: median {statistics.median(times) * 1000:.0f} ms "
              f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}), {size / 1024:.0f} KiB")
        while api.describe("spin-1", home=home).state is not JobState.RUNNING:
            time.sleep(0.2)
        log = home / "jobs" / "spin-1" / "logs" / "master-0.log"
        while not log.exists() or "rate" not in log.read_text():
            time.sleep(0.2)
        mark = len(log.read_text())
        time.sleep(args.window)
        alone = _rates(log, mark)
        _browser(base, token, store, log, alone, args.window, ui.pid)
        with open(f"/proc/{ui.pid}/status") as fh:
            peak = next(line for line in fh if line.startswith("VmHWM")).split(":")[1].strip()
        print(f"peak RSS of tfdist ui: {peak}")
    finally:
        ui.send_signal(signal.SIGTERM)
        ui.wait(timeout=15)
        if not api.describe("spin-1", home=home).is_final:
            api.cancel("spin-1", home=home)
        shutil.rmtree(root, ignore_errors=True)
    return 0


def _browser(base: str, token: str, store: JobStore, log: Path, alone: list[float], window: float,
             ui_pid: int) -> None:
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
    except ImportError:
        chromium = None
    if not (chromium and driver_path):
        print("no chromium/chromedriver/selenium: browser figures skipped")
        return
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=webdriver.ChromeService(driver_path), options=options)
    try:
        driver.get(f"{base}/?token={token}")
        loads = []
        for _ in range(3):
            driver.get(base + "/")
            while not driver.execute_script("return window.tfdistTimings && window.tfdistTimings.loadedAt"):
                time.sleep(0.05)
            loads.append(driver.execute_script("return window.tfdistTimings"))
        print("job list in the browser (load to rendered, API, render; ms): "
              + "; ".join(f"{t['loadedAt']:.0f}, {t['apiMs']:.0f}, {t['renderMs']:.0f}" for t in loads))
        driver.get(base + "/jobs/study-1/study")
        while not driver.execute_script("return window.tfdistChart && window.tfdistChart.trials.length === 20"):
            time.sleep(0.05)
        latencies = []
        for i in range(5):
            curve = store.get("study-1-trial-20").details["measurements"]
            value = round(2.0 + i / 10, 3)
            stored = time.monotonic()
            store.update_details("study-1-trial-20", measurements=[*curve, {"trainingStep": 100 + i,
                                                                            "objectiveValue": value}])
            while not driver.execute_script(f"return window.tfdistChart.chart.data[20].includes({value})"):
                time.sleep(0.02)
            latencies.append(time.monotonic() - stored)
        print("study chart, measurement stored -> on the chart (s): " + ", ".join(f"{x:.2f}" for x in latencies))
        driver.get(base + "/jobs/spin-1")
        mark, cpu = len(log.read_text()), _cpu_seconds(ui_pid)
        time.sleep(window)
        watched, used = _rates(log, mark), _cpu_seconds(ui_pid) - cpu
        print(f"running job, iterations/s: alone median {statistics.median(alone):.0f} ({len(alone)} s), with its "
              f"page open median {statistics.median(watched):.0f} ({len(watched)} s), ratio "
              f"{statistics.median(watched) / statistics.median(alone):.3f}; tfdist ui used {used:.2f} CPU-s "
              f"in {window:.0f} s ({100 * used / window:.1f}% of a core)")
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
