"""Text a person reads: a record, a proof, a list or timeline, a search reply, a verify report, stats.

The one renderer of these for every edge: the CLI's text output, the MCP
tools' text content and the brief's record blocks all come from here, so a
record shows the same facts (its links ``superseded_by`` / ``retracted_by``
among them) wherever it is read. The structured forms (``--json``, MCP
structured content) are the Store's own dicts; these functions only read
them.

Text from a record is shown safely: control characters other than tab and
newline become U+FFFD, so a record cannot move a terminal's cursor or hide a
line, and header values are cut to a bounded width.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from retained.index.schema import LINKED_BY, link_targets  # the index's reading of link fields
from retained.limits import SCOPE_CHARS_MAX

# A kind, scope, source, client or extra field in a header line.
FIELD_CHARS_MAX = 64
# Findings a verify report lists in text; the structured report has all.
FINDINGS_SHOWN = 20
# Scopes the stats text names; the structured stats have all.
SCOPES_SHOWN = 10

# Fields a header never shows as "key=value": the chain's own, and those shown elsewhere.
_NOT_IN_HEADER = frozenset({"v", "seq", "ts", "prev", "hash", "cd", "redacted", "client", "kind", "text", "body",
                            "scope", "source", "supersedes"})

_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def count(n: Any, noun: str, plural: str | None = None) -> str:
    """``1 record``, ``2 records``: a number and its noun, agreeing."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def clean(text: str) -> str:
    """``text`` with control characters (other than tab and newline) shown as U+FFFD."""
    return _CONTROLS.sub("\ufffd", text) if _CONTROLS.search(text) else text


def dumps(value: Any, *, sort_keys: bool = False) -> str:
    """Compact JSON with the standard library's encoder (the brief never imports the fast one)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys)


def short(value: Any, limit: int = FIELD_CHARS_MAX) -> str:
    """One line of at most ``limit`` characters: a string as is, anything else as JSON."""
    text = clean(value if isinstance(value, str) else dumps(value))
    text = text.replace("\n", " ").replace("\t", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def body_text(body: Any) -> str:
    """A record's body as text: a string as is, anything else as sorted JSON."""
    if body is None:
        return ""
    if isinstance(body, str):
        return clean(body)
    return clean(dumps(body, sort_keys=True))


def ts(value: Any) -> str:
    """``2026-11-29T12:00:00Z``: a record's ts to the second."""
    if not isinstance(value, str):
        return "?"
    if len(value) == 27 and value[19] == "." and value.endswith("Z"):
        return value[:19] + "Z"
    return short(value, 40)


def client(value: Any) -> str:
    """Who wrote a record: its client's name and version."""
    if isinstance(value, dict):
        name = value.get("name")
        version = value.get("version")
        if isinstance(name, str):
            return short(f"{name} {version}" if isinstance(version, str) else name)
    return "unknown"


def header(seq: Any, rec: Mapping[str, Any]) -> dict[str, Any]:
    """A record's header fields as ``block`` takes them: seq, kind, ts, client, and scope and source when set."""
    entry: dict[str, Any] = {"seq": seq, "kind": short(rec.get("kind", "note")), "ts": ts(rec.get("ts")),
                             "client": client(rec.get("client"))}
    for name in ("scope", "source"):
        if rec.get(name) is not None:
            entry[name] = short(rec[name])
    return entry


def _seq_refs(seqs: Any) -> str:
    return ",".join(f"#{s}" for s in seqs)


# Links a search derives between its results (retained.index.corrections), shown like stored links.
DERIVED_LINKS = ("may_correct", "may_be_corrected_by")


def block(entry: Mapping[str, Any]) -> str:
    """One record as a header line, then its text and body indented.

    ``entry`` holds display-ready values: ``seq``, ``kind``, ``ts``,
    ``client``, optionally ``scope``, ``source``, ``supersedes`` (seqs),
    ``links`` (``{"superseded_by": seqs, ...}``), ``extra`` (other fields,
    ``{key: shown value}``), ``origin`` (a pulled record's store: shown as
    ``from=MACHINE/STOREID8``), ``score``, ``text``, ``body`` and ``cut``
    (``{"shown_bytes", "total_bytes"}``). The brief builds these itself (its budget counts this
    block); ``record`` builds them from a stored record.
    """
    head = f"#{entry['seq']} {entry['kind']} {entry['ts']} client={entry['client']}"
    if "scope" in entry:
        head += f" scope={entry['scope']}"
    if "source" in entry:
        head += f" source={entry['source']}"
    if entry.get("supersedes"):
        head += " supersedes=" + _seq_refs(entry["supersedes"])
    for name, seqs in (entry.get("links") or {}).items():
        head += f" {name}={_seq_refs(seqs)}"
    for key, value in (entry.get("extra") or {}).items():
        head += f" {key}={value}"
    origin = entry.get("origin")
    if isinstance(origin, Mapping) and not origin.get("local"):  # a record of another store, pulled by `retained sync`
        head += f" from={short(str(origin.get('machine')))}/{str(origin.get('store_id'))[:8]}"
    if entry.get("score") is not None:
        head += f" score={entry['score']:.3g}"
    lines = [head]
    for part in (entry.get("text"), entry.get("body")):
        if part:
            lines.append("  " + part.replace("\n", "\n  "))
    if cut := entry.get("cut"):
        lines.append(f"  [cut: {cut['shown_bytes']} of {cut['total_bytes']} bytes shown]")
    return "\n".join(lines)


def record(entry: Mapping[str, Any], *, text_shown: tuple[str, str | None] | None = None) -> str:
    """A stored record (``{"seq", "record", "superseded_by"?, ...}`` as the Store returns it) as text.

    Every field its writer set is shown: the chain's own fields (hash, prev)
    are left to the structured form. Text and body are shown whole, unless
    ``text_shown`` gives the text a reply's budget left (``documents.shown``:
    text and body, whole or cut around the query's words) and the note that
    says where the rest is.
    """
    rec: Mapping[str, Any] = entry["record"] if isinstance(entry.get("record"), dict) else entry
    seq = entry.get("seq", rec.get("seq"))
    links = {name: entry[name] for name in (*LINKED_BY.values(), *DERIVED_LINKS) if entry.get(name)}
    if rec.get("redacted"):
        return f"#{seq} [redacted]" + "".join(f" {name}={_seq_refs(seqs)}" for name, seqs in links.items())
    shown_entry = header(seq, rec)
    shown_entry["supersedes"] = link_targets(rec.get("supersedes"))
    shown_entry["links"] = links
    # The other link fields (retracts, redacts) are shown as seq references too.
    shown_entry["extra"] = {
        key: _seq_refs(link_targets(rec[key])) if key in LINKED_BY and link_targets(rec[key]) else short(rec[key])
        for key in sorted(rec)
        if key not in _NOT_IN_HEADER
    }
    shown_entry["origin"] = entry.get("origin")
    shown_entry["score"] = entry.get("score")
    text = clean(rec["text"]) if isinstance(rec.get("text"), str) else ""
    body = body_text(rec.get("body"))
    if text_shown is not None:
        text, body = clean(text_shown[0]), ""
        if text_shown[1]:
            text += f"\n[{text_shown[1]}]"
    cut = entry.get("cut")
    if isinstance(cut, dict) and isinstance(cut.get("message"), str):  # a search result cut to its budget
        text += f"\n[{cut['message']}]"
    shown_entry["text"], shown_entry["body"] = text, body
    return block(shown_entry)


def proof(proof: Mapping[str, Any]) -> str:
    """A write's proof: where the record is and how it links, then what the write guard changed."""
    lines = [
        f"already recorded as seq {proof['seq']} (same client_op_id); nothing new was written" if proof.get("duplicate")
        else f"recorded seq {proof['seq']} at {proof.get('ts')}: durable and read back",
        f"  hash   {proof['hash']}",
        f"  prev   {proof['prev']}",
        f"  offset {proof['offset']}  length {proof['length']}",
    ]
    spans = proof.get("private_spans_removed")
    if isinstance(spans, int) and spans:
        lines.append(f"note: {spans} <private> span(s) removed before storing")
    redactions = proof.get("redactions")
    if isinstance(redactions, list) and redactions:
        kinds = ", ".join(sorted({str(r.get("kind")) for r in redactions if isinstance(r, dict)}))
        lines.append(f"note: {len(redactions)} secret(s) replaced by [secret:<kind>] before storing ({kinds})")
    for notice in proof.get("notices") or ():
        lines.append(f"note: {notice}")
    return "\n".join(lines)


def related_to_writes(found: Mapping[str, Any]) -> list[str]:
    """The lines a read adds for the related steps its session's writes left for it (``Store.related_to_writes``)."""
    lines = [f"note: {w['notice']}" for w in found.get("writes") or ()]
    if found.get("not_checked"):
        lines.append(f"note: {found['not_checked']} earlier write(s) of this session were not checked for records they "
                     "may correct (only the last ones since a read are); memory_search their subject to see")
    return lines


def _within(entries: Sequence[Mapping[str, Any]], query: str | None, max_tokens: int | None, rest: str | None) -> list[Any]:
    """Each entry's text as a reply's budget leaves it (``documents.shown``), for the text form an agent reads."""
    # Deferred: documents imports the storage core (orjson), which the brief's reader never needs.
    from retained.index.documents import REST_HINT, shown

    return shown([e.get("record") or {} for e in entries], query, max_tokens, rest=rest or REST_HINT)


def records(result: Mapping[str, Any], *, whole: bool = False) -> str:
    """Records read by seq, newest first (``Store.list``) or around a seq (``Store.timeline``), and what was not shown.

    ``whole``: every record's text whole within the default budget (cuts say
    where the rest is), as the MCP text form carries them.
    """
    entries = result["records"]
    if whole:
        texts = _within(entries, None, None, "the structured result holds the whole record")
        lines = [record(r, text_shown=t) for r, t in zip(entries, texts, strict=True)]
    else:
        lines = [record(r) for r in entries]
    tail = f"{result['returned']} record(s) returned"
    if "more_before" in result:
        tail += f"; {result['more_before']} older and {result['more_after']} newer not shown"
    elif result.get("more") and "left_out_for_size" not in result:
        tail += f"; {result['more']} more match(es) not shown (raise the limit or narrow kind/scope)"
    if "left_out_for_size" in result:
        tail += f"; {result['left_out_for_size']['message']}"
    return "\n".join([*lines, tail])


def search(reply: Mapping[str, Any], *, query: str | None = None, max_tokens: int | None = None, whole: bool = False) -> str:
    """A search reply: the ranked records (each result's context records after it, marked ``|``), then how many
    matched and what was left out, and why (I2).

    ``whole``: every record's text whole within ``max_tokens`` (cuts centred
    on the words of ``query``, saying how to get the rest), as the MCP text
    form carries them; otherwise text and body as stored.
    """
    entries = [(e, indent) for r in reply.get("results", ())
               for e, indent in [(r, ""), *((c, "    | ") for c in r.get("context", ()))]]
    texts = _within([e for e, _ in entries], query, max_tokens, None) if whole else [None] * len(entries)
    lines = [indent + record(e, text_shown=t).replace("\n", "\n" + indent) for (e, indent), t in zip(entries, texts, strict=True)]
    left = reply.get("left_out") or {}
    why = ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in left.items() if isinstance(n, int) and n)
    tail = f"{reply.get('returned', len(lines))} of {reply.get('total_matches', '?')} match(es) returned"
    if why:
        tail += f"; left out: {why}"
    if context := reply.get("context"):
        tail += f"; context: {context['included']} record(s) (| lines), {context['tokens']} tokens"
        if context.get("over_budget"):
            tail += f", {context['over_budget']} left out over budget"
    lines.append(tail)
    if reply.get("mode"):
        lines.append(mode_line(reply))
    if isinstance(reply.get("scope"), str):
        lines.append(scope_line(reply))
    for notice in reply.get("notices") or ():
        lines.append(f"note: {notice}")
    return "\n".join(lines)


def scope_line(reply: Mapping[str, Any]) -> str:
    """One line saying which scope a read was limited to (``{"scope", "and_unscoped"}``), so no one wonders why
    records are missing."""
    name = short(reply["scope"], SCOPE_CHARS_MAX)
    if reply.get("and_unscoped"):
        return f'scope: this project\'s ("{name}") and records with no scope; --all-scopes reads every scope'
    return f'scope: only "{name}"'


def mode_line(reply: Mapping[str, Any]) -> str:
    """One line for people: ``mode: hybrid``, ``mode: lexical (why)``, and how many matches had no vector."""
    line = f"mode: {reply.get('mode', 'lexical')}"
    if reply.get("mode_reason"):
        line += f" ({reply['mode_reason']})"
    without = reply.get("without_vectors")
    if without and reply.get("mode") != "lexical":
        line += f"; {without} match(es) ranked without a vector (not embedded yet)"
    elif without and (reply.get("vectors") or {}).get("model"):
        line += f"; {without} match(es) ranked by their words alone"
    return line


def verify(report: Mapping[str, Any]) -> str:
    """A verify report: what was judged, anything kept aside, every finding (up to ``FINDINGS_SHOWN``), the verdict."""
    lines = []
    if not report.get("exists", True):
        lines.append(f"no log yet at {report.get('log')}: nothing to verify")
    if head := report.get("head"):
        lines.append(f"{count(report.get('records'), 'record')}, head seq {head.get('seq')} {str(head.get('hash'))[:16]}..., "
                     f"{report.get('bytes')} bytes")
    if redacted := report.get("redacted"):
        lines.append(f"{len(redacted)} redacted (chain intact): seq {', '.join(map(str, redacted[:20]))}")
    if foreign := report.get("foreign"):
        lines.append(f"{count(len(foreign), 'foreign line')} kept and skipped by the chain, at byte {', '.join(map(str, foreign[:20]))}")
    if torn := report.get("torn_tail"):
        lines.append(f"unterminated tail of {torn['bytes']} bytes at byte {torn['offset']} (never acknowledged)")
    for q in report.get("quarantined") or ():
        lines.append(f"quarantined torn tail: {q['file']} ({q['bytes']} bytes, was at byte {q['offset']})")
    snap, anchored = report.get("snapshot"), report.get("anchors") or {}
    if snap:
        lines.append(f"judged the log's first {snap['bytes']} bytes (its size when verify began)")
    if isinstance(report.get("index"), dict) and report["index"].get("note"):
        lines.append(f"index: {report['index']['note']}")
    if anchored.get("checked") or anchored.get("error"):
        lines.append(f"anchors: {anchored.get('checked', 0)} checked, {anchored.get('not_on_chain', 0)} not on the chain"
                     + (f"; this head not recorded: {anchored['error']}" if anchored.get("error") else ""))
    findings = report.get("findings") or []
    for finding in findings[:FINDINGS_SHOWN]:
        if isinstance(finding, dict):
            lines.append(f"FINDING {finding.get('kind')}: {finding.get('message')}")
            if finding.get("seq") is None and isinstance(finding.get("offset"), int) and finding.get("kind") != "index_unusable":
                lines.append(f"  to clear it: `retained quarantine {finding['offset']}` moves the line to a file beside "
                             "the log and records that it did; nothing is deleted")
        else:
            lines.append(f"FINDING {finding}")
    if len(findings) > FINDINGS_SHOWN:
        lines.append(f"... and {len(findings) - FINDINGS_SHOWN} more findings in the structured report (--json)")
    lines.append("verify: ok, no findings" if report.get("ok") else f"verify: {len(findings)} finding(s)")
    return "\n".join(lines)


def quarantine(result: dict[str, Any]) -> str:
    """What ``Store.quarantine`` did: the line moved aside, where it is kept, the record that says so."""
    proof = result["record"]
    return (
        f"moved the damaged line at byte {result['offset']} ({result['length']} bytes: {result['problem']}) "
        f"into {result['file']}; nothing was deleted\n"
        f"recorded as seq {proof['seq']}" + (" (by an earlier run)" if proof.get("duplicate") else "") +
        "\nindex: " + index_after_rewrite(result)
    )


def index_after_rewrite(result: Mapping[str, Any]) -> str:
    """The index's state after a command rewrote the log (``IndexAccess.scrub_if_present`` / ``rebuild_if_present``)."""
    state, problem = result["index"], result.get("index_problem")
    if state == "absent":
        return "none yet (the first read builds it from the log)"
    if state == "rebuilt":
        return "rebuilt from the log" + (" with secure_delete: no erased term is left in it" if "redaction_record" in result else "")
    if state == "unusable":
        return (f"not rebuilt: {problem}; reads answer from the log until it can be opened, then rebuild it; "
                "verify reports it")
    if state == "removed":
        return (f"deleted: {problem}; the erased text went with it (the index is derived: the next read builds "
                "it again from the log)")
    if state == "set_aside":
        return (f"NOT ERASED from it: {problem}; it could not be deleted either, so it was set aside as "
                f"{result['index_set_aside']}, which may still hold the erased text: delete it (with sudo if another "
                "user owns it); verify reports it until then")
    return (f"NOT ERASED from it: {problem}; it could be neither deleted nor set aside and may still hold the erased "
            "text: delete it and its -wal and -shm files (with sudo if another user owns them); verify reports it")


def vectors_held(s: Mapping[str, Any]) -> str:
    """How many records have a vector, per model, from ``Store.stats`` (stats and the viewer's Health page)."""
    vec = s.get("vectors")
    if not vec:
        return "none (search is lexical until records are embedded)"
    return ", ".join(f"{m} {n:,} of {s['records']:,} records" for m, n in vec.items())


def stats(s: dict[str, Any]) -> str:
    """What ``Store.stats`` found: counts, sizes, head, damage, index lag, vectors."""
    head = s["head"]
    sizes = s["sizes"]
    out = [
        f"{count(s['records'], 'record')}, head seq {head['seq']} {head['hash']}",
        f"log {sizes['log_bytes']} bytes (record mean {sizes['record_bytes_mean']}, max {sizes['record_bytes_max']}); "
        f"index {sizes['index_bytes']} bytes",
        "by kind: " + (", ".join(f"{k} {n}" for k, n in s["by_kind"].items()) or "none"),
    ]
    scopes = list(s["by_scope"].items())
    line = "by scope: " + (", ".join(f"{k} {n}" for k, n in scopes[:SCOPES_SHOWN]) or "none")
    if len(scopes) > SCOPES_SHOWN:
        line += f" (and {len(scopes) - SCOPES_SHOWN} more scopes)"
    out.append(line)
    out.append(f"superseded {s['superseded']}, retracted {s['retracted']}, redacted {s['redacted']}")
    out.append(
        f"foreign lines {s['foreign_lines']}, damaged lines {s['damaged_lines']}, "
        f"quarantined tails {len(s['quarantined'])} ({sizes['quarantined_bytes']} bytes)"
        + (", unterminated tail present" if s["torn_tail"] else "")
    )
    idx = s["index"]
    if idx is None:
        out.append("index: none (built on the first search, or by `retained rebuild`)")
    elif idx.get("state") == "unreadable":
        out.append(f"index: unreadable ({idx['error']})")
    else:
        out.append(
            f"index: {idx['state']}, indexed to seq {idx['seq']}; lag {idx['lag_records']} records ({idx['lag_bytes']} bytes)"
        )
    out.append("vectors: " + vectors_held(s))
    if s["findings"]:
        out.append(f"verify findings: {s['findings']} (run `retained verify`)")
    if cap := s.get("capture"):
        t = cap["totals"]
        out.append(f"capture: received {t['received']} = captured {t['captured']} + deduplicated {t['deduplicated']} + "
                   f"skipped {t['skipped']} + spooled {t['spooled']} + failed {t['failed']}; secrets redacted "
                   f"{t['redactions']} (`retained capture status`)")
    return "\n".join(out)


def head(h: dict[str, Any]) -> str:
    """The chain head as ``SEQ HASH`` (what to anchor elsewhere), then the store id and where its anchors are kept."""
    out = f"{h['seq']} {h['hash']}\nstore id {h.get('store_id') or '-'}\nanchors {h.get('anchor_file') or 'off'}"
    return out + (f"\nnote: {h['note']}" if h.get("note") else "")


def rebuild(result: dict[str, Any]) -> str:
    """What ``Store.rebuild`` did."""
    return f"rebuilt the index: {count(result['records'], 'record')} from {count(result['bytes'], 'byte')} of log"


def redaction(result: dict[str, Any]) -> str:
    """What ``Store.redact`` did: the line rewritten, the redaction record, the index and quarantine scrubbed."""
    if result["already_redacted"]:
        return f"seq {result['seq']} was already redacted; the log is unchanged\nindex: " + index_after_rewrite(result)
    rec = result["redaction_record"]
    lines = [
        f"seq {result['seq']} redacted: {result['line_bytes_before']} bytes of content replaced by its "
        f"{result['line_bytes_after']}-byte redacted form; the chain still verifies",
        f"redaction record: seq {rec['seq']} {rec['hash']}",
        "index: " + index_after_rewrite(result),
    ]
    if result["quarantine_scrubbed"]:
        lines.append("scrubbed from quarantined tails: " + ", ".join(result["quarantine_scrubbed"]))
    return "\n".join(lines)


def export(result: dict[str, Any]) -> str:
    """What ``Store.export`` wrote, what it left out, and where."""
    h = result["head"]
    line = (f"exported {count(result['records'], 'record')} ({result['redacted']} redacted) as {result['format']}, "
            f"head seq {h['seq']} {h['hash']}")
    if result["foreign_left_out"]:
        line += f"; {result['foreign_left_out']} foreign lines left out"
    if result["forced"]:
        line += (f"; WARNING: {len(result['findings'])} verify findings, {result['damaged_left_out']} damaged lines "
                 "left out (--force)")
    if result.get("path"):
        line += f"\nwritten to {result['path']}"
    return line


def backup(result: dict[str, Any]) -> str:
    """What ``Store.backup`` copied, and whether the copy verified."""
    h = result["head"]
    lines = [
        f"backup of {count(result['records'], 'record')} ({count(result['log_bytes'], 'byte')}) in {result['path']}",
        f"  head seq {h['seq']} {h['hash']}",
        f"  log blake3 {result['log_blake3']}",
    ]
    if result["quarantined"]:
        lines.append(f"  with {len(result['quarantined'])} quarantined tails")
    lines.append("  verified: ok" if result["ok"] else
                 f"  copied byte-exact, but the log has {len(result['findings'])} verify findings")
    return "\n".join(lines)


def embed(result: dict[str, Any]) -> str:
    """``Store.embed``: the embeddings' status, or what a backfill did."""
    if "counts" in result:
        return "\n".join(f"{k}: {v}" for k, v in {**result["counts"], **result["embedder"]}.items())
    line = f"embedded {count(result['embedded'], 'record')} with {result['model']}; {result['pending']} still without a vector"
    return line + (f" ({result['error']})" if result.get("error") else "")
