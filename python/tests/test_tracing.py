"""The phase gate makes Weave's phase span the current trace context. A fake server answers
the gate; no Weave server needed. Run like test_ray_support.py."""

import http.server
import json
import threading
import unittest

from weave_client import WeaveClient, current_traceparent

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{SPAN}-01"


class Gate(http.server.BaseHTTPRequestHandler):
    traced = True

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path.split("?")[0].endswith("/start"):
            body = {"status": "granted"}
            if Gate.traced:
                body["traceparent"] = TRACEPARENT
        else:
            body = {"id": "j", "state": "running"}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class TracingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Gate)
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.client = WeaveClient(f"http://127.0.0.1:{cls.server.server_port}", "t")

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()

    def setUp(self):
        Gate.traced = True

    def test_the_phase_span_is_current_inside_the_gate_only(self):
        self.assertIsNone(current_traceparent())
        with self.client.phase("j", "rollout", 0):
            self.assertEqual(current_traceparent(), TRACEPARENT)
        self.assertIsNone(current_traceparent())

    def test_no_trace_context_when_the_server_exports_none(self):
        Gate.traced = False
        with self.client.phase("j", "rollout", 0):
            self.assertIsNone(current_traceparent())

    def test_framework_spans_nest_under_the_phase_span(self):
        try:
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        except ImportError:
            self.skipTest("opentelemetry-sdk is not installed")
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("framework")
        with self.client.phase("j", "train", 3):
            with tracer.start_as_current_span("update_actor"):
                pass
        (span,) = exporter.get_finished_spans()
        self.assertEqual(format(span.context.trace_id, "032x"), TRACE)
        self.assertEqual(format(span.parent.span_id, "016x"), SPAN)


if __name__ == "__main__":
    unittest.main()
