"""`weave serve` run by a checker script, so that it can kill and restart it mid-run."""

import shlex
import signal
import subprocess
import time


class Server:
    def __init__(self, cmd):
        self.cmd = shlex.split(cmd)
        self.proc = None

    def start(self):
        """Starts the server; returns its URL once it takes requests."""
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("listening "), f"server said {line!r}"
        return "http://" + line.split()[1]

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


def wait_for(what, fn, timeout_s, every_s=0.5, explain=None):
    """Polls ``fn`` until it returns something true (and returns that), or fails; ``explain``
    (if given) says what the state was when it timed out, so a failure in CI can be read."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(every_s)
    state = f"\n{explain()}" if explain else ""
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}{state}")
