#!/usr/bin/env python3
"""Accepting a big share against syncing as many of one's own items, measured in the same run.

    swift build -c release --product nimbus --scratch-path .build-release
    python3 scripts/bench/share.py [--binary .build-release/release/nimbus] [--files 10000] [--rounds 3]

Ana has a folder of N small files (4 KiB, in 100 folders) and shares it with Ben; Ben has as many files of his own.
Then, in alternating rounds, a fresh device of Ben's makes its first sync (`nimbus sync DIR REMOTE --once`) of his own
folder and of the accepted share, each into a new local folder. Printed: each first sync's wall time and client CPU,
the server's CPU for it, the database read transactions it made per file (from `/metrics`: where the difference
comes from), and the share/own ratios (goal: the share costs no more than the own folder, every round); also what
accepting costs the server (the grantee's feed gets a row per item of the share).
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sync import children_cpu, make_tree, process_cpu  # noqa: E402


def call(base, method, path, body=None, token=None):
    request = urllib.request.Request(base + path, data=json.dumps(body).encode() if body is not None else None, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read() or b"{}")


def db_reads(base):
    """Read transactions the server has run so far, and the seconds spent in them (from /metrics)."""
    text = urllib.request.urlopen(base + "/metrics").read().decode()
    count = total = 0.0
    for line in text.splitlines():
        if 'kind="read"' not in line or line.startswith("#"):
            continue
        if line.startswith("nimbus_db_transaction_seconds_count"):
            count += float(line.rsplit(" ", 1)[1])
        elif line.startswith("nimbus_db_transaction_seconds_sum"):
            total += float(line.rsplit(" ", 1)[1])
    return count, total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build-release/release/nimbus")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    work = tempfile.mkdtemp(prefix="nimbus-share-bench-")
    server = None
    try:
        server = subprocess.Popen([binary, "serve", "--data", f"{work}/server", "--port", "0", "--allow-registration", "--log-level", "error"],
                                  stdout=subprocess.PIPE, text=True)
        base = "http://127.0.0.1:" + server.stdout.readline().rsplit(":", 1)[1].strip()
        tokens = {}
        for user in ["ana", "ben"]:
            call(base, "POST", "/v1/auth/register", {"username": user, "password": "benchmark pw"})
            tokens[user] = call(base, "POST", "/v1/auth/login", {"username": user, "password": "benchmark pw", "deviceName": "api"})["accessToken"]

        devices = 0

        def device(user):
            nonlocal devices
            devices += 1
            env = dict(os.environ, NIMBUS_HOME=f"{work}/home-{user}-{devices}")
            subprocess.run([binary, "login", base, "--username", user, "--password-stdin", "--device-name", f"{user}{devices}"],
                           input="benchmark pw\n", text=True, check=True, env=env, stdout=subprocess.DEVNULL)
            return env

        tree = f"{work}/tree"
        make_tree(tree, args.files)
        subprocess.run([binary, "sync", tree, "/Project", "--once", "--quiet"], check=True, env=device("ana"))
        subprocess.run([binary, "sync", tree, "/Mine", "--once", "--quiet"], check=True, env=device("ben"))

        project = next(f for f in call(base, "GET", "/v1/files?parentId=root", token=tokens["ana"])["files"] if f["name"] == "Project")
        grant = call(base, "POST", f"/v1/files/{project['id']}/grants", {"user": "ben", "role": "editor"}, token=tokens["ana"])
        before, start = process_cpu(server.pid), time.perf_counter()
        call(base, "POST", f"/v1/shares/incoming/{grant['id']}/accept", token=tokens["ben"])
        accept_wall, accept_cpu = time.perf_counter() - start, process_cpu(server.pid) - before
        items = args.files + 101
        print(f"accepting a share of {items} items: {accept_wall:.2f} s, server CPU {accept_cpu:.2f} s ({accept_cpu / items * 1e6:.0f} µs per item)")

        results = {"own": [], "share": []}
        for round_index in range(args.rounds):
            order = ["own", "share"] if round_index % 2 == 0 else ["share", "own"]
            for kind in order:
                env = device("ben")
                target = f"{work}/ben-{kind}-{round_index}"
                remote = "/Mine" if kind == "own" else "/Project"
                reads_before, read_seconds_before = db_reads(base)
                server_before, client_before, start = process_cpu(server.pid), children_cpu(), time.perf_counter()
                subprocess.run([binary, "sync", target, remote, "--once", "--quiet"], check=True, env=env)
                wall = time.perf_counter() - start
                client, served = children_cpu() - client_before, process_cpu(server.pid) - server_before
                reads, read_seconds = (now - before for now, before in zip(db_reads(base), (reads_before, read_seconds_before)))
                count = sum(len(names) for _, _, names in os.walk(target))
                assert count >= args.files, f"{kind}: {count} files synced"
                results[kind].append((wall, client, served))
                print(f"round {round_index + 1} first sync of {args.files} files, {kind:5}: {wall:.1f} s, client CPU {client:.1f} s, server CPU {served:.1f} s; "
                      f"{reads / args.files:.2f} database reads per file ({read_seconds:.1f} s in them)")
        for index, name in enumerate(["wall time", "client CPU", "server CPU"]):
            ratios = [share[index] / own[index] for own, share in zip(results["own"], results["share"])]
            verdict = "no more than own in every round" if all(r <= 1.0 for r in ratios) else "more than own in some round"
            print(f"share/own {name}: {min(ratios):.2f}–{max(ratios):.2f} ({verdict})")
        medians = {kind: statistics.median(r[0] for r in results[kind]) for kind in results}
        print(f"median first sync: own {medians['own']:.1f} s, share {medians['share']:.1f} s")
    finally:
        if server:
            server.terminate()
            server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
