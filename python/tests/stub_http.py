"""A stub of the server for the client's tests: a handler that answers JSON, and a threaded
server on a free local port (what the keep-alive, paging, rate-limit and tracing tests share)."""

import http.server
import json
import threading


class JsonHandler(http.server.BaseHTTPRequestHandler):
    def send_json(self, status, obj, headers=()):
        body = json.dumps(obj).encode()
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_body(self):
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def log_message(self, *args):
        pass


def serve(handler):
    """Serves `handler` on a free local port from a thread; returns the server and its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
