"""Screenshot a finished search's study in optuna-dashboard with headless Chromium (for the
README): `python scripts/dashboard_screenshot.py RUN_DIR [OUT.png] [--page PATH]`.

Starts `optuna-dashboard` on the run's study.db and artifacts (localhost, a free port), waits
until it answers, and lets Chromium (Debian package `chromium`) render the study page.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out", type=Path, nargs="?", default=Path("docs/figures/dashboard.png"))
    parser.add_argument("--page", default="", help="path under the study page, e.g. /analytics or /trial-table")
    parser.add_argument("--size", default="1600,1000")
    args = parser.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        sys.exit("no Chromium found (Debian: apt-get install chromium)")
    run_dir = args.run_dir.resolve()
    port = free_port()
    exe = shutil.which("optuna-dashboard") or str(Path(sys.executable).with_name("optuna-dashboard"))
    server = subprocess.Popen(
        [
            exe,
            f"sqlite:///{run_dir / 'study.db'}",
            "--artifact-dir",
            str(run_dir / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--quiet",
        ]
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                with urllib.request.urlopen(base + "/api/studies", timeout=5) as r:
                    studies = json.loads(r.read())["study_summaries"]
                break
            except OSError:
                time.sleep(0.5)
        else:
            sys.exit("optuna-dashboard did not start")
        url = f"{base}/dashboard/studies/{studies[0]['study_id']}{args.page}"
        args.out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--window-size={args.size}",
                "--virtual-time-budget=15000",
                f"--screenshot={args.out.resolve()}",
                url,
            ],
            check=True,
            capture_output=True,
            timeout=180,
        )
        print(f"{url} → {args.out}")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
