#!/usr/bin/env python3
"""Loads a fresh planner's /calibration in headless Chromium.

  check_calibration_page.py --planner BIN --root REPO [--chromium BIN]

Starts headroom-planner on loopback (free ports, a :memory: store), loads
/calibration and /calibration?include_simulated=1 with `chromium --headless
--dump-dom`, and requires in the rendered DOM the plot (an <svg> with run
points), the regime section, the simulated-runs section and a legend per
table, and no console message (Chromium logs each as INFO:CONSOLE on
stderr). A page that logs to the console is loaded first to show the
capture works. Without Chromium it exits 77 (skipped), except under
CI=true, where it fails.
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(chromium, url, profile, extra=()):
    """The rendered DOM and the console messages of `url`."""
    result = subprocess.run(
        [chromium, "--headless", "--disable-gpu", "--no-sandbox",
         "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=2000",
         *extra, "--dump-dom", url],
        capture_output=True, text=True, timeout=30)
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    return result.returncode, result.stdout, console


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--planner", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--chromium", default="")
    args = parser.parse_args()
    chromium = args.chromium or shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        if os.environ.get("CI") == "true":
            print("check_calibration_page: chromium not found, and CI=true requires it "
                  "(scripts/install-deps.sh installs it)")
            return 1
        print("check_calibration_page: SKIPPED: chromium not found "
              "(apt-get install chromium, or scripts/install-deps.sh)")
        return SKIP

    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        # The console capture itself, on a page that logs.
        probe = os.path.join(tmp, "probe.html")
        with open(probe, "w") as f:
            f.write("<script>console.error('headroom-console-probe')</script>")
        _, _, console = load(chromium, f"file://{probe}", os.path.join(tmp, "profile"))
        if not any("headroom-console-probe" in line for line in console):
            print("check_calibration_page: Chromium's console messages are not on stderr "
                  "(--enable-logging=stderr): cannot check for console errors")
            return 1

        http_port = free_port()
        planner = subprocess.Popen(
            [args.planner, f"--listen=127.0.0.1:{free_port()}",
             f"--http_listen=127.0.0.1:{http_port}", "--db=:memory:",
             f"--models_dir={args.root}/models",
             f"--runs={args.root}/data/memory-runs.jsonl"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "planner.log"), "w"))
        try:
            base = f"http://127.0.0.1:{http_port}"
            deadline = time.time() + 60
            while True:
                if planner.poll() is not None:
                    print(f"planner exited with {planner.returncode}: "
                          + open(os.path.join(tmp, "planner.log")).read()[-2000:])
                    return 1
                try:
                    urllib.request.urlopen(base + "/healthz", timeout=2).read()
                    break
                except OSError:
                    if time.time() > deadline:
                        print("planner did not become healthy in 60 s")
                        return 1
                    time.sleep(0.1)
            for path in ("/calibration", "/calibration?include_simulated=1"):
                rc, dom, console = load(chromium, base + path, os.path.join(tmp, "profile"))
                if rc != 0:
                    errors.append(f"{path}: chromium exited with {rc}")
                for line in console:
                    errors.append(f"{path}: console: {line}")
                svg = re.search(r'<svg[^>]*id="calibration-plot"[^>]*>(.*?)</svg>', dom, re.S)
                if not svg:
                    errors.append(f"{path}: no <svg id=\"calibration-plot\"> in the DOM")
                else:
                    width = re.search(r'width="(\d+)"', svg.group(0))
                    if not width or int(width.group(1)) < 720:
                        errors.append(f"{path}: the plot is narrower than 720 px")
                    points = len(re.findall(r'class="run"', svg.group(1)))
                    if points < 100:
                        errors.append(f"{path}: the plot has {points} run points, "
                                      "expected the shipped runs' (over 100)")
                    if "not drawn" not in svg.group(1):
                        errors.append(f"{path}: the plot's legend does not say which "
                                      "runs are not drawn")
                # In a 1280-px window the page scrolls only vertically: the
                # page, saved with a script that writes its scroll width into
                # the title, laid out at that width.
                html = urllib.request.urlopen(base + path, timeout=30).read().decode()
                measured = os.path.join(tmp, "measured.html")
                with open(measured, "w") as f:
                    f.write(html.replace("</body>", "<script>document.title="
                                         "'scroll-width:'+document.documentElement."
                                         "scrollWidth</script></body>"))
                _, measured_dom, _ = load(chromium, f"file://{measured}",
                                          os.path.join(tmp, "profile"),
                                          ("--window-size=1280,900",))
                scroll = re.search(r"<title>scroll-width:(\d+)</title>", measured_dom)
                if not scroll or int(scroll.group(1)) > 1280:
                    errors.append(f"{path}: wider than a 1280-px window (scroll width "
                                  f"{scroll.group(1) if scroll else 'not measured'})")
                for needle, what in (
                        ('<h2 id="regimes">', "the regime section"),
                        ('id="regime-table"', "the regime table"),
                        ('<h2 id="simulated">Simulated runs (', "the simulated-runs heading"),
                        ('<dl class="legend">', "a column legend"),
                        ('id="col-4">under</dt>', "the definition of under"),
                        ('id="col-7">agree</dt>', "the definition of agree")):
                    if needle not in dom:
                        errors.append(f"{path}: no {what} ({needle}) in the DOM")
        finally:
            planner.terminate()
            planner.wait(timeout=30)
    for error in errors:
        print(error)
    if errors:
        return 1
    print("check_calibration_page: /calibration renders in headless Chromium: plot, "
          "regime and simulated sections, legends, no console messages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
