#!/usr/bin/env python3
"""Abuse limits: a normal client's latency while many sockets trickle request headers
(slowloris-style, loopback, bounded), how long the server keeps slow and idle sockets, and the header/body caps.

    swift build -c release --product nimbus --scratch-path .build-release
    python3 scripts/bench/abuse.py [--binary .build-release/release/nimbus] [--sockets 500] [--runs 3]

Each run starts a fresh server, measures 300 sequential `GET /v1/files` alone, then again while `--sockets`
connections each send one more header line every 5 s; then holds 20 trickling and 5 idle sockets and reports
when the server closed them; then sends a 64 KiB header and a 2 MiB JSON body and reports the statuses.
"""
import argparse, json, resource, socket, subprocess, tempfile, threading, time, urllib.error, urllib.request, shutil

def call(base, path, body=None, token=None):
    request = urllib.request.Request(base + path, data=json.dumps(body).encode() if body is not None else None,
                                     method="POST" if body is not None else "GET")
    if body is not None: request.add_header("Content-Type", "application/json")
    if token: request.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read() or b"{}")

def latencies(base, token, count):
    out = []
    for _ in range(count):
        start = time.perf_counter()
        call(base, "/v1/files", token=token)
        out.append(time.perf_counter() - start)
    return sorted(out)

def pct(values, q): return values[min(len(values) - 1, int(q * len(values)))] * 1000

def status_of(port, raw):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        s.sendall(raw)
        return s.recv(64).split(b" ")[1].decode()
    except OSError as error:
        return f"closed ({error.__class__.__name__})"
    finally:
        s.close()

def run(binary, sockets):
    data = tempfile.mkdtemp(prefix="nimbus-abuse-")
    server = subprocess.Popen([binary, "serve", "--data", data, "--port", "0", "--allow-registration", "--log-level", "error"],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().rsplit(":", 1)[1])
        base = f"http://127.0.0.1:{port}"
        call(base, "/v1/auth/register", {"username": "abuse", "password": "correct horse"})
        token = call(base, "/v1/auth/login", {"username": "abuse", "password": "correct horse"})["accessToken"]
        alone = latencies(base, token, 300)
        held = []
        for _ in range(sockets):
            s = socket.create_connection(("127.0.0.1", port))
            s.send(b"GET /v1/files HTTP/1.1\r\nHost: x\r\n")
            held.append(s)
        stop = threading.Event()
        def trickle():
            while not stop.is_set():
                for s in held:
                    try: s.send(b"X-Slow: 1\r\n")
                    except OSError: pass
                stop.wait(5)
        thread = threading.Thread(target=trickle)
        thread.start()
        time.sleep(1)
        loaded = latencies(base, token, 300)
        stop.set(); thread.join()
        for s in held: s.close()
        # How long slow and idle sockets live.
        slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
        for s in slow: s.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        for s in slow + idle: s.setblocking(False)
        start = time.time(); closed_at = {}
        while time.time() - start < 200 and len(closed_at) < 25:
            for index, s in enumerate(slow + idle):
                if index in closed_at: continue
                try:
                    if index < 20: s.send(b"X-Slow: 1\r\n")
                    if s.recv(1) == b"": closed_at[index] = time.time() - start
                except BlockingIOError: pass
                except OSError: closed_at[index] = time.time() - start
            time.sleep(1)
        slow_closed = sorted(v for k, v in closed_at.items() if k < 20)
        idle_closed = sorted(v for k, v in closed_at.items() if k >= 20)
        big_header = status_of(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n")
        body = b'{"username":"' + b"x" * (2 << 20) + b'","password":"p"}'
        big_body = status_of(port, b"POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)
        return alone, loaded, slow_closed, idle_closed, big_header, big_body
    finally:
        server.terminate(); server.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build-release/release/nimbus")
    parser.add_argument("--sockets", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
    for index in range(args.runs):
        alone, loaded, slow, idle, header, body = run(args.binary, args.sockets)
        slow_text = f"closed {len(slow)}/20 after {slow[0]:.0f}-{slow[-1]:.0f} s" if slow else "never closed (200 s)"
        idle_text = f"closed {len(idle)}/5 after {idle[0]:.0f}-{idle[-1]:.0f} s" if idle else "never closed (200 s)"
        print(f"run {index + 1}: GET /v1/files alone p50 {pct(alone, .5):.1f} ms p99 {pct(alone, .99):.1f} ms; "
              f"with {args.sockets} trickling sockets p50 {pct(loaded, .5):.1f} ms p99 {pct(loaded, .99):.1f} ms max {loaded[-1] * 1000:.1f} ms; "
              f"trickling sockets {slow_text}; idle sockets {idle_text}; 64 KiB header → {header}; 2 MiB JSON body → {body}", flush=True)

if __name__ == "__main__":
    main()
