"""A borrower's client side of a loan (``weave serve --lending``): the return goes to the job's
loan endpoint with its admission, and heartbeats that name a loan reach ``on_loan``."""

import threading
import unittest

from weave_client import WeaveClient


class Recording(WeaveClient):
    def __init__(self, beat_answer=None):
        super().__init__("http://unused")
        self.sent = []
        self.beat_answer = beat_answer or {"status": "ok"}
        self.beats = 0
        self.second_beat = threading.Event()

    def _request(self, method, path, body=None, retry=False):
        self.sent.append((method, path, body))
        if path.endswith("/heartbeat"):
            self.beats += 1
            if self.beats >= 2:
                self.second_beat.set()
            return 200, self.beat_answer
        return 200, {"id": "b"}


class LoanTest(unittest.TestCase):
    def test_a_return_names_the_admission_if_given(self):
        c = Recording()
        c.return_loan("b", 7)
        c.return_loan("b")
        self.assertEqual(c.sent, [("POST", "/v1/jobs/b/loan/return", {"uid": 7}),
                                  ("POST", "/v1/jobs/b/loan/return", {})])

    def test_heartbeats_naming_a_loan_reach_on_loan_and_others_do_not(self):
        loan = {"nodes": ["r0"], "iteration": 3, "load_in_s": -1.0, "reclaim_in_s": 0.0}
        heard, got = [], threading.Event()

        def on_loan(x):
            heard.append(x)
            got.set()

        with Recording({"status": "ok", "loan": loan}).keepalive("b", interval_s=0.01, on_loan=on_loan):
            self.assertTrue(got.wait(5))
        self.assertEqual(heard[0], loan)
        # A heartbeat without a loan: on_loan is not called. Decided once a second heartbeat
        # has gone out, so the first one's answer was handled (not after a guessed sleep).
        quiet, plain = [], Recording()
        with plain.keepalive("b", interval_s=0.01, on_loan=quiet.append):
            self.assertTrue(plain.second_beat.wait(5), "no heartbeat was sent")
        self.assertEqual(quiet, [])


if __name__ == "__main__":
    unittest.main()
