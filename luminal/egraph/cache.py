"""On-disk compile cache: saturated e-graph and chosen plans, keyed by what determines them.

Key = sha256(program text + backend name + device + luminal version, with a digest of the
compiler and backend sources, + cache format). An entry is a directory `<root>/<key[:2]>/<key>/`
holding `egraph.json.gz` (egglog's serialized e-graph) and `plan-<search key>.json` (the chosen
LLIR per search settings). Every file is written to a temp file and moved into place with
os.replace, and carries its own key and a checksum of its payload: anything unreadable, corrupt or
stale is ignored (logged) and rebuilt, never trusted; so is a file whose checksum holds but whose
body does not have the fields and types a reader needs (`_valid_egraph`, `_valid_plan`). A root
that is not a usable directory (a regular file, no permission) turns the cache off for that
compile, logged once per path. The cache keeps the MAX_ENTRIES most recently written entries.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from luminal.egraph.llir import LLIRGraph
from luminal.hlir.op import Op

log = logging.getLogger(__name__)
FORMAT = 1
MAX_ENTRIES = 2000  # compiled graphs kept; older entries are pruned when a new e-graph is stored


def cache_key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in (f"luminal-cache-v{FORMAT}", *parts):
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


_UNUSABLE: set[str] = set()  # roots already reported as unusable (log once per path)


class CompileCache:
    def __init__(self, root: Path | None):
        self.root = root if root is None or _usable_root(root) else None

    @property
    def enabled(self) -> bool:
        return self.root is not None

    def _dir(self, key: str) -> Path:
        assert self.root is not None
        return self.root / key[:2] / key

    # -- e-graph -------------------------------------------------------------------------------------
    def load_egraph(self, key: str) -> dict | None:
        data = self._load(key, "egraph.json.gz", compressed=True)
        problem = None if data is None else _valid_egraph(data)
        if problem is not None:
            log.warning("compile cache: ignoring malformed e-graph %s (%s)", key[:12], problem)
            return None
        return data

    def has_egraph(self, key: str) -> bool:
        """Whether an e-graph entry exists for `key` (not whether it is intact: loading checks that)."""
        return self.root is not None and (self._dir(key) / "egraph.json.gz").exists()

    def store_egraph(self, key: str, data: dict) -> None:
        self._store(key, "egraph.json.gz", data, compressed=True)
        self.prune()

    def prune(self, max_entries: int = MAX_ENTRIES) -> int:
        """Remove the least recently written entries beyond `max_entries`; returns how many went."""
        if self.root is None:
            return 0
        try:
            subs = [sub for sub in self.root.iterdir() if sub.is_dir()]
        except OSError as e:  # no longer a directory, or no permission
            log.warning("compile cache: cannot list %s (%s); not pruning", self.root, e)
            return 0
        entries: list[tuple[float, Path]] = []
        for sub in subs:
            try:
                entries += [(d.stat().st_mtime, d) for d in sub.iterdir() if d.is_dir()]
            except OSError:  # removed by a concurrent prune while we looked: nothing to count
                continue
        if len(entries) <= max_entries:
            return 0
        entries.sort(key=lambda md: md[0])
        gone = entries[: len(entries) - max_entries]
        for _, d in gone:
            shutil.rmtree(d, ignore_errors=True)
        return len(gone)

    # -- plans ---------------------------------------------------------------------------------------
    def load_plan(
        self, key: str, search_key: str, ops: Mapping[str, type[Op]]
    ) -> tuple[LLIRGraph, dict] | tuple[None, None]:
        """The stored plan and its compile facts (e-graph sizes, search summary), or (None, None)."""
        payload = self._load(key, f"plan-{search_key}.json", compressed=False)
        if payload is None:
            return None, None
        try:
            problem = _valid_plan(payload)
            if problem is not None:
                raise ValueError(problem)
            llir = LLIRGraph.from_json(payload["llir"], ops)
            llir.validate()
            if llir.fingerprint() != payload["fingerprint"]:
                raise ValueError("fingerprint mismatch")
        except Exception as e:  # noqa: BLE001 - any decoding failure means "rebuild"
            log.warning("compile cache: ignoring unusable plan %s/%s (%s)", key[:12], search_key, e)
            return None, None
        return llir, dict(payload.get("meta", {}))

    def store_plan(self, key: str, search_key: str, llir: LLIRGraph, meta: Mapping[str, object]) -> None:
        body = {"llir": llir.to_json(), "fingerprint": llir.fingerprint(), "meta": dict(meta)}
        self._store(key, f"plan-{search_key}.json", body, compressed=False)

    # -- per-op costs (luminal/egraph/costs.py) --------------------------------------------------------
    def load_costs(self, key: str) -> dict:
        """Measured op costs of one backend device (key: device + compiler version); {} if none."""
        data = self._load(key, "op-costs.json", compressed=True)
        return dict(data.get("costs", {})) if isinstance(data, dict) else {}

    def store_costs(self, key: str, costs: Mapping[str, object]) -> None:
        self._store(key, "op-costs.json", {"costs": dict(costs)}, compressed=True)

    # -- files ---------------------------------------------------------------------------------------
    def _load(self, key: str, name: str, compressed: bool) -> dict | None:
        if self.root is None:
            return None
        p = self._dir(key) / name
        if not p.exists():
            return None
        try:
            raw = p.read_bytes()
            text = gzip.decompress(raw).decode() if compressed else raw.decode()
            head_text, _, body_text = text.partition("\n")
            head = json.loads(head_text)
            if head.get("format") != FORMAT or head.get("key") != key:
                raise ValueError("stale entry (format or key differs)")
            if head.get("sha256") != _digest(body_text):
                raise ValueError("checksum mismatch")
            return json.loads(body_text)
        except Exception as e:  # noqa: BLE001 - corrupt or truncated file: rebuild
            log.warning("compile cache: ignoring corrupt entry %s (%s: %s)", p, type(e).__name__, e)
            return None

    def _store(self, key: str, name: str, body: dict, compressed: bool) -> None:
        if self.root is None:
            return
        d = self._dir(key)
        try:
            d.mkdir(parents=True, exist_ok=True)
            body_text = json.dumps(body, separators=(",", ":"))
            head = json.dumps({"format": FORMAT, "key": key, "sha256": _digest(body_text)})
            text = head + "\n" + body_text
            data = gzip.compress(text.encode(), compresslevel=1) if compressed else text.encode()
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=d)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, d / name)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as e:
            log.warning("compile cache: cannot write %s (%s); continuing without caching", d / name, e)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _usable_root(root: Path) -> bool:
    """Create the cache root if needed; False (logged once per path) when it cannot be a directory."""
    try:
        root.mkdir(parents=True, exist_ok=True)  # FileExistsError when root is a regular file
        return True
    except OSError as e:
        if str(root) not in _UNUSABLE:
            _UNUSABLE.add(str(root))
            log.warning("compile cache: %s is not a usable directory (%s); compiling without the cache", root, e)
        return False


def _is_str_list(x: object) -> bool:
    return isinstance(x, list) and all(isinstance(v, str) for v in x)


def _valid_egraph(data: object) -> str | None:
    """None when `data` has the shape of egglog's serialized e-graph that extraction reads, else what is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
        return "no 'nodes' object"
    nodes = data["nodes"]
    for name, n in nodes.items():
        if not (isinstance(n, dict) and isinstance(n.get("op"), str) and isinstance(n.get("eclass"), str)):
            return f"node {name!r} lacks a string 'op' / 'eclass'"
        kids = n.get("children")
        if not _is_str_list(kids) or any(k not in nodes for k in kids):
            return f"node {name!r} has bad 'children'"
        if not isinstance(n.get("subsumed", False), bool):
            return f"node {name!r} has a non-bool 'subsumed'"
    cdata = data.get("class_data", {})
    if not isinstance(cdata, dict) or not all(isinstance(v, dict) for v in cdata.values()):
        return "bad 'class_data'"
    if any(not isinstance(v.get(f, ""), str) for v in cdata.values() for f in ("type", "let")):
        return "bad 'class_data' field types"
    if not _is_str_list(data.get("root_eclasses", [])):
        return "bad 'root_eclasses'"
    return None


_META_INTS = ("egraph_nodes", "egraph_classes", "choice_sets", "profiled")


def _valid_plan(payload: object) -> str | None:
    """None when a stored plan body has the fields `load_plan` and the compile stats read, else what is wrong."""
    if not isinstance(payload, dict) or not isinstance(payload.get("llir"), dict):
        return "no 'llir' object"
    if not isinstance(payload.get("fingerprint"), str):
        return "no 'fingerprint' string"
    meta = payload.get("meta", {})
    if not isinstance(meta, dict):
        return "'meta' is not an object"
    for k in _META_INTS:
        if k in meta and (not isinstance(meta[k], int) or isinstance(meta[k], bool)):
            return f"meta {k!r} is not an int"
    if "cost" in meta and (not isinstance(meta["cost"], (int, float)) or isinstance(meta["cost"], bool)):
        return "meta 'cost' is not a number"
    return None
