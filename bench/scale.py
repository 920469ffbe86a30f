"""Several bot processes on one PostgreSQL behind nginx: throughput 1 vs 3 processes, and failover.

Starts a throwaway PostgreSQL (or uses ``--db-url``; each run gets a fresh schema in it), N ``python app.py``
processes in Telegram webhook mode (tests/fakes/cluster.py), nginx in front of them (a generated
nginx.conf in a temporary folder, nginx in the foreground on a free port, upstream = the bots' webhook
ports), the fake Bot API posting every update to nginx (one chat's updates in order, redelivered when
a delivery fails, as Telegram does) and the fake model answering ``echo: <text>`` after ``--latency``.

1. **Throughput**, 1 then 3 processes, interleaved ``--runs`` times: ``--chats`` chats send
   ``--messages`` numbered messages each at once; turns per second from the first message to the last
   answer (median of the runs), and the CPU the bots used per turn. The model is quick, so the bots'
   CPU is the limit: the goal is 3 processes >= 2.5x one, which needs 3 free cores. The fakes and
   PostgreSQL run on the same machine and take their share.
2. **Failover** (webhook): 3 processes under a steady load; ``kill -9`` of one mid-load; then every
   message is counted: sent / answered once / lost / duplicated / out of order (goal 0, 0, 0).
3. **Failover** (polling): 2 processes polling; ``kill -9`` of the one that polls; the time until another
   polls, and the same counts.

nginx is Debian's package: when missing and we are root, ``apt-get install nginx-light`` is tried; where
it cannot be installed, one line says so and the fake Bot API spreads the updates over the processes
itself (round robin) instead.

Run: ``python bench/scale.py`` (about 3-5 minutes), ``--db-url postgresql://…`` for an existing database,
``--keep DIR`` to keep the bots' folders and logs, ``--only throughput|webhook|polling``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import ThrowawayPostgres, median, print_table, process_cpu  # noqa: E402
from tests.fakes.cluster import Cluster, free_port, fresh_schema, webhook_port_env_supported  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402
from tests.fakes.telegram_api import FakeTelegramAPI  # noqa: E402

NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    upstream longchat {{
{servers}
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port};
        location /telegram {{
            proxy_pass http://longchat;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_connect_timeout 2s;
            proxy_read_timeout 10s;
            proxy_next_upstream error timeout http_502 http_503;
        }}
    }}
}}
"""


def find_nginx() -> str | None:
    """nginx's path; installed with apt-get when missing and we are root; None (with a message) otherwise."""
    path = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if path:
        return path
    if os.getuid() == 0 and shutil.which("apt-get"):
        print("nginx is missing: apt-get install -y nginx-light …", file=sys.stderr)
        subprocess.run(["apt-get", "install", "-y", "nginx-light"], capture_output=True, timeout=600, check=False)
        path = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if not path:
        print("nginx is not installed and cannot be installed here (Debian: apt-get install nginx-light); "
              "the fake Bot API spreads the updates over the processes itself instead", file=sys.stderr)
    return path


@contextmanager
def nginx(binary: str, upstream_ports: list[int], folder: Path) -> Iterator[str]:
    """nginx in the foreground in front of ``upstream_ports``; yields the webhook URL."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    servers = "\n".join(f"        server 127.0.0.1:{p} max_fails=1 fail_timeout=10s;" for p in upstream_ports)
    conf = folder / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=folder, servers=servers, port=port), encoding="utf-8")
    proc = subprocess.Popen([binary, "-p", str(folder), "-e", str(folder / "error.log"), "-c", str(conf)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            import socket

            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nginx did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/telegram"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


class Run:
    """One cluster with its fakes, schema, nginx and folder."""

    def __init__(self, args: argparse.Namespace, db_url: str, name: str, processes: int, mode: str = "webhook",
                 latency: float = 0.0) -> None:
        self.args, self.db_url, self.name, self.processes, self.mode = args, db_url, name, processes, mode
        self.latency = latency
        self.stack = ExitStack()

    def __enter__(self) -> Cluster:
        stack = self.stack
        if self.args.keep:
            folder = Path(self.args.keep) / self.name
            folder.mkdir(parents=True, exist_ok=True)
        else:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"scale-{self.name}-")))
        api = stack.enter_context(FakeTelegramAPI(username="scale_bot"))
        llm = stack.enter_context(FakeOpenAIServer())
        llm.latency = self.latency
        url = stack.enter_context(fresh_schema(self.db_url))
        cluster = Cluster(folder, api, llm, url, processes=self.processes, mode=self.mode)
        if self.mode == "webhook":
            if self.args.nginx:
                cluster.route_webhooks([stack.enter_context(nginx(self.args.nginx, cluster.ports, folder / "nginx"))])
            else:
                cluster.route_webhooks()
        stack.callback(cluster.stop)
        cluster.start()
        return cluster

    def __exit__(self, *exc: object) -> None:
        self.stack.close()


def throughput(args: argparse.Namespace, db_url: str, processes: int, run: int) -> dict[str, float]:
    """Every chat sends its messages at once; turns per second until the last answer, and CPU per turn."""
    with Run(args, db_url, f"throughput-{processes}-{run}", processes, latency=args.latency) as cluster:
        for chat in range(args.chats):  # warm-up: every session exists, every process has run turns
            cluster.send(chat)
        if not cluster.wait_settled(timeout=120, quiet=0.5):
            raise RuntimeError(f"warm-up did not settle: {cluster.tally().describe()}")
        cpu_before = sum(process_cpu(pid) for pid in cluster.pids())
        fakes_before = process_cpu(os.getpid())
        cluster.sent.clear()
        started = time.monotonic()
        for _ in range(args.messages):
            for chat in range(args.chats):
                cluster.send(chat)
        settled = cluster.wait_settled(timeout=600, quiet=0.2)
        # the last answer's time: wait_settled returns after the quiet period
        elapsed = time.monotonic() - started - 0.2
        cpu = sum(process_cpu(pid) for pid in cluster.pids()) - cpu_before
        fakes = process_cpu(os.getpid()) - fakes_before
        result = cluster.tally()
    turns = args.chats * args.messages
    if not settled or not result.ok:
        print(f"  {processes} processes, run {run}: {result.describe()}", file=sys.stderr)
    return {"turns/s": turns / elapsed, "cpu ms/turn": cpu * 1000 / turns, "cores": cpu / elapsed,
            "fakes cores": fakes / elapsed, "ok": float(result.ok and settled)}


def webhook_failover(args: argparse.Namespace, db_url: str) -> dict[str, Any]:
    """3 processes under a steady load; kill -9 of one midway; count."""
    rng = random.Random(args.seed)
    with Run(args, db_url, "failover-webhook", 3, latency=args.failover_latency) as cluster:
        step = 1.0 / args.rate
        end = time.monotonic() + args.duration
        kill_at = time.monotonic() + args.duration / 2
        killed = False
        while time.monotonic() < end:
            cluster.send(rng.randrange(args.chats))
            time.sleep(step)
            if not killed and time.monotonic() >= kill_at:
                cluster.kill(1)
                killed = True
        settled = cluster.wait_settled(timeout=90, quiet=3)
        result = cluster.tally()
    return {**result.counts(), "settled": settled, "detail": result.describe()}


def polling_failover(args: argparse.Namespace, db_url: str) -> dict[str, Any]:
    """2 processes polling; kill -9 of the poller under load; takeover time and counts."""
    rng = random.Random(args.seed)
    with Run(args, db_url, "failover-polling", 2, mode="polling", latency=args.failover_latency) as cluster:
        step = 1.0 / args.rate
        end = time.monotonic() + args.duration / 2
        while time.monotonic() < end:
            cluster.send(rng.randrange(args.chats))
            time.sleep(step)
        pollers = [p for p in cluster.pollers_since(0) if p is not None]
        victim = cluster.index_of(pollers[-1]) if pollers else 0
        killed_at = time.monotonic()
        cluster.kill(victim if victim is not None else 0)
        survivor = cluster.bots[1 - (victim or 0)].pid
        end = time.monotonic() + args.duration / 2
        while time.monotonic() < end:
            cluster.send(rng.randrange(args.chats))
            time.sleep(step)
        deadline = killed_at + 60
        took_over = None
        while took_over is None and time.monotonic() < deadline:
            took_over = next((at for at, who in list(cluster.api.pollers) if at >= killed_at and who == survivor),
                             None)
            time.sleep(0.1)
        settled = cluster.wait_settled(timeout=90, quiet=3)
        result = cluster.tally()
    return {**result.counts(), "settled": settled, "pollers before the kill": len(pollers),
            "takeover s": (took_over - killed_at) if took_over is not None else float("nan"),
            "detail": result.describe()}


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db-url", default="", help="an existing PostgreSQL database (default: a throwaway one)")
    parser.add_argument("--chats", type=int, default=60)
    parser.add_argument("--messages", type=int, default=5, help="messages per chat in the throughput runs")
    parser.add_argument("--latency", type=float, default=0.02, help="the fake model's answer time in the "
                        "throughput runs (s)")
    parser.add_argument("--runs", type=int, default=2, help="throughput runs per process count (interleaved)")
    parser.add_argument("--rate", type=float, default=15.0, help="messages per second in the failover runs")
    parser.add_argument("--duration", type=float, default=12.0, help="seconds of load in the failover runs")
    parser.add_argument("--failover-latency", type=float, default=0.5, help="model time in the failover runs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", default="", help="keep the bots' folders and logs here")
    parser.add_argument("--only", choices=["throughput", "webhook", "polling"], default="")
    args = parser.parse_args()
    args.nginx = find_nginx() if args.only in ("", "throughput", "webhook") else None

    rows: list[tuple[str, str, str]] = []
    with ExitStack() as stack:
        db_url = args.db_url
        if not db_url:
            pg = ThrowawayPostgres()
            if not pg.available:
                sys.exit(f"bench/scale.py needs PostgreSQL: {pg.why}; or pass --db-url")
            db_url = stack.enter_context(pg).url
        lb = "nginx" if args.nginx else "fake round robin"
        shared = "one shared config.json" if webhook_port_env_supported() else "a config file per process"
        webhook = f"webhook: load balancer {lb}, {shared}; " if args.only != "polling" else ""
        print(f"PostgreSQL {'(given)' if args.db_url else '(throwaway)'}; {webhook}{os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
        if args.only in ("", "throughput"):
            results: dict[int, list[dict[str, float]]] = {1: [], 3: []}
            for run in range(args.runs):
                for n in (1, 3):
                    r = throughput(args, db_url, n, run)
                    print(f"  {n} process(es), run {run}: {r['turns/s']:.1f} turns/s, {r['cpu ms/turn']:.1f} "
                          f"ms CPU/turn, {r['cores']:.2f} cores busy (fakes {r['fakes cores']:.2f})", file=sys.stderr)
                    results[n].append(r)
            one, three = (median(r["turns/s"] for r in results[n]) for n in (1, 3))
            for n in (1, 3):
                rows.append((f"throughput, {n} process{'es' if n > 1 else ''} ({args.chats} chats x "
                             f"{args.messages}, model {args.latency * 1000:.0f} ms, {lb})",
                             f"{median(r['turns/s'] for r in results[n]):.1f} turns/s, "
                             f"{median(r['cpu ms/turn'] for r in results[n]):.1f} ms CPU/turn, "
                             f"{median(r['cores'] for r in results[n]):.2f} cores busy "
                             f"(fakes {median(r['fakes cores'] for r in results[n]):.2f})", ""))
            ok = all(r["ok"] for rs in results.values() for r in rs)
            rows.append(("throughput 3 / 1 processes", f"{three / one:.2f}x"
                         + ("" if ok else " (some runs lost, duplicated or reordered messages)"),
                         f">= 2.5x (needs 3 free cores; {os.cpu_count()} here)"))
        if args.only in ("", "webhook"):
            r = webhook_failover(args, db_url)
            print(f"  webhook failover: {r['detail']}", file=sys.stderr)
            for key in ("sent", "answered once", "lost", "duplicated", "out of order"):
                rows.append((f"webhook failover, kill -9 1 of 3, {key}", str(r[key]),
                             "0" if key in ("lost", "duplicated", "out of order") else ""))
        if args.only in ("", "polling"):
            r = polling_failover(args, db_url)
            print(f"  polling failover: {r['detail']}", file=sys.stderr)
            rows.append(("polling, processes that polled before the kill", str(r["pollers before the kill"]), "1"))
            rows.append(("polling failover, kill -9 of the poller: takeover", f"{r['takeover s']:.1f} s", "<= ~10 s"))
            for key in ("sent", "answered once", "lost", "duplicated", "out of order"):
                rows.append((f"polling failover, {key}", str(r[key]),
                             "0" if key in ("lost", "duplicated", "out of order") else ""))
    print_table(rows)


if __name__ == "__main__":
    main()
