#!/usr/bin/env python3
"""CPU per byte and per file, client and server, against the hash no upload can avoid — all in the same run.

    swift build -c release --product nimbus --scratch-path .build-release
    swift build -c release --product nimbus-bench --scratch-path .build-release
    apt-get install wrk
    python3 scripts/bench/cpu.py [--binary .build-release/release/nimbus] [--runs 3] [--mib 1024] [--files 10000]

The disk's durable-write speed swings tenfold between runs here; CPU time does not, and it is what a server pays per
user and a phone in battery. Each run starts a fresh server (SQLite + blob folder) and measures, as CPU seconds
(user + system: the client's from its rusage, the server's from /proc/PID/stat):

- the yardstick: `openssl dgst -sha256` of the same bytes (in the page cache), the same run;
- `nimbus put` of --mib random MiB (a new file), of a new version (other bytes, same name, --on-conflict replace),
  a resumable upload from this script (server CPU only: the client is Python), and `nimbus get` of the file on a
  second device (the first knows the file's blocks and would copy them from its own copy) —
  each as CPU per GiB and as a ratio to the hash, both ends together;
- a first `nimbus sync --once` of --files files of 4 KiB: CPU per file (both ends) and files/s; then the no-op
  re-sync's wall time;
- metadata: `GET /v1/files/{id}` with wrk (1 thread, 32 connections, 10 s) against `nimbus-bench constant`, a
  Hummingbird route that returns a constant, on the same cores.

Goals (same run): put and resumable ≤ 4× the hash, get ≤ 3×; small files ≤ 0.25 ms of CPU per file and ≥ 5,000
files/s; metadata ≥ 40 % of the constant route; no-op re-sync of 10,000 files ≤ 0.2 s.
"""
import argparse, json, os, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server import Server, Client, login, resumable_upload, free_port  # noqa: E402
from sync import process_cpu, children_cpu, make_tree  # noqa: E402


def measured(server, command, env=None, stdin=None):
    """Runs `command`; (wall seconds, its CPU, the server's CPU meanwhile)."""
    client, host, wall = children_cpu(), process_cpu(server.proc.pid), time.perf_counter()
    subprocess.run(command, env=env, input=stdin, check=True, stdout=subprocess.DEVNULL, text=stdin is not None)
    return time.perf_counter() - wall, children_cpu() - client, process_cpu(server.proc.pid) - host


def random_file(path, mib):
    with open(path, "wb") as handle:
        for _ in range(mib): handle.write(os.urandom(1 << 20))


def hash_cpu(path):
    subprocess.run(["cat", path], check=True, stdout=subprocess.DEVNULL)  # in the page cache first
    before = children_cpu()
    subprocess.run(["openssl", "dgst", "-sha256", path], check=True, stdout=subprocess.DEVNULL)
    return children_cpu() - before


def wrk(url, token=None, seconds=10):
    header = ["-H", f"Authorization: Bearer {token}"] if token else []
    out = subprocess.run(["wrk", "-t1", "-c32", f"-d{seconds}s", "--latency", *header, url], check=True, capture_output=True, text=True).stdout
    rps = float([line for line in out.splitlines() if "Requests/sec" in line][0].split()[1])
    p99 = [line for line in out.splitlines() if line.strip().startswith("99%")]
    return rps, (p99[0].split()[1] if p99 else "?")


def one_run(args, bench_binary):
    work = tempfile.mkdtemp(prefix="nimbus-cpu-", dir=os.environ.get("NIMBUS_BENCH_DIR"))
    server = Server(args.binary, os.path.join(work, "data"))
    figures = {}
    try:
        token = login(server.port, "bench", "cpu")
        home = os.path.join(work, "home")
        env = dict(os.environ, NIMBUS_HOME=home)
        subprocess.run([args.binary, "login", f"http://127.0.0.1:{server.port}", "--username", "bench", "--password-stdin"],
                       input="benchmark pw", text=True, env=env, check=True, stdout=subprocess.DEVNULL)
        gib = args.mib / 1024
        first, second = os.path.join(work, "a", "big.bin"), os.path.join(work, "b", "big.bin")
        for path in (first, second):
            os.makedirs(os.path.dirname(path))
            random_file(path, args.mib)
        sha = hash_cpu(first)
        figures["hash"] = sha / gib

        def per_gib(name, wall, client, host):
            figures[name] = {"client": client / gib, "server": host / gib, "ratio": (client + host) / sha, "mbs": args.mib * 1.048576 / wall}

        per_gib("put", *measured(server, [args.binary, "put", first, "/", "--quiet"], env))
        per_gib("put-version", *measured(server, [args.binary, "put", second, "/", "--on-conflict", "replace", "--quiet"], env))
        host = process_cpu(server.proc.pid)
        wall, _ = resumable_upload(server.port, token, first, name="resumable.bin")
        resumable = process_cpu(server.proc.pid) - host
        figures["resumable"] = {"client": float("nan"), "server": resumable / gib, "ratio": resumable / sha, "mbs": args.mib * 1.048576 / wall}
        # From another device: this one knows the file's blocks (it sent them) and would copy them from its own copy.
        other = dict(os.environ, NIMBUS_HOME=os.path.join(work, "home-b"))
        subprocess.run([args.binary, "login", f"http://127.0.0.1:{server.port}", "--username", "bench", "--password-stdin"],
                       input="benchmark pw", text=True, env=other, check=True, stdout=subprocess.DEVNULL)
        out = os.path.join(work, "got.bin")
        per_gib("get", *measured(server, [args.binary, "get", "/big.bin", out, "--quiet"], other))
        os.remove(out)
        for path in (first, second): os.remove(path)

        tree = os.path.join(work, "tree")
        make_tree(tree, args.files)
        wall, client, host = measured(server, [args.binary, "sync", tree, "/tree", "--once"], env)
        figures["small"] = {"ms_per_file": (client + host) * 1000 / args.files, "client_ms": client * 1000 / args.files,
                            "server_ms": host * 1000 / args.files, "files_per_s": args.files / wall}
        noop, _, _ = measured(server, [args.binary, "sync", tree, "--once"], env)
        figures["noop"] = noop

        status, data = Client(server.port, token).request("GET", "/v1/files?parentId=root&limit=1")
        file_id = json.loads(data)["files"][0]["id"]
        figures["metadata"] = wrk(f"http://127.0.0.1:{server.port}/v1/files/{file_id}", token)
        if bench_binary:
            port = free_port()
            constant = subprocess.Popen([bench_binary, "constant", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                for _ in range(100):
                    try:
                        Client(port).request("GET", "/constant"); break
                    except OSError: time.sleep(0.1)
                figures["constant"] = wrk(f"http://127.0.0.1:{port}/constant")
            finally:
                constant.terminate(); constant.wait()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return figures


def span(values, fmt):
    values = [v for v in values if v == v]
    if not values: return "—"
    low, high = min(values), max(values)
    return fmt.format(low) if fmt.format(low) == fmt.format(high) else f"{fmt.format(low)}–{fmt.format(high)}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build-release/release/nimbus")
    parser.add_argument("--bench-binary", default=".build-release/release/nimbus-bench")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args()
    args.binary = os.path.abspath(args.binary)
    bench_binary = os.path.abspath(args.bench_binary) if os.path.exists(args.bench_binary) else None
    runs = []
    for run in range(1, args.runs + 1):
        figures = one_run(args, bench_binary)
        runs.append(figures)
        print(f"run {run}: " + json.dumps(figures))
    print(f"\n{args.runs} runs, {args.mib} MiB files, {args.files} small files; CPU = user + system, both ends unless said")
    print(f"openssl dgst -sha256: {span([r['hash'] for r in runs], '{:.2f}')} s per GiB")
    goals = {"put": 4, "put-version": 4, "resumable": 4, "get": 3}
    for name, goal in goals.items():
        rows = [r[name] for r in runs]
        ratio = [x["ratio"] for x in rows]
        verdict = "met" if max(ratio) <= goal else ("not met" if min(ratio) > goal else "met in some runs")
        print(f"{name:12} client {span([x['client'] for x in rows], '{:.2f}')} + server {span([x['server'] for x in rows], '{:.2f}')} s/GiB"
              f" = {span(ratio, '{:.1f}')}× the hash (goal ≤ {goal}×: {verdict}); {span([x['mbs'] for x in rows], '{:.0f}')} MB/s")
    small = [r["small"] for r in runs]
    print(f"small files  {span([x['ms_per_file'] for x in small], '{:.3f}')} ms CPU/file (client {span([x['client_ms'] for x in small], '{:.3f}')}"
          f" + server {span([x['server_ms'] for x in small], '{:.3f}')}; goal ≤ 0.25), {span([x['files_per_s'] for x in small], '{:.0f}')} files/s (goal ≥ 5,000)")
    print(f"no-op re-sync {span([r['noop'] for r in runs], '{:.2f}')} s (goal ≤ 0.2)")
    meta = [r["metadata"][0] for r in runs]
    line = f"GET /v1/files/{{id}} {span(meta, '{:.0f}')} req/s (p99 {', '.join(r['metadata'][1] for r in runs)})"
    if all("constant" in r for r in runs):
        constant = [r["constant"][0] for r in runs]
        share = [m / c for m, c in zip(meta, constant)]
        line += f"; constant route {span(constant, '{:.0f}')} req/s; {span([100 * s for s in share], '{:.0f}')} % of it (goal ≥ 40 %)"
    print(line)


if __name__ == "__main__":
    main()
