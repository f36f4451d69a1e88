"""Cache faults injected under the warm-up and cache tools, run as the separate programs users run.

Every fault must end with a correct kernel: the warm-up exits 0 with no failed specialisation,
nothing it leaves behind is trusted by a later run, and `mamba3-jit-cache verify` is clean once a
normal run has followed. The tests run as root on CI, where permission bits stop nothing, so the
faults are made in ways that hold for root too: a path below a regular file, RLIMIT_FSIZE for a
full disk, files written by hand for damaged entries and dead writers, and real SIGKILLs.

They compile only the smoke kernel (a fraction of a second), except one that kills a warm-up
during a real specialisation's compile.
"""
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("MAMBA3_JIT_BUILD_DIR") or REPO / "build")
WARMUP = BUILD / "mamba3-jit-warmup"
CACHE_TOOL = BUILD / "mamba3-jit-cache"

pytestmark = pytest.mark.skipif(
    not (WARMUP.is_file() and CACHE_TOOL.is_file()),
    reason=f"{WARMUP.name} and {CACHE_TOOL.name} not built in {BUILD} (run tools/build.sh)")

SMOKE = "^smoke$"
ARCH = "sm_90a"
FOREIGN_ARCH = "sm_80"
TIMEOUT = 120
SUMMARY = re.compile(r"^warmup: (\d+) specializations, (\d+) compiled, (\d+) cached, (\d+) failed$")
VERIFY = re.compile(r"^verify: (\d+) entries, (\d+) corrupt$", re.M)


def _env():
    env = dict(os.environ)
    # Warnings are what the faults are expected to produce; a user's level must not hide them.
    env["MAMBA3_JIT_LOG_LEVEL"] = "warn"
    return env


@dataclass
class Warmup:
    rc: int
    out: str
    err: str
    n: int = -1
    compiled: int = -1
    cached: int = -1
    failed: int = -1

    def __str__(self):
        return f"exit {self.rc}\nstdout:\n{self.out}\nstderr:\n{self.err}"


def _parse_warmup(proc_rc, out, err):
    r = Warmup(proc_rc, out, err)
    lines = out.strip().splitlines()
    m = SUMMARY.match(lines[-1]) if lines else None
    if m:
        r.n, r.compiled, r.cached, r.failed = map(int, m.groups())
    return r


def _warmup_cmd(cache_dir, filter_=SMOKE, arch=ARCH, extra=()):
    return [str(WARMUP), "--arch", arch, "--jobs", "1", "--cache-dir", str(cache_dir),
            "--filter", filter_, *extra]


def warmup(cache_dir, filter_=SMOKE, arch=ARCH, extra=(), preexec_fn=None):
    p = subprocess.run(_warmup_cmd(cache_dir, filter_, arch, extra), capture_output=True,
                       text=True, env=_env(), timeout=TIMEOUT, preexec_fn=preexec_fn)
    return _parse_warmup(p.returncode, p.stdout, p.stderr)


def start_warmup(cache_dir, filter_=SMOKE):
    return subprocess.Popen(_warmup_cmd(cache_dir, filter_), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())


def assert_survived(r, compiled=None, cached=None):
    """Exit 0, one specialisation, none failed: the kernel was produced."""
    assert r.rc == 0, str(r)
    assert (r.n, r.failed) == (1, 0), str(r)
    assert r.compiled + r.cached == 1, str(r)
    if compiled is not None:
        assert r.compiled == compiled, str(r)
    if cached is not None:
        assert r.cached == cached, str(r)


def cache_tool(cache_dir, *args):
    p = subprocess.run([str(CACHE_TOOL), "--cache-dir", str(cache_dir), *args],
                       capture_output=True, text=True, timeout=TIMEOUT)
    # A signal (negative code) would be a crash; everything else is judged by the caller.
    assert p.returncode >= 0, f"{args} died by signal {-p.returncode}: {p.stderr}"
    return p


def verify(cache_dir):
    """(exit code, entries, corrupt entries, output)."""
    p = cache_tool(cache_dir, "verify")
    m = VERIFY.search(p.stdout)
    assert m, p.stdout + p.stderr
    return p.returncode, int(m.group(1)), int(m.group(2)), p.stdout


def assert_clean(cache_dir, entries):
    rc, n, bad, out = verify(cache_dir)
    assert (rc, n, bad) == (0, entries, 0), out


def stat(cache_dir):
    out = cache_tool(cache_dir, "stat").stdout
    m = re.search(r"^temporary files: (\d+) \((\d+) stale\)$", out, re.M)
    o = re.search(r"^orphaned cubins: (\d+)$", out, re.M)
    return {"temp": int(m.group(1)), "stale": int(m.group(2)), "orphans": int(o.group(1))}


def prune(cache_dir):
    p = cache_tool(cache_dir, "prune", "--max-bytes", str(1 << 40))
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def temp_files(cache_dir):
    return sorted(p.name for p in Path(cache_dir).iterdir() if p.name.startswith(".tmp."))


def smoke_key(tmp_path, arch=ARCH):
    # Asked of the tool rather than computed here: the key covers the embedded headers and the
    # NVRTC version, which only the built runtime knows.
    p = subprocess.run(_warmup_cmd(tmp_path / f"list-{arch}", arch=arch, extra=("--list",)),
                       capture_output=True, text=True, env=_env(), timeout=TIMEOUT, check=True)
    return p.stdout.split()[0]


@dataclass
class Entry:
    key: str
    cubin: bytes
    manifest: str

    def place(self, cache_dir, key=None, manifest=None):
        cache_dir = Path(cache_dir)
        cache_dir.mkdir(parents=True, exist_ok=True)
        key = key or self.key
        (cache_dir / f"{key}.cubin").write_bytes(self.cubin)
        (cache_dir / f"{key}.json").write_text(self.manifest if manifest is None else manifest)
        return key


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A valid smoke entry per architecture, compiled once for the module."""
    entries = {}
    for arch in (ARCH, FOREIGN_ARCH):
        d = tmp_path_factory.mktemp(f"pristine-{arch}")
        assert_survived(warmup(d, arch=arch), compiled=1)
        (manifest,) = d.glob("*.json")
        key = manifest.stem
        entries[arch] = Entry(key, (d / f"{key}.cubin").read_bytes(), manifest.read_text())
    assert entries[ARCH].key != entries[FOREIGN_ARCH].key
    return entries


def assert_holds(cache_dir, entry):
    """The entry on disk is the correct one, byte for byte."""
    assert (Path(cache_dir) / f"{entry.key}.cubin").read_bytes() == entry.cubin
    assert f'"arch": "{ARCH}"' in (Path(cache_dir) / f"{entry.key}.json").read_text()


def _host_tag():
    # As the runtime writes it into temporary file names, so that prune() recognises this host.
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "unknown"


def _dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


# ------------------------------------------------------------------------------------------------
# an unusable directory
# ------------------------------------------------------------------------------------------------

def test_unusable_cache_directory(tmp_path, pristine, reliability):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    unusable = blocker / "cache"  # cannot be created, not even by root

    r = warmup(unusable)
    # Filling the cache is the warm-up's only job, so it refuses, by name, rather than compile
    # into memory and exit; the runtime itself falls back to memory (tests/cpp/test_cache.cpp).
    assert r.rc == 1, str(r)
    assert "cannot be written" in r.err and str(unusable) in r.err, str(r)
    assert blocker.read_text() == "x"
    assert_clean(unusable, 0)
    assert stat(unusable)["temp"] == 0
    listed = subprocess.run(_warmup_cmd(unusable, extra=("--list",)), capture_output=True,
                            text=True, env=_env(), timeout=TIMEOUT)
    assert listed.returncode == 0 and "missing" in listed.stdout, listed.stdout + listed.stderr

    usable = tmp_path / "cache"
    assert_survived(warmup(usable), compiled=1)
    assert_clean(usable, 1)
    assert_holds(usable, pristine[ARCH])
    reliability.record("fault", "unusable cache directory")


def test_unwritable_entry_path(tmp_path, pristine, reliability):
    # The directory is fine but the entry's own path is taken by a directory, so the publish
    # fails after the compile succeeded.
    d = tmp_path / "cache"
    key = pristine[ARCH].key
    (d / f"{key}.cubin").mkdir(parents=True)
    (d / f"{key}.cubin" / "keep").write_text("x")

    r = warmup(d)
    assert_survived(r, compiled=1)
    assert "cannot write to kernel cache directory" in r.err, str(r)
    assert temp_files(d) == []
    assert_clean(d, 0)

    shutil.rmtree(d / f"{key}.cubin")
    assert_survived(warmup(d), compiled=1)
    assert_clean(d, 1)
    assert_holds(d, pristine[ARCH])
    reliability.record("fault", "unwritable entry path")


# ------------------------------------------------------------------------------------------------
# a full disk
# ------------------------------------------------------------------------------------------------

def _full_disk(limit):
    """Every write past `limit` bytes of a file fails with EFBIG, as on a full disk."""
    def apply():
        # Ignored, the signal leaves the error to the writer; the disposition survives exec.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.parametrize("limit", [0, 1000], ids=["nothing-fits", "partial-write"])
def test_full_disk(tmp_path, pristine, reliability, limit):
    d = tmp_path / "cache"
    r = warmup(d, preexec_fn=_full_disk(limit))
    assert_survived(r, compiled=1)
    assert "cannot write to kernel cache directory" in r.err and "File too large" in r.err, str(r)
    # Nothing half-written is left for a later run to find.
    assert sorted(p.name for p in d.iterdir()) == []
    assert_clean(d, 0)

    assert_survived(warmup(d), compiled=1)
    assert_clean(d, 1)
    assert_holds(d, pristine[ARCH])
    assert_survived(warmup(d), cached=1)
    reliability.record("fault", f"full disk ({'no byte' if limit == 0 else 'part of a file'} fits)")


def test_full_disk_while_replacing_a_corrupt_entry(tmp_path, pristine, reliability):
    d = tmp_path / "cache"
    key = pristine[ARCH].place(d)
    cubin = d / f"{key}.cubin"
    cubin.write_bytes(pristine[ARCH].cubin[:len(pristine[ARCH].cubin) // 2])
    assert verify(d)[:3] == (1, 1, 1)

    r = warmup(d, preexec_fn=_full_disk(0))
    assert_survived(r, compiled=1)
    assert "recompiled corrupt entry" in r.out, str(r)
    # The damaged entry is out of the way even though its replacement could not be written.
    assert temp_files(d) == []
    assert_clean(d, 0)

    assert_survived(warmup(d), compiled=1)
    assert_clean(d, 1)
    assert_holds(d, pristine[ARCH])
    reliability.record("fault", "full disk while replacing a corrupt entry")


# ------------------------------------------------------------------------------------------------
# damaged and foreign entries
# ------------------------------------------------------------------------------------------------

def _flip(path):
    b = bytearray(path.read_bytes())
    for i in range(len(b) // 2, len(b) // 2 + 16):
        b[i] ^= 0x5A
    path.write_bytes(bytes(b))


def _truncate(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


def _edit_manifest(field, value):
    def edit(cubin, manifest):
        text, n = re.subn(rf'"{field}": [^,\n]*', f'"{field}": {value}', manifest.read_text())
        assert n == 1
        manifest.write_text(text)
    return edit


DAMAGES = {
    "flipped cubin bytes": lambda cubin, manifest: _flip(cubin),
    "truncated cubin": lambda cubin, manifest: _truncate(cubin, cubin.stat().st_size // 2),
    "empty cubin": lambda cubin, manifest: _truncate(cubin, 0),
    "missing cubin": lambda cubin, manifest: cubin.unlink(),
    "truncated manifest": lambda cubin, manifest: _truncate(manifest, 40),
    "empty manifest": lambda cubin, manifest: _truncate(manifest, 0),
    "binary garbage manifest": lambda cubin, manifest: manifest.write_bytes(bytes(range(256))),
    # Past the range of a 64-bit integer: this one used to abort verify and fail the warm-up.
    "manifest number out of range": _edit_manifest("cubin_size", "9999999999999999999"),
    "manifest of another format version": _edit_manifest("format_version", "999999"),
    "manifest with a wrong checksum": _edit_manifest("cubin_sha256", '"' + "0" * 64 + '"'),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_entry_is_quarantined_and_recompiled(tmp_path, pristine, reliability, damage):
    d = tmp_path / "cache"
    key = pristine[ARCH].place(d)
    DAMAGES[damage](d / f"{key}.cubin", d / f"{key}.json")
    rc, n, bad, out = verify(d)
    assert (rc, n, bad) == (1, 1, 1), out

    r = warmup(d)
    assert_survived(r, compiled=1)
    assert f"recompiled corrupt entry {key}" in r.out, str(r)
    assert "is corrupt" in r.err, str(r)
    assert_clean(d, 1)
    assert_holds(d, pristine[ARCH])
    assert list((d / "quarantine").glob(f"{key}.*.reason")), "the damaged entry was not kept aside"

    assert_survived(warmup(d), cached=1)
    pruned = re.search(r"(\d+) quarantined files", prune(d))
    assert pruned and int(pruned.group(1)) >= 2, "the quarantine was not pruned"
    assert not (d / "quarantine").exists()
    assert_clean(d, 1)
    reliability.record("fault", f"corrupt entry: {damage}")


@pytest.mark.parametrize("rewrite_key", [False, True], ids=["as-copied", "key-rewritten"])
def test_foreign_arch_entry_is_not_trusted(tmp_path, pristine, reliability, rewrite_key):
    # A valid sm_80 entry under the sm_90a key, e.g. a cache directory shared between machines
    # and mixed up by hand; with the key rewritten, only the recorded arch gives it away.
    ours, foreign = pristine[ARCH], pristine[FOREIGN_ARCH]
    d = tmp_path / "cache"
    manifest = foreign.manifest.replace(foreign.key, ours.key) if rewrite_key else None
    foreign.place(d, key=ours.key, manifest=manifest)
    if not rewrite_key:
        rc, n, bad, out = verify(d)
        assert (rc, n, bad) == (1, 1, 1) and "belongs to key" in out, out
    # With the key rewritten the entry is intact as a file, so verify (which checks integrity,
    # not which source the entry came from) has nothing to object to; the warm-up does.

    r = warmup(d)
    assert_survived(r, compiled=1)
    assert f"recompiled corrupt entry {ours.key}" in r.out, str(r)
    expected_reason = f"manifest arch {FOREIGN_ARCH} != {ARCH}" if rewrite_key else "belongs to key"
    assert expected_reason in r.err, str(r)
    assert_clean(d, 1)
    assert_holds(d, ours)
    assert_survived(warmup(d), cached=1)
    reliability.record("fault", f"foreign-arch entry ({'key rewritten' if rewrite_key else 'copied'})")


# ------------------------------------------------------------------------------------------------
# killed writers
# ------------------------------------------------------------------------------------------------

def test_stale_temp_files_of_a_killed_writer(tmp_path, pristine, reliability):
    ours = pristine[ARCH]
    d = tmp_path / "cache"
    d.mkdir()
    host, dead = _host_tag(), _dead_pid()
    # .tmp.<host>.<pid>.<tid>.<random>.<ext>, as the runtime names them.
    dead_stem = f".tmp.{host}.{dead}.{dead}.00000000000000aa"
    (d / f"{dead_stem}.cubin").write_bytes(ours.cubin[:len(ours.cubin) // 2])
    (d / f"{dead_stem}.json").write_text(ours.manifest[:len(ours.manifest) // 2])
    old = d / ".tmp.otherhost.12345.12345.00000000000000bb.cubin"
    old.write_bytes(ours.cubin)
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    # A writer that is still alive (this process) must keep its file.
    live = d / f".tmp.{host}.{os.getpid()}.{threading.get_native_id()}.00000000000000cc.cubin"
    live.write_bytes(b"in progress")
    # Killed between its two renames: a cubin without a manifest (cut short, to be sure it is
    # not trusted for its name alone).
    (d / f"{ours.key}.cubin").write_bytes(ours.cubin[:64])
    assert stat(d) == {"temp": 4, "stale": 3, "orphans": 1}
    assert_clean(d, 0)

    assert_survived(warmup(d), compiled=1)
    assert_clean(d, 1)
    assert_holds(d, ours)
    assert "3 temporary files" in prune(d)
    assert temp_files(d) == [live.name]
    assert stat(d) == {"temp": 1, "stale": 0, "orphans": 0}
    assert_clean(d, 1)
    reliability.record("fault", "stale temporary files of a killed writer")


def _slow_specialisation(tmp_path):
    p = subprocess.run(_warmup_cmd(tmp_path / "list", filter_=".", extra=("--list",)),
                       capture_output=True, text=True, env=_env(), timeout=TIMEOUT, check=True)
    names = [line.split(None, 2)[2] for line in p.stdout.splitlines()]
    scans = [n for n in names if n.startswith("m3_chunk_scan")]
    if not scans:
        pytest.skip("no chunk-scan specialisation to kill mid-compile")
    # v8's split products make it the slowest compile (about 3x v1's), so the kill still lands
    # inside NVRTC on a fast CPU.
    slowest = [n for n in scans if n.startswith("m3_chunk_scan[v8,")] or scans
    return "^" + re.escape(slowest[0]) + "$"


def test_warmup_killed_mid_compile(tmp_path, reliability):
    # The kill lands halfway through the time this compile takes on this machine: inside NVRTC,
    # whatever the CPU (a fixed delay let fast machines finish first).
    filter_ = _slow_specialisation(tmp_path)
    start = time.monotonic()
    assert_survived(warmup(tmp_path / "timing", filter_), compiled=1)
    span = time.monotonic() - start
    d = tmp_path / "cache"
    p = start_warmup(d, filter_)
    time.sleep(span / 2)
    if p.poll() is not None:
        out, err = p.communicate()
        assert p.returncode == 0, f"warm-up failed:\n{out}\n{err}"
        pytest.skip(f"the compile finished before it could be killed (a whole run took {span:.2f} s)")
    p.kill()
    p.communicate(timeout=TIMEOUT)
    assert p.returncode == -signal.SIGKILL
    assert_clean(d, 0)

    assert_survived(warmup(d, filter_), compiled=1)
    assert_clean(d, 1)
    prune(d)
    assert stat(d)["temp"] == 0
    reliability.record("fault", "warm-up killed mid-compile")


def test_warmup_killed_at_any_point(tmp_path, pristine, reliability):
    # Kills spread over a whole smoke warm-up (start-up, compile, the write and the renames):
    # whatever moment a kill lands on, no later run sees a corrupt entry.
    start = time.monotonic()
    assert_survived(warmup(tmp_path / "timing"), compiled=1)
    span = time.monotonic() - start
    killed = 0
    for i in range(10):
        d = tmp_path / f"cache{i}"
        p = start_warmup(d)
        time.sleep(span * i / 8)
        if p.poll() is None:
            p.kill()
            killed += 1
        p.communicate(timeout=TIMEOUT)
        assert p.returncode in (0, -signal.SIGKILL), p.returncode
        rc, n, bad, out = verify(d)
        assert (rc, bad) == (0, 0), out

        assert_survived(warmup(d))
        assert_clean(d, 1)
        assert_holds(d, pristine[ARCH])
        prune(d)
        assert stat(d)["temp"] == 0
    assert killed > 0
    reliability.record("fault", "warm-up killed at an arbitrary point")


# ------------------------------------------------------------------------------------------------
# racing processes
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("start", ["empty", "corrupt"])
def test_eight_warmups_racing_on_one_key(tmp_path, pristine, reliability, start):
    d = tmp_path / "cache"  # created by the racers themselves when empty
    if start == "corrupt":
        key = pristine[ARCH].place(d)
        _flip(d / f"{key}.cubin")
    procs = [start_warmup(d) for _ in range(8)]
    runs = []
    for p in procs:
        out, err = p.communicate(timeout=TIMEOUT)
        runs.append(_parse_warmup(p.returncode, out, err))
    for r in runs:
        assert_survived(r)
    assert sum(r.compiled for r in runs) >= 1
    assert_clean(d, 1)
    assert_holds(d, pristine[ARCH])
    assert temp_files(d) == []
    if start == "empty":
        assert not (d / "quarantine").exists()
    assert_survived(warmup(d), cached=1)
    reliability.record("fault", f"8 warm-ups racing on one key ({start} start)")
