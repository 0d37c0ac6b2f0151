"""What %remember and %%store decide and say around the engine's remember: %%store's NAME (as typed, and
per notebook) and the line shown for a RememberResult in the magics' words."""

from __future__ import annotations

from .errors import IpyMemoryError


def store_name(text: str) -> str:
    """%%store's NAME as typed, less one pair of quotes around all of it: no shell escapes, so that
    `C:\\notes\\x` keeps its backslashes."""
    text = text.strip()
    quoted = len(text) > 1 and text[0] == text[-1] and text[0] in "'\"" and text[0] not in text[1:-1]
    return text[1:-1] if quoted else text


def misplaced_option(name: str, options) -> str | None:
    """An option of %%store typed after NAME (`%%store notes --force`), which would become part of it."""
    return next((tok for tok in name.split() if tok.split("=", 1)[0] in options), None)


def replacement_metadata(engine, memory_id: str, provenance: dict) -> dict:
    """%remember --replace ID's metadata: the memory's own, with this write's provenance over it (the text
    changes, not what was said of the memory); a %%store NAME's memory stays that notebook's."""
    try:
        old = engine.get(memory_id).metadata or {}
    except IpyMemoryError:         # (no such memory, a bad id: the write itself says so)
        return provenance
    merged = {**old, **provenance}
    if "name" in old:
        merged.pop("notebook", None)
        merged.update({k: old[k] for k in ("name", "notebook") if k in old})
    return merged


def named_memory(engine, name: str, meta: dict) -> tuple[str | None, object]:
    """%%store NAME's memory in any scope (the first 10,000 memories looked at: a re-run with another
    scope moves it), NAME recorded in `meta` (the new memory's provenance): (the id of the one stored
    under NAME from meta's notebook, or None; if none, one stored under NAME from another notebook, or
    None). A name is per notebook: two notebooks' `notes` are two memories, and neither overwrites the other."""
    meta["name"] = name
    notebook, offset, other = meta.get("notebook"), 0, None
    while offset < 10_000:
        page = engine.list_memories(scope="session+project+global", limit=200, offset=offset)
        for m in page:
            theirs = m.metadata or {}
            if theirs.get("name") == name and theirs.get("source") == "ipython":
                if theirs.get("notebook") == notebook:      # (None == None: neither from a notebook it knows)
                    return m.id, None
                other = other or m
        offset += len(page)
        if not len(page) or offset >= page.total:
            break
    return None, other


def remember_summary(result, typed: str, *, replaced: bool = False, kept=None) -> str:
    """The line a magic shows for a RememberResult: the engine's summary, but a near-duplicate's hint names
    the magic's --force (the engine's names the Python argument, force=True); 'replaced' when the magic
    overwrote a memory; and `kept`, another notebook's memory of the same %%store NAME, named as left alone."""
    text = result.summary()
    if result.duplicate:
        return f"{text.split(';')[0]}; to store it anyway: {typed} --force ..."
    if replaced and text.startswith("stored "):
        text = "replaced " + text[len("stored "):]
    if kept is not None and result.stored:
        where = kept.metadata.get("notebook") or "outside any notebook"
        text += f"; {kept.id} ({kept.metadata['name']!r} from {where}) is kept: %%store names are per notebook"
    return text


class Said:
    """The line the magics showed for the last RememberResult they returned (remember_summary), so that the
    displayhook shows that result in the same words; any other RememberResult shows the engine's summary."""

    def __init__(self):
        self.result, self.text = None, ""

    def __call__(self, result, typed: str, **how) -> str:
        self.result, self.text = result, remember_summary(result, typed, **how)
        return self.text

    def pretty(self, obj, p, cycle) -> None:
        p.text(self.text if obj is self.result else obj.summary())
