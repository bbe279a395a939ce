"""A client whose server is a stub: it records the finishes sent and answers every phase start
with what ``grant`` returns for the path (a 200 with a grant, or a 202)."""

from weave_client import WeaveClient


class FakeGate(WeaveClient):
    def __init__(self):
        super().__init__("http://unused")
        self.finished = []

    def grant(self, path):
        """(status, body) for a phase start at ``path``."""
        raise NotImplementedError

    def _request(self, method, path, body=None, retry=False):
        if path.endswith("/finish"):
            self.finished.append((path, body))
            return 200, {"job": {}}
        return self.grant(path)
