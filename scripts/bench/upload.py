#!/usr/bin/env python3
"""B1: whole uploads against the disk's durable-write speed and a peer, in the same run.

    swift build -c release --product nimbus --scratch-path .build-release
    python3 scripts/bench/upload.py [--binary .build-release/release/nimbus] [--runs 3] [--resumable-mib 256] [--put-mib 1024]

Each run, on a fresh server whose data folder is on the disk measured:
- the physical limit: `dd if=R of=F bs=4M conv=fsync` in the data folder, R being the random file the resumable
  upload then sends (cached in memory: only the durable write is measured; zeros are not used, a virtual disk can
  skip them — here /dev/zero gave 1.6 GB/s, random data 0.3);
- a resumable upload of --resumable-mib random MiB in the server's chunks over one persistent HTTP connection
  (Python's http.client), and the server's peak RSS (VmHWM) after it;
- `nimbus put` of --put-mib random MiB (the CLI: login, then put into the root);
- the peer: `rclone copyto` of the same file to `rclone serve webdav` (which does not fsync) with
  `--webdav-pacer-min-sleep 0`.
Goal: resumable and `nimbus put` ≥ 0.8 × dd's figure and ≥ rclone's; peak RSS < 100 MB.
"""
import argparse, os, shutil, socket, subprocess, sys, tempfile, time, uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server import Server, login, peak_rss_mib, free_port, resumable_upload  # noqa: E402
from peers import rclone as rclone_program  # noqa: E402

def random_file(path, mib):
    with open(path, "wb") as f:
        for _ in range(mib): f.write(os.urandom(1 << 20))

def dd_mbs(folder, source, mib):
    target = os.path.join(folder, "dd.bin")
    subprocess.run(["cat", source], check=True, stdout=subprocess.DEVNULL)  # in the page cache first
    t = time.perf_counter()
    subprocess.run(["dd", f"if={source}", f"of={target}", "bs=4M", "conv=fsync", "status=none"], check=True)
    elapsed = time.perf_counter() - t
    os.remove(target)
    return mib * 1.048576 / elapsed

def resumable_mbs(server, token, path, mib):
    elapsed, _ = resumable_upload(server.port, token, path, name=f"resumable-{uuid.uuid4().hex[:6]}.bin")
    return mib * 1.048576 / elapsed

def put_mbs(binary, server, work, path, mib):
    home = os.path.join(work, "home")
    env = dict(os.environ, NIMBUS_HOME=home)
    subprocess.run([binary, "login", f"http://127.0.0.1:{server.port}", "--username", "bench", "--password-stdin"],
                   input="benchmark pw", text=True, env=env, check=True, stdout=subprocess.DEVNULL)
    t = time.perf_counter()
    subprocess.run([binary, "put", path, "/", "--quiet"], env=env, check=True)
    return mib * 1.048576 / (time.perf_counter() - t)

def rclone_mbs(work, path, mib):
    folder = os.path.join(work, "rclone-webdav")
    os.makedirs(folder)
    port = free_port()
    peer = subprocess.Popen([rclone_program(), "serve", "webdav", "--addr", f"127.0.0.1:{port}", folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try: socket.create_connection(("127.0.0.1", port)).close(); break
            except OSError: time.sleep(0.1)
        t = time.perf_counter()
        subprocess.run([rclone_program(), "copyto", path, ":webdav:big.bin", "--webdav-url", f"http://127.0.0.1:{port}",
                        "--webdav-pacer-min-sleep", "0"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return mib * 1.048576 / (time.perf_counter() - t)
    finally:
        peer.terminate(); peer.wait()

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", default=".build-release/release/nimbus")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--resumable-mib", type=int, default=256)
    p.add_argument("--put-mib", type=int, default=1024)
    args = p.parse_args()
    binary = os.path.abspath(args.binary)
    for run in range(1, args.runs + 1):
        work = tempfile.mkdtemp(prefix="nimbus-b1-", dir=os.environ.get("NIMBUS_BENCH_DIR"))
        server = Server(binary, os.path.join(work, "data"))
        try:
            token = login(server.port, "bench", "bench")
            small = os.path.join(work, "resumable.bin"); random_file(small, args.resumable_mib)
            dd = dd_mbs(os.path.join(work, "data"), small, args.resumable_mib)
            resumable = resumable_mbs(server, token, small, args.resumable_mib)
            rss = peak_rss_mib(server.proc.pid)
            big = os.path.join(work, "put.bin"); random_file(big, args.put_mib)
            put = put_mbs(binary, server, work, big, args.put_mib)
            rss = max(rss, peak_rss_mib(server.proc.pid))
            peer = rclone_mbs(work, big, args.put_mib)
            print(f"run {run}: dd conv=fsync {dd:.0f} MB/s; resumable {args.resumable_mib} MiB {resumable:.0f} MB/s ({resumable / dd:.2f}× dd); "
                  f"nimbus put {args.put_mib} MiB {put:.0f} MB/s ({put / dd:.2f}× dd); rclone → rclone serve webdav {peer:.0f} MB/s "
                  f"(resumable {resumable / peer:.2f}×, put {put / peer:.2f}× it); server peak RSS {rss:.0f} MiB", flush=True)
        finally:
            server.stop()
            shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    main()
