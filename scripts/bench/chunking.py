#!/usr/bin/env python3
"""B7: content-defined chunking speed against the `fastcdc` package from PyPI, same data, same run.

    swift build -c release --product nimbus-bench --scratch-path .build-release
    pip install fastcdc
    python3 scripts/bench/chunking.py [--mib 512] [--runs 3]

Both chunk the same random file, held in memory, on one core, with the same sizes (16 KiB minimum, 64 KiB average,
256 KiB maximum): first the chunker alone, then the chunker plus SHA-256 of every chunk (fastcdc's `hf=sha256`,
OpenSSL through hashlib; ours swift-crypto). fastcdc's fastest implementation (Cython, `fastcdc_cy`) is used.
"""
import argparse, hashlib, os, re, subprocess, tempfile, time

from fastcdc.fastcdc_cy import fastcdc_cy


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build-release/release/nimbus-bench")
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.NamedTemporaryFile(prefix="nimbus-chunking-") as handle:
        for _ in range(args.mib):
            handle.write(os.urandom(1 << 20))
        handle.flush()
        with open(handle.name, "rb") as source:
            data = source.read()
        gigabytes = len(data) / 1e9
        for run in range(1, args.runs + 1):
            # taskset: one core for both.
            ours = subprocess.run(["taskset", "-c", "0", args.binary, "chunking", "--file", handle.name],
                                  capture_output=True, text=True, check=True).stdout.strip()
            os.sched_setaffinity(0, {0})
            start = time.perf_counter()
            count = sum(1 for _ in fastcdc_cy(data, 16384, 65536, 262144))
            alone = time.perf_counter() - start
            start = time.perf_counter()
            hashed = sum(1 for _ in fastcdc_cy(data, 16384, 65536, 262144, hf=hashlib.sha256))
            with_hash = time.perf_counter() - start
            os.sched_setaffinity(0, set(range(os.cpu_count())))
            numbers = [float(x) for x in re.findall(r"([0-9.]+) GB/s", ours)]
            print(f"run {run}: {ours}")
            print(f"run {run}: PyPI fastcdc (Cython): {count} chunks; chunking {gigabytes / alone:.2f} GB/s; "
                  f"chunking + SHA-256 {gigabytes / with_hash:.2f} GB/s ({hashed} chunks)")
            print(f"run {run}: ratio nimbus / fastcdc: chunking {numbers[0] / (gigabytes / alone):.2f}x, "
                  f"with SHA-256 {numbers[1] / (gigabytes / with_hash):.2f}x", flush=True)


if __name__ == "__main__":
    main()
