"""Headless Chromium driven over its DevTools protocol, for the report tests.

Debian's `chromium` is started with --remote-debugging-port=0 (it prints the
browser's websocket URL on stderr) and a new empty profile; Debian's
python3-websocket (websocket-client) carries the protocol's JSON messages. One
page target is attached in flat mode, so every command and event travels over
the one socket with a sessionId. While a page is open, every console message,
uncaught exception, log entry and network request is recorded.
"""
import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

import websocket

# Flags that work as root in a container, and keep the browser itself off the network.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--disable-dev-shm-usage", "--mute-audio",
         "--no-default-browser-check", "--host-resolver-rules=MAP * ~NOTFOUND", "--remote-debugging-port=0",
         "--window-size=1400,1000"]


def find_chromium():
    """The browser binary itself (Debian's /usr/bin/chromium wrapper adds extension flags), or None."""
    for path in ("/usr/lib/chromium/chromium", shutil.which("chromium") or "", shutil.which("chromium-browser") or ""):
        if path and os.access(path, os.X_OK):
            return path
    return None


class BrowserError(Exception):
    pass


class Browser:
    def __init__(self, binary=None, timeout=30):
        self.binary = binary or find_chromium()
        if self.binary is None:
            raise BrowserError("chromium is not installed")
        self.profile = tempfile.mkdtemp(prefix="attnlab_chromium_")
        self.process = subprocess.Popen([self.binary] + FLAGS + [f"--user-data-dir={self.profile}", "about:blank"],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = None
        deadline = time.monotonic() + timeout
        lines = []
        while time.monotonic() < deadline:
            line = self.process.stderr.readline().decode("utf-8", "replace")
            if not line:
                break
            lines.append(line)
            match = re.search(r"DevTools listening on (ws://\S+)", line)
            if match:
                url = match.group(1)
                break
        if url is None:
            self.close()
            raise BrowserError("chromium printed no DevTools URL:\n" + "".join(lines[-20:]))
        # Drain the rest of stderr so that the browser never blocks on a full pipe.
        self._drain = threading.Thread(target=self.process.stderr.read, daemon=True)
        self._drain.start()
        self.socket = websocket.create_connection(url, timeout=timeout, suppress_origin=True)
        self.next_id = 0
        self.events = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(domain + ".enable", session=True)

    def close(self):
        try:
            if getattr(self, "socket", None):
                self.socket.close()
        finally:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            if getattr(self, "_drain", None):
                self._drain.join(10)
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call(self, method, session=False, timeout=30, **params):
        """Sends one command (to the page when session is true) and returns its result."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        self.socket.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = json.loads(self.socket.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)
        raise BrowserError(f"{method}: no reply in {timeout} s")

    def pump(self, seconds):
        """Collects events for `seconds`."""
        deadline = time.monotonic() + seconds
        self.socket.settimeout(0.05)
        try:
            while time.monotonic() < deadline:
                try:
                    reply = json.loads(self.socket.recv())
                except websocket.WebSocketTimeoutException:
                    continue
                if "method" in reply:
                    self.events.append(reply)
        finally:
            self.socket.settimeout(30)

    def open(self, path, timeout=30):
        """Loads a local file and waits for its load event; the event log starts afresh."""
        self.events = []
        url = "file://" + os.path.abspath(path)
        self.call("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(e["method"] == "Page.loadEventFired" for e in self.events):
                return url
            self.pump(0.1)
        raise BrowserError(f"{path}: no load event in {timeout} s")

    def evaluate(self, expression, timeout=30):
        """The JSON value of a JavaScript expression (promises are awaited)."""
        result = self.call("Runtime.evaluate", session=True, timeout=timeout, expression=expression,
                           returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"JavaScript exception: {text}")
        return result["result"].get("value")

    def wait_for(self, expression, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            self.pump(0.05)
        raise BrowserError(f"timed out waiting for {expression}")

    def mouse(self, kind, x, y, button="none", clicks=0):
        self.call("Input.dispatchMouseEvent", session=True, type=kind, x=x, y=y, button=button, clickCount=clicks)

    def hover(self, x, y):
        self.mouse("mouseMoved", x, y)

    def click(self, x, y):
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y, "left", 1)
        self.mouse("mouseReleased", x, y, "left", 1)

    def screenshot(self, path, width=1400, height=None):
        """A PNG of the page's top (height None: the whole page)."""
        full = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        height = min(height or full[1], full[1])
        self.evaluate("window.scrollTo(0, 0)")
        shot = self.call("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))

    def problems(self, page_url):
        """Console errors, exceptions, error log entries and every network request
        other than the page itself (and data:/blob: URLs), as lines of text."""
        out = []
        for e in self.events:
            method, params = e["method"], e.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.append("console." + params["type"] + ": " +
                           " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                out.append("exception: " + (details.get("exception", {}).get("description") or details.get("text", "")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                out.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".strip())
            elif method == "Network.requestWillBeSent":
                url = params.get("request", {}).get("url", "")
                if url != page_url and not url.startswith(("data:", "blob:", "about:")):
                    out.append("network request: " + url)
            elif method == "Network.loadingFailed":
                out.append(f"network failure: {params.get('errorText')} ({params.get('type')})")
        return out


def main(argv=None):
    """cdp.py PAGE.html OUT.png [HEIGHT]: a screenshot of a page's top (docs/img/report_*.png)."""
    import sys
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        print("usage: cdp.py PAGE.html OUT.png [HEIGHT]", file=sys.stderr)
        return 2
    with Browser() as browser:
        url = browser.open(args[0])
        browser.wait_for("Array.from(document.querySelectorAll('.plotly-graph-div')).every(g => g._fullLayout)")
        browser.pump(0.5)
        problems = browser.problems(url)
        browser.screenshot(args[1], height=int(args[2]) if len(args) == 3 else None)
    for line in problems:
        print(f"cdp.py: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
