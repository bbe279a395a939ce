"""The phase gate makes Weave's phase span the current trace context. A fake server answers
the gate; no Weave server needed. Run like test_ray_support.py."""

import unittest

from weave_client import WeaveClient, current_traceparent
from stub_http import JsonHandler, serve

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{SPAN}-01"


class Gate(JsonHandler):
    traced = True

    def do_POST(self):
        self.read_body()
        if self.path.split("?")[0].endswith("/start"):
            body = {"status": "granted"}
            if Gate.traced:
                body["traceparent"] = TRACEPARENT
        else:
            body = {"id": "j", "state": "running"}
        self.send_json(200, body)


class TracingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server, url = serve(Gate)
        cls.client = WeaveClient(url, "t")

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
