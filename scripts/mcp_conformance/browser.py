#!/usr/bin/env python3
"""A stand-in for a person's browser during `codeloop mcp login`: opens the authorization URL (argv[1]), and
follows its redirects the way a browser would until one lands back on codeloop's loopback callback. The
conformance suite's authorization servers approve at once, so there is nothing to click."""
import sys, urllib.error, urllib.parse, urllib.request


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def main():
    url = sys.argv[1]
    opener = urllib.request.build_opener(NoRedirect)
    for _ in range(10):
        try:
            with opener.open(url, timeout=20) as response:
                response.read()
                return 0
        except urllib.error.HTTPError as redirect:
            location = redirect.headers.get("Location")
            if redirect.code not in (301, 302, 303, 307, 308) or not location:
                print(f"browser: {url} answered {redirect.code}", file=sys.stderr)
                return 1
            url = urllib.parse.urljoin(url, location)
    print("browser: too many redirects", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
