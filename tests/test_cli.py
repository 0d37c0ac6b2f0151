import json
import subprocess
import sys

from ipy_memory import _kernels


def cli(*args, check=True):
    return subprocess.run([sys.executable, "-m", "ipy_memory", *args], capture_output=True, text=True,
                          timeout=120, check=check)


def test_demo_prints_block_and_stats():
    out = cli("demo").stdout
    assert '<memory-recall count="' in out and "</memory-recall>" in out
    assert "光遗传学/艺术应用" in out and "documents: 4" in out


def test_store_recall_list_forget_stats_json(tmp_path):
    d = str(tmp_path)
    stored = json.loads(cli("store", "The staging bucket is s3://acme-staging", "--data-dir", d, "--json",
                            "--project", "p").stdout)
    hits = json.loads(cli("recall", "staging bucket", "--data-dir", d, "--json", "--project", "p").stdout)
    assert hits[0]["document_id"] == stored["id"]
    listed = json.loads(cli("list", "--data-dir", d, "--json", "--project", "p").stdout)
    assert listed["total"] == 1
    assert json.loads(cli("stats", "--data-dir", d, "--json").stdout)["documents"] == 1
    assert "staging" in cli("inspect", "--data-dir", d).stdout
    backup = tmp_path / "copy.sqlite3"
    cli("backup", str(backup), "--data-dir", d)
    assert backup.stat().st_size > 0
    assert json.loads(cli("forget", stored["id"], "--data-dir", d, "--json").stdout)["removed_nodes"] == 1
    bad = cli("forget", "nope", "--data-dir", d, check=False)
    assert bad.returncode == 2 and "not a memory id" in bad.stderr


def test_selftest():
    out = cli("selftest").stdout
    assert "all ok" in out
    assert f"kernels: {'compiled' if _kernels.COMPILED else 'numpy'}" in out


def test_backup_refuses_live_files_and_files_that_are_not_backups(tmp_path):
    from ipy_memory import MemoryEngine
    d, notes = tmp_path / "store", tmp_path / "notes.txt"
    notes.write_text("someone's notes")
    with MemoryEngine(d, project="p") as mem, MemoryEngine(tmp_path / "other", project="p") as other:
        mem.remember("the nightly job loads from the warehouse")
        other.remember("the other store's memory")
        wal = mem.store.path.with_name(mem.store.path.name + "-wal")
        for out in (wal, other.store.path, notes, "/dev/null"):
            bad = cli("backup", str(out), "--data-dir", str(d), check=False)
            assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr, out
            assert bad.stderr.count("\n") == 1 and not bad.stdout
        assert [m.content for m in mem.list_memories()] == ["the nightly job loads from the warehouse"]
        assert [m.content for m in other.list_memories()] == ["the other store's memory"]
    assert notes.read_text() == "someone's notes"
    good = tmp_path / "copy.sqlite3"
    for _ in range(2):                                  # an earlier backup is replaced
        assert cli("backup", str(good), "--data-dir", str(d)).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.sqlite3", "notes.txt", "other", "store"]


def test_list_and_inspect_print_no_terminal_control_codes(tmp_path):
    """A stored title's ESC / BEL sequences (set the window title, change colours) reached the terminal."""
    d = str(tmp_path / "m")
    cli("store", "--data-dir", d, "--title", "evil \x1b]0;pwned\x07 \x1b[31mred\nsecond line", "kelp notes")
    for cmd in ("list", "inspect"):
        out = cli(cmd, "--data-dir", d).stdout
        assert "\x1b" not in out and "\x07" not in out, (cmd, out)
        assert sum("evil" in line for line in out.splitlines()) == 1 and "second line" in out


def test_version_and_list_text(tmp_path):
    from ipy_memory import __version__
    assert cli("--version").stdout.strip().endswith(__version__)
    d = str(tmp_path / "m")
    cli("store", "--data-dir", d, "kelp notes for the version test")
    out = cli("list", "--data-dir", d).stdout
    assert out.count("of 1") == 1, out          # the page was counted twice: 'memories 1–1 of 1' ... '(1 of 1)'
