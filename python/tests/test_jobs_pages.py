"""The server answers a job list a page at a time and names the next page in a ``Link``
header; ``jobs()`` follows the pages to the end and returns every job once."""

import http.server
import json
import threading
import unittest
import urllib.parse

from weave_client import WeaveClient

JOBS = [f"j{i}" for i in range(5)]


class Pages(http.server.BaseHTTPRequestHandler):
    """Lists `JOBS` two at a time after the `after` cursor, as the server does."""

    paths = []

    def do_GET(self):
        Pages.paths.append(self.path)
        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        after = query.get("after", [""])[0]
        rest = [j for j in JOBS if j > after]
        page, more = rest[:2], len(rest) > 2
        body = json.dumps([{"id": j} for j in page]).encode()
        self.send_response(200)
        if more:
            self.send_header("Link", f'</v1/jobs?after={page[-1]}&limit=2>; rel="next"')
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class JobPagesTest(unittest.TestCase):
    def test_every_page_is_followed_and_every_job_returned_once(self):
        Pages.paths = []
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.shutdown)
        jobs = WeaveClient(f"http://127.0.0.1:{server.server_address[1]}", "t").jobs()
        self.assertEqual([j["id"] for j in jobs], JOBS)
        self.assertEqual(
            Pages.paths, ["/v1/jobs", "/v1/jobs?after=j1&limit=2", "/v1/jobs?after=j3&limit=2"]
        )


if __name__ == "__main__":
    unittest.main()
