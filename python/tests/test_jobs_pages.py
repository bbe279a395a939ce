"""The server answers a job list a page at a time and names the next page in a ``Link``
header; ``jobs()`` follows the pages to the end and returns every job once."""

import unittest
import urllib.parse

from weave_client import WeaveClient
from stub_http import JsonHandler, serve

JOBS = [f"j{i}" for i in range(5)]


class Pages(JsonHandler):
    """Lists `JOBS` two at a time after the `after` cursor, as the server does."""

    paths = []

    def do_GET(self):
        Pages.paths.append(self.path)
        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        after = query.get("after", [""])[0]
        rest = [j for j in JOBS if j > after]
        page, more = rest[:2], len(rest) > 2
        link = [("Link", f'</v1/jobs?after={page[-1]}&limit=2>; rel="next"')] if more else []
        self.send_json(200, [{"id": j} for j in page], link)


class JobPagesTest(unittest.TestCase):
    def test_every_page_is_followed_and_every_job_returned_once(self):
        Pages.paths = []
        server, url = serve(Pages)
        self.addCleanup(server.shutdown)
        jobs = WeaveClient(url, "t").jobs()
        self.assertEqual([j["id"] for j in jobs], JOBS)
        self.assertEqual(
            Pages.paths, ["/v1/jobs", "/v1/jobs?after=j1&limit=2", "/v1/jobs?after=j3&limit=2"]
        )


if __name__ == "__main__":
    unittest.main()
