#!/usr/bin/env python3
"""Finding and seeing files, measured: search latency, thumbnail throughput, a big folder's first rows in Chromium.

    swift build -c release --product nimbus --scratch-path .build-release
    python3 scripts/bench/finding.py [--binary .build-release/release/nimbus] [--backend embedded|scaled|both]
                                     [--sizes 10000,100000] [--queries 400] [--rounds 3] [--skip-thumbnails] [--skip-browser]

Search: one user's tree of N files (names from a vocabulary, in 200 folders, made through batch uploads), then
`GET /v1/search?q=…&limit=50` for a mix of queries — parts of names of 3 to 8 characters, one or two characters,
whole words, and text nothing has — one at a time over one kept-alive connection; p50 and p99 of the client's wall
time per size and back-end (goal: p99 under 50 ms at 100,000 files). `scaled` is PostgreSQL (and rclone serve s3).

Thumbnails: 24 photos (4000×3000 JPEG), 4 PDFs and 4 videos, each file's 256-pixel thumbnail asked for once, two
requests at a time (the server's two worker slots): thumbnails per second, and the largest resident size any worker
process reached (sampled from /proc every few milliseconds; the workers run under a 1 GiB address-space limit).

Browser: a folder of 10,000 items opened in headless Chromium (the web app): milliseconds from asking for the folder
to its first row in the page, each round.
"""
import argparse, http.client, json, os, random, shutil, statistics, subprocess, sys, tempfile, threading, time, urllib.parse, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server import Scaled  # noqa: E402

WORDS = ("report invoice photo holiday budget plan notes draft final summary meeting minutes project design spec "
         "contract letter resume thesis chapter slides poster recipe travel ticket receipt scan family garden kitchen "
         "winter summer spring autumn beach mountain river city paris berlin tokyo lisbon cafe menu party wedding "
         "birthday school homework lecture exam grades salary taxes insurance health bank statement car house rent "
         "music album song video clip movie trailer podcast episode backup archive export import data sheet table "
         "chart graph figure diagram sketch logo brand website server config script readme license changelog todo").split()
EXTENSIONS = ["pdf", "docx", "txt", "jpg", "png", "mp4", "xlsx", "md", "zip", "csv"]


class Server:
    def __init__(self, binary, work, extra):
        self.process = subprocess.Popen([binary, "serve", "--data", f"{work}/server", "--port", "0", "--allow-registration", "--log-level", "error", *extra],
                                        stdout=subprocess.PIPE, text=True)
        self.port = int(self.process.stdout.readline().rsplit(":", 1)[1].strip())
        self.base = f"http://127.0.0.1:{self.port}"
        self.call("POST", "/v1/auth/register", {"username": "bench", "password": "benchmark pw"})
        self.token = self.call("POST", "/v1/auth/login", {"username": "bench", "password": "benchmark pw", "deviceName": "bench"})["accessToken"]

    def call(self, method, path, body=None, raw=None, headers=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if body is not None:
            request.add_header("Content-Type", "application/json")
        if getattr(self, "token", None):
            request.add_header("Authorization", "Bearer " + self.token)
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        with urllib.request.urlopen(request, timeout=600) as response:
            payload = response.read()
            return json.loads(payload) if payload and response.headers.get("Content-Type", "").startswith("application/json") else payload

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=60)


def populate(server, folders, start, count, rng):
    """`count` more files with made-up names, spread over the folders, 1,000 per batch upload."""
    names = []
    for first in range(start, start + count, 1000):
        entries = []
        for index in range(first, min(first + 1000, start + count)):
            name = f"{rng.choice(WORDS)}-{rng.choice(WORDS)} {index}.{rng.choice(EXTENSIONS)}"
            names.append(name)
            entries.append({"name": name, "parentId": rng.choice(folders), "mimeType": "application/octet-stream", "content": ""})
        server.call("POST", "/v1/upload?uploadType=batch", {"files": entries})
    return names


def queries(names, count, rng):
    mix = []
    for index in range(count):
        kind = index % 5
        name = rng.choice(names)
        if kind in (0, 1):
            length = rng.randint(3, 8)
            at = rng.randint(0, max(0, len(name) - length))
            mix.append(name[at:at + length])
        elif kind == 2:
            mix.append(rng.choice("abcdefghijklmnoprstuvwy") * rng.randint(1, 2))
        elif kind == 3:
            mix.append(rng.choice(WORDS))
        else:
            mix.append("zqx" + str(rng.randint(0, 9999)))
    return mix


def search_latencies(server, mix):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    headers = {"Authorization": "Bearer " + server.token}
    times = []
    for text in mix:
        started = time.perf_counter()
        connection.request("GET", "/v1/search?limit=50&q=" + urllib.parse.quote(text), headers=headers)
        response = connection.getresponse()
        response.read()
        times.append((time.perf_counter() - started) * 1000)
        assert response.status == 200, (response.status, text)
    connection.close()
    return times


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def bench_search(args, backend):
    work = tempfile.mkdtemp(prefix="nimbus-finding-")
    os.chmod(work, 0o755)
    scaled = Scaled(work) if backend == "scaled" else None
    server = Server(args.binary, work, scaled.args() if scaled else [])
    rng = random.Random(45)
    try:
        folders = [server.call("POST", "/v1/files", {"name": f"folder {i}", "mimeType": "application/vnd.nimbus.folder"})["id"] for i in range(200)]
        names = []
        for size in args.sizes:
            started = time.perf_counter()
            names += populate(server, folders, len(names), size - len(names), rng)
            made = time.perf_counter() - started
            for round_ in range(args.rounds):
                times = search_latencies(server, queries(names, args.queries, random.Random(round_)))
                print(f"search {backend:8} {size:>7} files (made in {made:.0f} s) round {round_ + 1}: "
                      f"p50 {percentile(times, 0.5):.1f} ms, p99 {percentile(times, 0.99):.1f} ms, max {max(times):.1f} ms "
                      f"({len(times)} queries)", flush=True)
    finally:
        server.stop()
        if scaled:
            scaled.stop()
        shutil.rmtree(work, ignore_errors=True)


def children(pid):
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                for child in handle.read().split():
                    found.append(int(child))
                    found += children(int(child))
    except OSError:
        pass
    return found


def peak_rss(pid):
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def bench_thumbnails(args):
    work = tempfile.mkdtemp(prefix="nimbus-thumbs-")
    server = Server(args.binary, work, [])
    try:
        ids = []
        for index in range(24):
            path = f"{work}/photo{index}.jpg"
            subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", f"mandelbrot=size=4000x3000:start_scale={2 + index / 10}",
                            "-frames:v", "1", "-q:v", "3", path], check=True)
            ids.append(server.call("POST", f"/v1/upload?uploadType=media&name=photo{index}.jpg&mimeType=image/jpeg", raw=open(path, "rb").read())["id"])
        for index in range(4):
            path = f"{work}/clip{index}.mp4"
            subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=duration=20:size=1920x1080:rate=30", "-pix_fmt", "yuv420p", path], check=True)
            ids.append(server.call("POST", f"/v1/upload?uploadType=media&name=clip{index}.mp4&mimeType=video/mp4", raw=open(path, "rb").read())["id"])
            pdf = f"{work}/doc{index}.pdf"
            subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=1240x1754", "-frames:v", "1", f"{work}/page.png"], check=True)
            # A one-page PDF around the picture (poppler must decode its image: a real rendering job).
            subprocess.run(["python3", "-c", PDF_MAKER, f"{work}/page.png", pdf], check=True)
            ids.append(server.call("POST", f"/v1/upload?uploadType=media&name=doc{index}.pdf&mimeType=application/pdf", raw=open(pdf, "rb").read())["id"])
        peak = [0]
        done = threading.Event()

        def sample():
            while not done.is_set():
                for child in children(server.process.pid):
                    peak[0] = max(peak[0], peak_rss(child))
                time.sleep(0.003)

        sampler = threading.Thread(target=sample)
        sampler.start()
        pending = list(ids)
        failures = []
        lock = threading.Lock()

        def worker():
            while True:
                with lock:
                    if not pending:
                        return
                    item = pending.pop()
                try:
                    server.call("GET", f"/v1/files/{item}/thumbnail?size=256")
                except urllib.error.HTTPError as error:
                    failures.append((item, error.code))

        started = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        done.set()
        sampler.join()
        print(f"thumbnails: {len(ids)} made (24 photos 4000x3000, 4 videos 1080p, 4 PDFs) in {elapsed:.1f} s = {len(ids) / elapsed:.1f}/s; "
              f"largest worker {peak[0] / 2**20:.0f} MiB resident; failures {failures}", flush=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


PDF_MAKER = r"""
import subprocess, sys, zlib
png, out = sys.argv[1], sys.argv[2]
raw = subprocess.run(["ffmpeg", "-v", "error", "-i", png, "-f", "rawvideo", "-pix_fmt", "rgb24", "-"], check=True, capture_output=True).stdout
w, h = 1240, 1754
data = zlib.compress(raw)
objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
           b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << /XObject << /I 5 0 R >> >> /Contents 4 0 R >>",
           b"<< /Length 31 >>\nstream\nq 595 0 0 842 0 0 cm /I Do Q\nendstream",
           b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /FlateDecode /Length %d >>\nstream\n" % (w, h, len(data)) + data + b"\nendstream"]
body = b"%PDF-1.4\n"
offsets = []
for i, o in enumerate(objects):
    offsets.append(len(body)); body += b"%d 0 obj\n" % (i + 1) + o + b"\nendobj\n"
xref = len(body)
body += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1) + b"".join(b"%010d 00000 n \n" % o for o in offsets)
body += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
open(out, "wb").write(body)
"""


def bench_browser(args):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../Tests/browser"))
    from chromium import make_driver, wait
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    work = tempfile.mkdtemp(prefix="nimbus-bigfolder-")
    server = Server(args.binary, work, [])
    driver = make_driver()
    try:
        big = server.call("POST", "/v1/files", {"name": "Big", "mimeType": "application/vnd.nimbus.folder"})["id"]
        for batch in range(10):
            entries = [{"name": f"item-{batch * 1000 + i:05d}.txt", "parentId": big, "mimeType": "text/plain", "content": ""} for i in range(1000)]
            server.call("POST", "/v1/upload?uploadType=batch", {"files": entries})
        driver.get(server.base + "/")
        driver.find_element(By.ID, "login-username").send_keys("bench")
        driver.find_element(By.ID, "login-password").send_keys("benchmark pw")
        driver.find_element(By.ID, "login-submit").click()
        wait(driver, EC.visibility_of_element_located((By.ID, "files-view")))
        for round_ in range(args.rounds):
            driver.get(server.base + "/#/home")
            driver.refresh()
            wait(driver, EC.visibility_of_element_located((By.ID, "home-view")))
            driver.execute_script("window.__opened = performance.now(); location.hash = arguments[0]", f"#/files/{big}")
            wait(driver, EC.presence_of_element_located((By.CSS_SELECTOR, '#files-list [data-name="item-00000.txt"]')))
            first = driver.execute_script("return performance.now() - window.__opened")
            wait(driver, lambda d: d.find_element(By.ID, "list-status").text == "", timeout=60)
            whole = driver.execute_script("return performance.now() - window.__opened")
            rows = len(driver.find_elements(By.CSS_SELECTOR, "#files-list [role=row][data-name]"))
            print(f"browser: 10,000-item folder round {round_ + 1}: first row {first:.0f} ms, all 10,000 listed {whole:.0f} ms, {rows} rows in the page", flush=True)
    finally:
        driver.quit()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build-release/release/nimbus")
    parser.add_argument("--backend", default="both", choices=["embedded", "scaled", "both"])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-thumbnails", action="store_true")
    parser.add_argument("--skip-browser", action="store_true")
    parser.add_argument("--skip-search", action="store_true")
    args = parser.parse_args()
    args.binary = os.path.abspath(args.binary)
    args.sizes = [int(size) for size in args.sizes.split(",")]
    if not args.skip_search:
        for backend in (["embedded", "scaled"] if args.backend == "both" else [args.backend]):
            bench_search(args, backend)
    if not args.skip_thumbnails:
        bench_thumbnails(args)
    if not args.skip_browser:
        bench_browser(args)


if __name__ == "__main__":
    main()
