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


def test_store_scope_session_needs_session_and_session_reaches_it_again(tmp_path):
    """Each CLI run is a new session: a session memory stored without --session was unreachable."""
    d = str(tmp_path / "m")
    bad = cli("store", "on-call rota note", "--scope", "session", "--data-dir", d, check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1
    assert "--session" in bad.stderr and not bad.stdout and not (tmp_path / "m").exists()
    stored = json.loads(cli("store", "on-call rota note", "--scope", "session", "--session", "s1",
                            "--data-dir", d, "--json").stdout)
    hits = json.loads(cli("recall", "on-call rota", "--scope", "session", "--session", "s1", "--data-dir", d,
                          "--json").stdout)
    assert [h["document_id"] for h in hits] == [stored["id"]] and hits[0]["space"] == "session:s1"
    assert json.loads(cli("list", "--session", "s1", "--data-dir", d, "--json").stdout)["total"] == 1
    assert json.loads(cli("list", "--session", "s2", "--data-dir", d, "--json").stdout)["total"] == 0


def test_selftest_refuses_data_dir_and_project(tmp_path):
    """selftest runs on a temporary store: --data-dir / --project were accepted and silently ignored."""
    for opt in ("--data-dir", "--project"):
        bad = cli("selftest", opt, str(tmp_path / "x"), check=False)
        assert bad.returncode == 2 and f"unrecognized arguments: {opt}" in bad.stderr and not bad.stdout
    assert json.loads(cli("selftest", "--json").stdout)["ok"] is True
    assert list(tmp_path.iterdir()) == []


def test_read_only_commands_on_a_missing_store_say_what_to_do(tmp_path):
    (tmp_path / "empty").mkdir()
    for d, why in ((tmp_path / "empty", "nothing has been stored there yet"),
                   (tmp_path / "typo", "that directory does not exist")):
        for args in (["list"], ["stats"], ["inspect"], ["backup", str(tmp_path / "b.sqlite3")],
                     ["recall", "vpn", "--read-only"]):
            bad = cli(*args, "--data-dir", str(d), check=False)
            assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and not bad.stdout, (args, bad.stderr)
            assert bad.stderr.startswith(f"error: no memory store in {d}: {why}. Check --data-dir"), bad.stderr
            assert f"store TEXT --data-dir {d}" in bad.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"] and not any((tmp_path / "empty").iterdir())


def test_recall_limit_help_tells_the_max_tokens_default(tmp_path):
    """The help said 'default 10', but with --max-tokens and no -n the engine returns up to 50 hits."""
    from ipy_memory import MemoryEngine
    help_text = " ".join(cli("recall", "--help").stdout.split())
    assert "default 10; with --max-tokens up to 50" in help_text
    d = tmp_path / "m"
    with MemoryEngine(d, project="p") as mem:
        for i in range(12):
            mem.remember(f"kelp tank {i} note: pump {i * 7} litres", force=True)
    n = [len(json.loads(cli("recall", "kelp tank", "--data-dir", str(d), "--project", "p", "--json", *extra).stdout))
         for extra in ([], ["--max-tokens", "100000"])]
    assert n == [10, 12]
