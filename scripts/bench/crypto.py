#!/usr/bin/env python3
"""AES-256-GCM throughput per core, Nimbus (swift-crypto / BoringSSL) against Python's `cryptography`
(OpenSSL) on the same amount of data in the same run, 64 KiB segments, one core each; then Nimbus's encrypted files
(encrypt, fsync, decrypt) against a plain copy of the same file.

    swift build -c release --product nimbus-bench --scratch-path .build-release
    python3 scripts/bench/crypto.py [--mib 256] [--runs 3]
"""
import argparse, os, subprocess, tempfile, time

parser = argparse.ArgumentParser()
parser.add_argument("--binary", default=".build-release/release/nimbus-bench")
parser.add_argument("--mib", type=int, default=256)
parser.add_argument("--runs", type=int, default=3)
args = parser.parse_args()

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

with tempfile.TemporaryDirectory() as work:
    path = os.path.join(work, "data.bin")
    with open(path, "wb") as f:
        f.write(os.urandom(args.mib << 20))
    for run in range(args.runs):
        print(f"run {run + 1}:")
        print("  " + subprocess.run([args.binary, "crypto", "--mib", str(args.mib), "--file", path], capture_output=True, text=True, check=True).stdout.strip().replace("\n", "\n  "))
        data = open(path, "rb").read()
        key = AESGCM.generate_key(256)
        aes = AESGCM(key)
        seg = 64 * 1024
        nonce = os.urandom(12)
        start = time.perf_counter()
        for o in range(0, len(data), seg):  # measured as Nimbus's: each box dropped
            aes.encrypt(nonce, data[o:o + seg], bytes([o & 0xff]))
        sealing = time.perf_counter() - start
        boxes = [(n := os.urandom(12), aes.encrypt(n, data[o:o + seg], bytes([o & 0xff]))) for o in range(0, len(data), seg)]
        start = time.perf_counter()
        total = sum(len(aes.decrypt(n, box, bytes([(i * seg) & 0xff]))) for i, (n, box) in enumerate(boxes))
        opening = time.perf_counter() - start
        gb = len(data) / 1e9
        print(f"  cryptography (OpenSSL) AES-256-GCM, 64 KiB segments, one core: seal {gb / sealing:.2f} GB/s; open {gb / opening:.2f} GB/s ({'ok' if total == len(data) else 'MISMATCH'})")
