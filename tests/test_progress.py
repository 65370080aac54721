"""The progress bars of long phases (core/progress.py): drawn on a terminal, quiet in tests, pipes and logs, except
training's, which a log shows every 30 s."""

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

from conftest import ROOT

SCRIPT = """
import sys, time
sys.path.insert(0, sys.argv[1])
from core import progress
with progress.bar(4, "eval: test bound", unit="image") as bar:
    for _ in range(4):
        time.sleep(0.2)
        bar.update(1)
with progress.bar(2, "train", unit="step", in_logs=True) as bar:
    bar.update(2)
"""


def run(on_terminal: bool) -> str:
    """The stderr of SCRIPT, on a pseudo-terminal or a pipe."""
    if not on_terminal:
        cmd = [sys.executable, "-c", SCRIPT, ROOT]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stderr
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a new pty is 0 columns wide
    p = subprocess.Popen([sys.executable, "-c", SCRIPT, ROOT], stderr=follower, stdout=subprocess.DEVNULL)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=60)
    os.close(leader)
    return out.decode(errors="replace")


def test_a_phase_is_named_with_its_progress_on_a_terminal_and_quiet_in_a_pipe():
    shown = run(on_terminal=True)
    assert "eval: test bound: 100%" in shown and "4/4" in shown and "image/s" in shown, shown
    assert "train: 100%" in shown
    piped = run(on_terminal=False)
    assert "eval: test bound" not in piped  # quiet in a pipe or a log
    assert "train: 100%" in piped  # training's bar still marks a log
