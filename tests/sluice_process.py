"""Starting and stopping `sluice` processes from the Python tests: run one, wait for the line that
says it is ready (a regex whose first group is returned, e.g. its URL), and keep draining its
output so a full pipe never blocks it; stop it with a signal, killing it if it lingers."""

import re
import signal
import subprocess
import threading
import time


def start(binary, args, pattern, timeout=60):
    p = subprocess.Popen([binary, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + timeout
    seen = ""
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        seen += line
        m = re.search(pattern, line)
        if m:
            threading.Thread(target=p.stdout.read, daemon=True).start()
            return p, m.group(1)
    p.kill()
    raise AssertionError(f"{args[0]} did not start: {seen}")


def stop(p, sig=signal.SIGTERM, timeout=30):
    """Sends `sig` (SIGTERM: a graceful stop) and waits; kills it if it has not exited by then."""
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    # The drain thread's read ends at the exited process's end of output; closing waits for it
    # (the buffer's lock), so no pipe is left for the garbage collector to warn about.
    if p.stdout:
        p.stdout.close()
