#!/usr/bin/env python3
"""B3 delta and B5 dedup: bytes on the wire for edits of a big file, against rsync in the same run.

    swift build -c release --product nimbus --scratch-path .build-release
    apt-get install rsync
    python3 scripts/bench/delta.py [--binary .build-release/release/nimbus] [--mib 256] [--copies 10]

A random file of --mib MiB is synced with `nimbus sync DIR /delta --once` (the server on loopback, reached through
a byte-counting TCP proxy: every byte both ways, headers included) and copied with `rsync --no-whole-file --stats`
to an rsync daemon (its "Total bytes sent/received"). Then, on both: (a) append 1 MiB, (b) insert 1 MiB at the
middle, (c) flip one byte — bytes and wall time of each sync. B5: the same file under a second name (bytes sent),
and --copies more copies each with a different 1 MiB inserted (the server's stored bytes, `quota.used`, against the
size of one file).

With --crypt, the same file and edits go, in the same run, through an encrypted remote on the same server
(`nimbus remote add vault crypt --remote /delta-crypt`, names and content sealed on the device): bytes and time of
each against the plain sync (goal: within 1.5x the bytes).
"""
import argparse, json, os, re, shutil, socket, subprocess, tempfile, threading, time, urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CountingProxy:
    """A TCP proxy on loopback that counts the bytes it forwards in both directions."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.count = 0
        threading.Thread(target=self.accept, daemon=True).start()

    def take(self):
        with self.lock:
            value, self.count = self.count, 0
        return value

    def accept(self):
        while True:
            client, _ = self.listener.accept()
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            # Without this, Nagle's algorithm and delayed ACKs stall each small write by 40 ms.
            for end in (client, upstream):
                end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pump, args=(source, sink), daemon=True).start()

    def pump(self, source, sink):
        try:
            while True:
                data = source.recv(1 << 20)
                if not data:
                    break
                with self.lock:
                    self.count += len(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build-release/release/nimbus")
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--crypt", action="store_true", help="also through an encrypted remote, same edits, same run")
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    work = tempfile.mkdtemp(prefix="nimbus-delta-bench-")
    processes = []
    try:
        server = subprocess.Popen([binary, "serve", "--data", f"{work}/server", "--port", "0", "--allow-registration", "--log-level", "error"],
                                  stdout=subprocess.PIPE, text=True)
        processes.append(server)
        port = int(server.stdout.readline().rsplit(":", 1)[1].strip())
        base = f"http://127.0.0.1:{port}"
        request = urllib.request.Request(base + "/v1/auth/register", data=json.dumps({"username": "bench", "password": "benchmark pw"}).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(request).read()
        proxy = CountingProxy(port)
        env = dict(os.environ, NIMBUS_HOME=f"{work}/home")
        subprocess.run([binary, "login", f"http://127.0.0.1:{proxy.port}", "--username", "bench", "--password-stdin"],
                       input="benchmark pw\n", text=True, check=True, env=env, stdout=subprocess.DEVNULL)

        rsync_port = free_port()
        os.makedirs(f"{work}/rsync-module")
        with open(f"{work}/rsyncd.conf", "w") as conf:
            # The daemon writes as this user (its default, nobody, could not write to the module's folder).
            conf.write(f"use chroot = no\nuid = {os.getuid()}\ngid = {os.getgid()}\n[m]\npath = {work}/rsync-module\nread only = no\n")
        processes.append(subprocess.Popen(["rsync", "--daemon", "--no-detach", f"--config={work}/rsyncd.conf", f"--port={rsync_port}",
                                           "--address=127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1)

        folder = f"{work}/folder"
        os.makedirs(folder)
        path = f"{folder}/big.bin"
        with open(path, "wb") as handle:
            for _ in range(args.mib):
                handle.write(os.urandom(1 << 20))

        def settle():
            # nimbus waits for files modified in the last moments (still being written): make the edit look done.
            old = time.time() - 5
            for name in os.listdir(folder):
                os.utime(f"{folder}/{name}", (old, old))

        crypt_folder = f"{work}/crypt-folder"
        if args.crypt:
            os.makedirs(crypt_folder)
            shutil.copyfile(path, f"{crypt_folder}/big.bin")
            subprocess.run([binary, "remote", "add", "vault", "crypt", "--remote", "/delta-crypt"], check=True, stdout=subprocess.DEVNULL,
                           env=dict(env, NIMBUS_CRYPT_PASSPHRASE="benchmark passphrase"))

        def settle_folder(where):
            old = time.time() - 5
            for name in os.listdir(where):
                os.utime(f"{where}/{name}", (old, old))

        def crypt_sync():
            settle_folder(crypt_folder)
            proxy.take()
            start = time.perf_counter()
            subprocess.run([binary, "sync", crypt_folder, "vault:/", "--once", "--quiet"], check=True,
                           env=dict(env, NIMBUS_CRYPT_PASSPHRASE="benchmark passphrase"))
            return proxy.take(), time.perf_counter() - start

        def edit_crypt(what, plain):
            # The same edit to the encrypted folder's copy (the file is identical before it), then its sync.
            if not args.crypt:
                return
            # In place (the same inode, as an editor saving over it would keep): a new version, not a new file.
            with open(path, "rb") as source, open(f"{crypt_folder}/big.bin", "r+b") as target:
                target.truncate(0)
                shutil.copyfileobj(source, target, 1 << 20)
            ours = crypt_sync()
            print(f"    through the encrypted remote: {ours[0]:,} bytes in {ours[1]:.2f} s; "
                  f"{ours[0] / max(plain[0], 1):.2f}x the plain sync's bytes, {ours[1] / max(plain[1], 1e-9):.2f}x its time", flush=True)

        def nimbus_sync():
            settle()
            proxy.take()
            start = time.perf_counter()
            subprocess.run([binary, "sync", folder, "/delta", "--once", "--quiet"], check=True, env=env)
            return proxy.take(), time.perf_counter() - start

        def rsync():
            start = time.perf_counter()
            out = subprocess.run(["rsync", "--no-whole-file", "--ignore-times", "--stats", "--times", path, f"rsync://127.0.0.1:{rsync_port}/m/big.bin"],
                                 check=True, capture_output=True, text=True).stdout
            elapsed = time.perf_counter() - start
            sent = int(re.search(r"Total bytes sent: ([\d,]+)", out).group(1).replace(",", ""))
            received = int(re.search(r"Total bytes received: ([\d,]+)", out).group(1).replace(",", ""))
            return sent + received, elapsed

        def report(what, ours, theirs):
            print(f"{what}: nimbus {ours[0]:,} bytes in {ours[1]:.2f} s; rsync {theirs[0]:,} bytes in {theirs[1]:.2f} s; "
                  f"bytes ratio {ours[0] / max(theirs[0], 1):.2f}, time ratio {ours[1] / theirs[1]:.2f}", flush=True)

        plain = nimbus_sync()
        report(f"initial {args.mib} MiB", plain, rsync())
        if args.crypt:
            ours = crypt_sync()
            print(f"    through the encrypted remote: {ours[0]:,} bytes in {ours[1]:.2f} s; "
                  f"{ours[0] / max(plain[0], 1):.2f}x the plain sync's bytes, {ours[1] / max(plain[1], 1e-9):.2f}x its time", flush=True)
        noop = nimbus_sync()
        print(f"no-op sync (what every round costs: feed, listing): nimbus {noop[0]:,} bytes in {noop[1]:.2f} s", flush=True)
        with open(path, "ab") as handle:
            handle.write(os.urandom(1 << 20))
        plain = nimbus_sync()
        report("(a) append 1 MiB", plain, rsync())
        edit_crypt("(a)", plain)
        with open(path, "rb") as handle:
            data = handle.read()
        middle = len(data) // 2
        with open(path, "wb") as handle:
            handle.write(data[:middle] + os.urandom(1 << 20) + data[middle:])
        del data
        plain = nimbus_sync()
        report("(b) insert 1 MiB at the middle", plain, rsync())
        edit_crypt("(b)", plain)
        with open(path, "r+b") as handle:
            handle.seek(12_345_678)
            byte = handle.read(1)
            handle.seek(12_345_678)
            handle.write(bytes([byte[0] ^ 0xFF]))
        plain = nimbus_sync()
        report("(c) flip one byte", plain, rsync())
        edit_crypt("(c)", plain)

        # B5: the same content under a second name, then copies each with a different 1 MiB inserted.
        shutil.copyfile(path, f"{folder}/copy.bin")
        sent, elapsed = nimbus_sync()
        size = os.path.getsize(path)
        print(f"B5 second name: nimbus sent {sent:,} bytes for a {size:,}-byte file ({sent / size * 100:.3f}%) in {elapsed:.2f} s", flush=True)
        with open(path, "rb") as handle:
            data = handle.read()
        for index in range(args.copies):
            at = len(data) * (index + 1) // (args.copies + 2)
            with open(f"{folder}/edit-{index}.bin", "wb") as handle:
                handle.write(data[:at] + os.urandom(1 << 20) + data[at:])
        sent, elapsed = nimbus_sync()
        token = json.loads(urllib.request.urlopen(urllib.request.Request(
            base + "/v1/auth/login", data=json.dumps({"username": "bench", "password": "benchmark pw"}).encode(),
            headers={"Content-Type": "application/json"}, method="POST")).read())["accessToken"]
        about = json.loads(urllib.request.urlopen(urllib.request.Request(base + "/v1/about", headers={"Authorization": f"Bearer {token}"})).read())
        used = about["quota"]["used"]
        print(f"B5 {args.copies} copies with a 1 MiB insert each: sent {sent:,} bytes in {elapsed:.2f} s; the server stores {used:,} bytes "
              f"for {args.copies + 2} files = {used / size:.3f}x one file (old versions of big.bin included)", flush=True)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
