#!/usr/bin/env python3
"""Server benchmarks, measured against peers in the same run.

    swift build -c release --product nimbus --scratch-path .build-release
    python3 scripts/bench/server.py [--binary .build-release/release/nimbus] [--size-mib 1024] [--resumable-mib 2048]
    python3 scripts/bench/server.py --backend both --only batch,listing,resumable,propagation   # embedded vs PostgreSQL + S3
    python3 scripts/bench/server.py --backend scaled --only capacity   # per-replica figures of docs/scaling.md

`--backend scaled` (or `both`) starts a PostgreSQL cluster (Debian's postgresql: initdb/pg_ctl, as user postgres
when run as root; fsync on, as in production) and `rclone serve s3` on this machine, and runs two replicas on them:
propagation is then measured from a commit on replica A to a long-poll on replica B. Every process shares the
same two cores.

Reports: simple upload/download MB/s with curl and the server's peak RSS (VmHWM), download from
`python3 -m http.server` as the peer; `GET /v1/files` on a 10,000-entry folder with wrk; a resumable upload
in 8 MiB chunks; long-poll change propagation p50/p99 over 1,000 commits; 1,000 idle SSE connections.
"""
import argparse, hashlib, http.client, json, os, resource, select, shutil, socket, statistics, subprocess, sys, tempfile, threading, time, uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import rclone as rclone_program  # noqa: E402

def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")

def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")

class Server:
    def __init__(self, binary, data, extra=()):
        resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
        self.proc = subprocess.Popen([binary, "serve", "--data", data, "--port", "0", "--allow-registration", "--log-level", "error", *extra],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        self.port = int(line.rsplit(":", 1)[1])
    def stop(self):
        self.proc.terminate(); self.proc.wait()

class Client:
    def __init__(self, port, token=None):
        self.port, self.token = port, token
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    def request(self, method, path, body=None, headers=None, json_body=None):
        h = dict(headers or {})
        if self.token: h["Authorization"] = "Bearer " + self.token
        if json_body is not None:
            body = json.dumps(json_body).encode(); h["Content-Type"] = "application/json"
        self.conn.request(method, path, body=body, headers=h)
        r = self.conn.getresponse()
        data = r.read()
        return r.status, data

def login(port, name, device):
    c = Client(port)
    c.request("POST", "/v1/auth/register", json_body={"username": name, "password": "benchmark pw"})
    status, data = c.request("POST", "/v1/auth/login", json_body={"username": name, "password": "benchmark pw", "deviceName": device})
    assert status == 200, data
    return json.loads(data)["accessToken"]

def timed(cmd):
    t = time.perf_counter(); subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL); return time.perf_counter() - t

def bench_simple(server, token, work, size_mib):
    path = os.path.join(work, "big.bin")
    with open(path, "wb") as f:
        block = os.urandom(1 << 20)
        for _ in range(size_mib): f.write(block)
    auth = ["-H", f"Authorization: Bearer {token}"]
    url = f"http://127.0.0.1:{server.port}"
    t = time.perf_counter()
    out = subprocess.run(["curl", "-s", "-X", "POST", "-T", path, *auth, f"{url}/v1/upload?uploadType=media&name=big.bin"], check=True, capture_output=True).stdout
    up = time.perf_counter() - t
    file_id = json.loads(out)["id"]
    down = timed(["curl", "-s", "-o", "/dev/null", *auth, f"{url}/v1/files/{file_id}/content"])
    peak = peak_rss_mib(server.proc.pid)
    peer = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", work], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = peer.stdout.readline()
    peer_port = int(line.split("port ")[1].split()[0])
    peer_down = timed(["curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{peer_port}/big.bin"])
    peer.terminate(); peer.wait()
    os.remove(path)
    mb = size_mib * 1.048576
    print(f"simple upload   {size_mib} MiB: {mb/up:8.1f} MB/s  (curl -T, {up:.2f} s)")
    print(f"download        {size_mib} MiB: {mb/down:8.1f} MB/s  vs python3 -m http.server {mb/peer_down:.1f} MB/s  (ratio {peer_down/down:.2f}x)")
    print(f"server peak RSS after upload+download: {peak:.1f} MiB")

def bench_listing(server, token, entries=10_000):
    c = Client(server.port, token)
    status, data = c.request("POST", "/v1/files", json_body={"name": "many", "mimeType": "application/vnd.nimbus.folder"})
    folder = json.loads(data)["id"]
    def worker(start):
        w = Client(server.port, token)
        for i in range(start, entries, 4):
            s, d = w.request("POST", "/v1/files", json_body={"name": f"f{i:05}.txt", "mimeType": "text/plain", "parentId": folder})
            assert s == 201, d
    t = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    [th.start() for th in threads]; [th.join() for th in threads]
    created = time.perf_counter() - t
    print(f"created {entries} empty files: {entries/created:.0f} creates/s")
    url = f"http://127.0.0.1:{server.port}/v1/files?parentId={folder}&limit=100&page=50"
    out = subprocess.run(["wrk", "-t2", "-c16", "-d10s", "--latency", "-H", f"Authorization: Bearer {token}", url], check=True, capture_output=True, text=True).stdout
    rps = [l for l in out.splitlines() if "Requests/sec" in l][0].split()[1]
    lat = [l for l in out.splitlines() if l.strip().startswith("Latency")][0].split()[1]
    p99 = [l for l in out.splitlines() if l.strip().startswith("99%")][0].split()[1]
    print(f"GET /v1/files (10,000-entry folder, page 50 of 100): {rps} req/s, mean latency {lat}, p99 {p99} (wrk -t2 -c16 -d10s)")

def wrk_figures(out):
    rps = float([l for l in out.splitlines() if "Requests/sec" in l][0].split()[1])
    p99 = [l for l in out.splitlines() if l.strip().startswith("99%")]
    return rps, (p99[0].split()[1] if p99 else "?")

def bench_capacity(server, token, work):
    """Per-replica figures for docs/scaling.md: metadata reads/s (GET one file's metadata) and small commits/s
    (POST /v1/files: one transaction each, durable), wrk -t2 -c16 -d10s, the server and its stores on the same cores."""
    c = Client(server.port, token)
    s, d = c.request("POST", "/v1/files", json_body={"name": f"cap-{uuid.uuid4().hex[:6]}", "mimeType": "application/vnd.nimbus.folder"})
    folder = json.loads(d)["id"]
    s, d = c.request("POST", "/v1/files", json_body={"name": "one.txt", "mimeType": "text/plain", "parentId": folder})
    file_id = json.loads(d)["id"]
    auth = f"Authorization: Bearer {token}"
    out = subprocess.run(["wrk", "-t2", "-c16", "-d10s", "--latency", "-H", auth, f"http://127.0.0.1:{server.port}/v1/files/{file_id}"],
                         check=True, capture_output=True, text=True).stdout
    rps, p99 = wrk_figures(out)
    print(f"metadata reads (GET /v1/files/ID): {rps:.0f} req/s, p99 {p99} (wrk -t2 -c16 -d10s)")
    # Four users, one per wrk thread (a user's writes are serialized; different users' run in parallel).
    tokens = [login(server.port, f"cap{i}-{uuid.uuid4().hex[:4]}", "wrk") for i in range(4)]
    script = os.path.join(work, "create.lua")
    with open(script, "w") as f:
        f.write("""
local counter, id = 0, 0
local tokens = {%s}
function setup(thread) id = id + 1; thread:set("tid", id) end
function request()
  counter = counter + 1
  local body = '{"name":"c' .. counter .. '.txt","mimeType":"text/plain"}'
  return wrk.format("POST", "/v1/files", {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. tokens[tid]}, body)
end
function response(status, headers, body) if status ~= 201 then print("unexpected " .. status .. " " .. body) end end
""" % ", ".join(f'"{t}"' for t in tokens))
    out = subprocess.run(["wrk", "-t4", "-c16", "-d10s", "--latency", "-s", script, f"http://127.0.0.1:{server.port}/"],
                         check=True, capture_output=True, text=True).stdout
    if "unexpected" in out: print("  (some creates failed:", [l for l in out.splitlines() if "unexpected" in l][:3], ")")
    rps, p99 = wrk_figures(out)
    print(f"small commits (POST /v1/files, 4 users): {rps:.0f} commits/s, p99 {p99} (wrk -t4 -c16 -d10s)")

def resumable_upload(port, token, path, name="resumable.bin"):
    """Sends the file through one resumable session on one persistent connection; returns (seconds, chunk size)."""
    size = os.path.getsize(path)
    c = Client(port, token)
    t = time.perf_counter()
    s, d = c.request("POST", "/v1/upload?uploadType=resumable", json_body={"requestId": str(uuid.uuid4()), "name": name, "mimeType": "application/octet-stream", "parentId": "root", "size": size})
    assert s == 200, d
    session = json.loads(d)
    chunk = session["chunkSize"]
    with open(path, "rb") as f:
        for k in range(session["totalChunks"]):
            body = f.read(chunk)
            start = k * chunk
            s, d = c.request("PUT", session["uploadUrl"], body=body, headers={"Content-Range": f"bytes {start}-{start+len(body)-1}/{size}"})
            assert s in (201, 308), d
    return time.perf_counter() - t, chunk

def bench_resumable(server, token, work, size_mib):
    path = os.path.join(work, "resumable.bin")
    with open(path, "wb") as f:
        block = os.urandom(1 << 20)
        for _ in range(size_mib): f.write(block)
    elapsed, chunk = resumable_upload(server.port, token, path)
    os.remove(path)
    print(f"resumable upload {size_mib} MiB in {chunk >> 20} MiB chunks: {size_mib*1.048576/elapsed:.1f} MB/s; server peak RSS {peak_rss_mib(server.proc.pid):.1f} MiB")

def bench_batch(server, token, files=10_000, size=4096, per_request=1000):
    import base64
    c = Client(server.port, token)
    status, data = c.request("POST", "/v1/files", json_body={"name": f"batch-{uuid.uuid4().hex[:6]}", "mimeType": "application/vnd.nimbus.folder"})
    folder = json.loads(data)["id"]
    t = time.perf_counter()
    for start in range(0, files, per_request):
        entries = [{"name": f"s{i:05}.bin", "parentId": folder, "content": base64.b64encode(os.urandom(size)).decode()} for i in range(start, min(files, start + per_request))]
        s, d = c.request("POST", "/v1/upload?uploadType=batch", json_body={"files": entries})
        assert s == 200, d
        assert all(r["status"] == 201 for r in json.loads(d)["results"]), d[:300]
    elapsed = time.perf_counter() - t
    print(f"batch upload {files} x {size // 1024} KiB ({per_request} per request): {files/elapsed:.0f} commits/s")

def bench_propagation(server, token_a, token_b, commits=1000, server_b=None):
    a = Client(server.port, token_a); b = Client((server_b or server).port, token_b)
    s, d = b.request("GET", "/v1/changes/start"); cursor = json.loads(d)["cursor"]
    latencies = []
    for i in range(commits):
        result = {}
        def poll():
            s, d = b.request("GET", f"/v1/changes?cursor={cursor}&timeout=30")
            result["t"] = time.perf_counter(); result["body"] = json.loads(d)
        th = threading.Thread(target=poll); th.start()
        time.sleep(0.002)  # let B's request reach the server and start waiting
        s, d = a.request("POST", "/v1/files", json_body={"name": f"p{i}", "mimeType": "application/vnd.nimbus.folder"})
        committed = time.perf_counter()
        assert s == 201, d
        th.join()
        cursor = result["body"]["cursor"]
        latencies.append(max(0.0, result["t"] - committed) * 1000)
    latencies.sort()
    p50 = latencies[len(latencies) // 2]; p99 = latencies[int(len(latencies) * 0.99)]
    where = "replica A → replica B" if server_b else "A 2xx → B long-poll answer"
    print(f"change propagation {where} over {commits} commits: p50 {p50:.2f} ms, p99 {p99:.2f} ms")

def bench_sse(server, token, connections=1000):
    before = rss_mib(server.proc.pid)
    socks = []
    for _ in range(connections):
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(f"GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
        socks.append(s)
    for s in socks:  # wait for each stream's first bytes
        s.settimeout(30); data = s.recv(65536); assert b"200" in data, data
    time.sleep(1)
    held = rss_mib(server.proc.pid)
    c = Client(server.port, token)
    t = time.perf_counter()
    c.request("POST", "/v1/files", json_body={"name": "sse-probe", "mimeType": "application/vnd.nimbus.folder"})
    pending = set(socks); received = 0
    while pending and time.perf_counter() - t < 30:
        ready, _, _ = select.select(list(pending), [], [], 1)
        for s in ready:
            if b"event: change" in s.recv(65536):
                received += 1; pending.discard(s)
    elapsed = time.perf_counter() - t
    for s in socks: s.close()
    print(f"{connections} idle SSE connections: server RSS {before:.1f} → {held:.1f} MiB; one commit reached {received}/{connections} streams in {elapsed*1000:.0f} ms")

class Scaled:
    """A PostgreSQL cluster and rclone serve s3 in a temporary folder, for --backend scaled."""
    def __init__(self, work):
        self.dir = os.path.join(work, "pg")
        os.makedirs(self.dir)
        bins = [d for d in ("/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin") if os.path.exists(d + "/initdb")]
        assert bins, "PostgreSQL is needed: apt-get install postgresql"
        self.bin = bins[0]
        self.as_pg = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
        if os.getuid() == 0: subprocess.run(["chown", "-R", "postgres:postgres", self.dir], check=True)
        port = free_port()
        subprocess.run([*self.as_pg, self.bin + "/initdb", "-D", self.dir + "/data", "-U", "postgres", "--auth=trust", "-E", "UTF8"], check=True, stdout=subprocess.DEVNULL)
        options = f"-p {port} -k {self.dir} -c listen_addresses=127.0.0.1 -c max_connections=200"
        subprocess.run([*self.as_pg, self.bin + "/pg_ctl", "-D", self.dir + "/data", "-o", options, "-l", self.dir + "/log", "-w", "start"], check=True, stdout=subprocess.DEVNULL)
        self.database = f"postgres://postgres@127.0.0.1:{port}/postgres"
        s3dir = os.path.join(work, "s3"); os.makedirs(os.path.join(s3dir, "nimbus-bench"))
        s3port = free_port()
        self.s3 = subprocess.Popen([rclone_program(), "serve", "s3", "--addr", f"127.0.0.1:{s3port}", "--auth-key", "bench,bench-secret", s3dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try: socket.create_connection(("127.0.0.1", s3port)).close(); break
            except OSError: time.sleep(0.1)
        os.environ["AWS_ACCESS_KEY_ID"] = "bench"; os.environ["AWS_SECRET_ACCESS_KEY"] = "bench-secret"
        self.blobs = f"s3://nimbus-bench?endpoint=http://127.0.0.1:{s3port}&region=us-east-1"
    def args(self):
        return ["--database", self.database, "--blobs", self.blobs]
    def stop(self):
        self.s3.terminate(); self.s3.wait()
        subprocess.run([*self.as_pg, self.bin + "/pg_ctl", "-D", self.dir + "/data", "-m", "fast", "stop"], stdout=subprocess.DEVNULL)

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close(); return port

def run(args, backend):
    work = tempfile.mkdtemp(prefix="nimbus-bench-")
    os.chmod(work, 0o755)  # the postgres user must reach its cluster's folder
    scaled = Scaled(work) if backend == "scaled" else None
    extra = scaled.args() if scaled else []
    server = Server(args.binary, os.path.join(work, "data"), extra)
    replica = Server(args.binary, os.path.join(work, "data-b"), extra) if scaled else None
    print(f"--- {backend}: " + ("PostgreSQL + S3 (rclone serve s3), two replicas" if scaled else "SQLite + blob folder"))
    try:
        token = login(server.port, "bench", "a")
        only = args.only.split(",")
        if "simple" in only: bench_simple(server, token, work, args.size_mib)
        if "batch" in only: bench_batch(server, token)
        if "capacity" in only: bench_capacity(server, token, work)
        if "listing" in only: bench_listing(server, token)
        if "resumable" in only: bench_resumable(server, token, work, args.resumable_mib)
        if "propagation" in only: bench_propagation(server, token, login((replica or server).port, "bench", "b"), args.commits, replica)
        if "sse" in only: bench_sse(server, token)
    finally:
        server.stop()
        if replica: replica.stop()
        if scaled: scaled.stop()
        shutil.rmtree(work, ignore_errors=True)

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", default=".build-release/release/nimbus")
    p.add_argument("--size-mib", type=int, default=1024)
    p.add_argument("--resumable-mib", type=int, default=2048)
    p.add_argument("--commits", type=int, default=1000)
    p.add_argument("--only", default="simple,listing,resumable,propagation,sse")
    p.add_argument("--backend", default="embedded", choices=["embedded", "scaled", "both"])
    args = p.parse_args()
    for backend in (["embedded", "scaled"] if args.backend == "both" else [args.backend]):
        run(args, backend)

if __name__ == "__main__":
    main()
