"""The viewer's HTML: one function per page, every value from the store escaped on its way in.

Pages are plain HTML and CSS (``style.css`` beside this module): no script,
no external asset, readable in any browser and without JavaScript. Every
string that came from a record, a query or the file system passes through
`esc` (control characters shown as U+FFFD by ``render.clean``, then
``html.escape`` with quotes), and every link is built here from numbers and
URL-encoded parameters, never from record text: a record holding markup or a
``javascript:`` URL is shown as the text it is.

This module only formats what the Store returned; it reads nothing itself.
"""

from __future__ import annotations

import datetime
import html
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from retained import render
from retained.version import __version__

PREVIEW_CHARS = 400  # record text shown in a list before "..."
SCOPES_SHOWN = 25  # rows of the by-scope table; the rest are counted
CHART_BARS_MAX = 100  # bars in the records-over-time chart; days are grouped by week or month past it
CHART_SLOTS_MIN = 20  # the chart is never divided into fewer bar widths than this
LINK_KEYS = ("superseded_by", "retracted_by", "redacted_by")
PROOF_KEYS = ("seq", "hash", "prev", "ts", "client")


def esc(value: Any) -> str:
    """Any value as HTML text: a string as is, anything else as JSON, control characters made visible."""
    text = value if isinstance(value, str) else render.dumps(value)
    return html.escape(render.clean(text), quote=True)


def href(path: str, params: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()) -> str:
    """An escaped link to a page of this viewer with its query parameters (empty ones left out)."""
    pairs = params.items() if isinstance(params, Mapping) else params
    kept = [(k, str(v)) for k, v in pairs if v not in (None, "", False)]
    return esc(path + ("?" + urlencode(kept) if kept else ""))


def seq_link(seq: Any, store: str | None = None) -> str:
    """A link to a record's page; ``store``: a store pulled by ``retained sync`` (the seq is that store's)."""
    if not _is_seq(seq):
        return esc(seq)
    return f'<a class="seq" href="{href(f"/record/{int(seq)}", {"from": store})}">#{int(seq)}</a>'


def pulled_from(entry: Mapping[str, Any]) -> str | None:
    """The id of the pulled store ``entry`` is a record of (its ``origin``), or None for this store's."""
    origin = entry.get("origin")
    if isinstance(origin, Mapping) and not origin.get("local") and isinstance(origin.get("store_id"), str):
        return str(origin["store_id"])
    return None


def origin_badge(entry: Mapping[str, Any]) -> str:
    """``from MACHINE/STOREID8`` for a pulled record, empty for this store's."""
    origin = entry.get("origin")
    if pulled_from(entry) is None or not isinstance(origin, Mapping):
        return ""
    return (f'<span class="badge origin" title="{esc(origin.get("store_id"))}">from '
            f'{esc(render.short(str(origin.get("machine"))))}/{esc(str(origin.get("store_id"))[:8])}</span>')


def _is_seq(value: Any) -> bool:
    return type(value) is int and value > 0


def _seq_links(seqs: Any, store: str | None = None) -> str:
    return ", ".join(seq_link(s, store) for s in (seqs if isinstance(seqs, list) else [seqs]) if _is_seq(s))


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


# -- the frame ---------------------------------------------------------------------


NAV = (("/", "Timeline"), ("/search", "Search"), ("/health", "Health"), ("/brief", "Brief"))
CURRENT = ' aria-current="page"'
# A POST: running verify records the head it judged in the anchor file, and no GET writes anything.
RUN_BUTTON = '<form method="post" action="/verify"><button type="submit">Run verify now</button></form>'


def page(title: str, body: str, *, where: Mapping[str, Any], current: str = "", refresh_s: int | None = None,
         status_note: str = "") -> str:
    """A whole page: the header (store and head), the navigation, ``body`` (already HTML), the footer."""
    head = where.get("head") or {}
    seq = head.get("seq")
    head_text = f"head #{seq} {str(head.get('hash') or '')[:12]}" if seq else "no records yet"
    nav = "".join(
        f'<a href="{href(path)}"{CURRENT if path == current else ""}>{name}</a>' for path, name in NAV
    )
    refresh = f'<meta http-equiv="refresh" content="{int(refresh_s)}">' if refresh_s else ""
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{refresh}<title>{esc(title)} · retained</title>"
        '<link rel="stylesheet" href="/style.css"><link rel="icon" href="/favicon.svg" type="image/svg+xml">'
        "</head><body>"
        f'<header><a class="brand" href="/">retained</a><nav>{nav}</nav>'
        f'<span class="where" title="{esc(where.get("directory", ""))}">{esc(where.get("directory", ""))} · '
        f"{esc(head_text)}</span></header>"
        f"<main>{status_note}{body}</main>"
        f"<footer>read-only viewer · retained {esc(__version__)} · nothing here writes to the store</footer>"
        "</body></html>\n"
    )


def error(status: int, message: str, where: Mapping[str, Any]) -> str:
    """A page saying what was wrong with the request or the store."""
    titles = {400: "Bad request", 404: "Not found", 500: "The store could not answer"}
    title = titles.get(status, f"Error {status}")
    return page(title, f'<h1>{esc(title)}</h1><p class="problem">{esc(message)}</p>', where=where)


# -- records in lists ------------------------------------------------------------


def _marks(entry: Mapping[str, Any]) -> str:
    store = pulled_from(entry)
    return "".join(f'<span class="mark {name.split("_")[0]}">{name.replace("_", " ")} {_seq_links(entry[name], store)}</span>'
                   for name in LINK_KEYS if entry.get(name))


def _state_classes(entry: Mapping[str, Any]) -> str:
    rec = entry.get("record") or {}
    classes = [f"kind-{'checkpoint' if rec.get('kind') == 'checkpoint' else 'other'}"]
    classes += [name.split("_")[0] for name in LINK_KEYS if entry.get(name)]
    if rec.get("redacted"):
        classes.append("redacted")
    return " ".join(classes)


def _preview(text: str, chars: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def record_item(entry: Mapping[str, Any], *, filter_path: str = "/", score: Any = None) -> str:
    """One record in a list: its seq, time, kind, scope, writer, marks and the start of its text."""
    rec = entry.get("record") or {}
    seq = entry.get("seq", rec.get("seq"))
    kind = rec.get("kind", "note")
    # A record of another store, pulled by `retained sync`: its seq is that store's, and so are its links.
    store = pulled_from(entry)
    bits = [seq_link(seq, store), f'<time>{esc(render.ts(rec.get("ts")))}</time>', origin_badge(entry)]
    bits.append(f'<a class="badge kind" href="{href(filter_path, {"kind": kind})}">{esc(render.short(kind))}</a>'
                if isinstance(kind, str) else f'<span class="badge kind">{esc(render.short(kind))}</span>')
    scope = rec.get("scope")
    if isinstance(scope, str):
        bits.append(f'<a class="badge scope" href="{href(filter_path, {"scope": scope})}">{esc(render.short(scope))}</a>')
    name = rec.get("client", {}).get("name") if isinstance(rec.get("client"), dict) else None
    client = render.client(rec.get("client"))
    bits.append(f'<a class="badge client" href="{href("/", {"client": name})}">{esc(client)}</a>'
                if isinstance(name, str) else f'<span class="badge client">{esc(client)}</span>')
    if rec.get("supersedes"):
        bits.append(f'<span class="mark corrects">corrects {_seq_links(rec["supersedes"], store)}</span>')
    if score is not None:
        bits.append(f'<span class="score">score {esc(f"{score:.3g}" if isinstance(score, float) else score)}</span>')
    bits.append(_marks(entry))
    if rec.get("redacted"):
        content = '<p class="text muted">[redacted: content erased; the chain still verifies]</p>'
    elif kind == "retract":
        content = (f'<p class="text">retracts {_seq_links(rec.get("retracts"), store)}: '
                   f'{esc(_preview(str(rec.get("reason", ""))))}</p>')
    else:
        text = rec.get("text") if isinstance(rec.get("text"), str) else ""
        content = f'<p class="text">{esc(_preview(text))}</p>' if text else ""
        body = render.body_text(rec.get("body"))
        if body and kind == "checkpoint":
            content += f'<p class="body">{esc(_preview(body))}</p>'
        elif body:
            content += f'<p class="body muted">+ body ({_plural(len(body), "character")})</p>'
    return f'<li class="rec {_state_classes(entry)}"><div class="meta">{" ".join(b for b in bits if b)}</div>{content}</li>'


def record_list(entries: Iterable[Mapping[str, Any]], *, filter_path: str = "/", scores: bool = False) -> str:
    items = [record_item(e, filter_path=filter_path, score=e.get("score") if scores else None) for e in entries]
    return f'<ol class="records">{"".join(items)}</ol>' if items else '<p class="muted">No records.</p>'


# -- timeline ----------------------------------------------------------------------

TIMELINE_FILTERS = ("scope", "kind", "client", "since", "until")


def _field(name: str, label: str, value: Any, kind: str = "text", extra: str = "") -> str:
    shown = "" if value is None else esc(value)
    return (f'<label>{esc(label)} <input type="{kind}" name="{name}" value="{shown}"{extra}></label>')


def timeline(result: Mapping[str, Any], params: Mapping[str, Any], where: Mapping[str, Any]) -> str:
    """The timeline: newest first, filters, the accounting, and links to the older and newer pages."""
    filters = {k: params.get(k) for k in TIMELINE_FILTERS}
    limit = params["limit"]
    form = (
        '<form class="filters" method="get" action="/">'
        + _field("scope", "scope", filters["scope"])
        + _field("kind", "kind", filters["kind"], extra=' placeholder="note, checkpoint…"')
        + _field("client", "client", filters["client"])
        + _field("since", "from", filters["since"], "date")
        + _field("until", "to", filters["until"], "date")
        + _field("limit", "per page", limit, "number", ' min="1" max="500"')
        + '<button type="submit">Filter</button>'
        + f' <a href="{href("/")}">clear</a></form>'
    )
    records = result["records"]
    total = result["total_matches"]
    left = result.get("left_out") or {}
    active = ", ".join(f"{k} {esc(v)}" for k, v in filters.items() if v)
    span = ""
    if params.get("before") is not None:
        span = f" older than #{int(params['before'])}"
    elif params.get("after") is not None:
        span = f" newer than #{int(params['after'])}"
    summary = (f'<p class="accounting">Showing {_plural(result["returned"], "record")} of {total:,} '
               f'{"that match " + active if active else "records"}{esc(span)}')
    if left.get("beyond_limit"):
        summary += f"; {left['beyond_limit']:,} more beyond this page"
    if left.get("unreadable"):
        summary += f"; {left['unreadable']:,} the index points at could not be read back (run verify)"
    summary += ".</p>"
    keep = {**filters, "limit": limit if limit != params.get("limit_default") else None}
    pager = []
    has_bound = params.get("before") is not None or params.get("after") is not None
    seqs = [r["seq"] for r in records]
    if has_bound:
        pager.append(f'<a href="{href("/", keep)}">⇤ newest</a>')
    if seqs and ((params.get("after") is not None and left.get("beyond_limit")) or params.get("before") is not None):
        pager.append(f'<a rel="prev" href="{href("/", {**keep, "after": max(seqs)})}">← newer</a>')
    if seqs and (params.get("after") is not None or left.get("beyond_limit")):
        pager.append(f'<a rel="next" href="{href("/", {**keep, "before": min(seqs)})}">older →</a>')
    nav = f'<nav class="pager">{" ".join(pager)}</nav>' if pager else ""
    body = f"<h1>Timeline</h1>{form}{summary}{nav}{record_list(records)}{nav}"
    return page("Timeline", body, where=where, current="/")


# -- search ------------------------------------------------------------------------


def search(reply: Mapping[str, Any] | None, params: Mapping[str, Any], where: Mapping[str, Any]) -> str:
    """The search form and, for a query, the ranked results with the mode and what was left out, and why."""
    checked = ' checked' if params.get("superseded") else ""
    checked_r = ' checked' if params.get("retracted") else ""
    form = (
        '<form class="filters" method="get" action="/search">'
        + _field("q", "query", params.get("q"), "search", ' autofocus size="40"')
        + _field("scope", "scope", params.get("scope"))
        + _field("k", "results", params.get("k"), "number", ' min="1" max="100"')
        + _field("max_tokens", "token budget", params.get("max_tokens"), "number", ' min="1"')
        + f'<label><input type="checkbox" name="superseded" value="1"{checked}> superseded too</label>'
        + f'<label><input type="checkbox" name="retracted" value="1"{checked_r}> retracted too</label>'
        + '<button type="submit">Search</button></form>'
    )
    if reply is None:
        return page("Search", f"<h1>Search</h1>{form}<p class=\"muted\">The same search as "
                    "<code>retained search</code> and the <code>memory_search</code> tool.</p>",
                    where=where, current="/search")
    left = reply.get("left_out") or {}
    why = [f"{n:,} {esc(reason.replace('_', ' '))}" for reason, n in left.items() if isinstance(n, int) and n]
    accounting = (f'<p class="accounting">{reply.get("returned", 0):,} of {reply.get("total_matches", 0):,} '
                  f'matching record(s) returned; left out: {", ".join(why) if why else "none"}.</p>')
    mode = (f'<p class="mode">mode: <strong>{esc(reply.get("mode", "?"))}</strong>'
            + (f" — {esc(reply['mode_reason'])}" if reply.get("mode_reason") else "") + "</p>")
    notices = "".join(f'<p class="notice">{esc(n)}</p>' for n in reply.get("notices") or ())
    body = f"<h1>Search</h1>{form}{mode}{accounting}{notices}{record_list(reply.get('results', ()), scores=True)}"
    return page(f"Search: {params.get('q')}", body, where=where, current="/search")


# -- one record --------------------------------------------------------------------


def _table(rows: Iterable[tuple[str, str]], cls: str = "kv") -> str:
    return f'<table class="{cls}">' + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _value(value: Any) -> str:
    if isinstance(value, str):
        return f'<span class="str">{esc(value)}</span>'
    return f"<code>{esc(render.dumps(value, sort_keys=True))}</code>"


def check_commands(entry: Mapping[str, Any], log_path: str, directory: str, store: str | None = None) -> dict[str, str]:
    """Commands that check a record without trusting this viewer: the CLI's, and one that recomputes its hash.

    One reads the line's bytes at its offset and recomputes the digest and
    the chain hash as the record format specifies (canonical JSON: orjson
    with sorted keys; blake3), with no code of retained's.
    """
    seq, offset, length = int(entry["seq"]), int(entry["offset"]), int(entry["length"])
    q = shlex.quote
    script = (
        "import sys,blake3,orjson;"
        "f=open(sys.argv[1],\"rb\");f.seek(int(sys.argv[2]));line=f.read(int(sys.argv[3]));r=orjson.loads(line);"
        "c=lambda o:orjson.dumps(o,option=orjson.OPT_SORT_KEYS);"
        "cd=r[\"cd\"] if r.get(\"redacted\") else "
        "blake3.blake3(c({k:v for k,v in r.items() if k not in (\"seq\",\"prev\",\"hash\")})).hexdigest();"
        "h=blake3.blake3(c({\"cd\":cd,\"prev\":r[\"prev\"],\"seq\":r[\"seq\"]})).hexdigest();"
        "print(\"seq\",r[\"seq\"],\"hash\",h,\"ok\" if h==r[\"hash\"] and c(r)+b\"\\n\"==line else \"MISMATCH\")"
    )
    return {
        "the line's bytes": f"tail -c +{offset + 1} {q(log_path)} | head -c {length}",
        "recompute its hash": f"python3 -c {q(script)} {q(log_path)} {offset} {length}",
        "the CLI's view": f"retained get {seq}" + (f" --from {store}" if store else "") + f" --json --dir {q(directory)}",
        "the whole chain": f"retained verify --dir {q(directory)}",
    }


def record(entry: Mapping[str, Any], *, older: Sequence[Mapping[str, Any]], newer: Sequence[Mapping[str, Any]],
           chain: Sequence[Mapping[str, Any]], log_path: str, where: Mapping[str, Any]) -> str:
    """One record: its text, its proof, every field, its links, its neighbours in its scope, its supersede chain.

    A record of a store pulled by ``retained sync`` (``entry["origin"]``) shows where it came from, and its links
    stay in that store; ``log_path`` is then its mirror's log.
    """
    rec = entry["record"]
    seq = int(entry["seq"])
    kind = rec.get("kind", "note")
    state = _marks(entry)
    store = pulled_from(entry)
    origin = entry.get("origin") if store is not None else None
    title = f"Record #{seq}"
    parts = [f'<h1>{esc(title)} <span class="badge kind">{esc(render.short(kind))}</span> {origin_badge(entry)}</h1>']
    if isinstance(origin, Mapping):
        parts.append(f'<p class="muted">A record of store <code>{esc(store)}</code> (machine '
                     f'{esc(render.short(str(origin.get("machine"))))}), pulled by <code>retained sync</code> and '
                     'verified; its seqs are that store\'s.</p>')
    if state:
        parts.append(f'<p class="state">{state}</p>')
    if rec.get("redacted"):
        parts.append('<p class="text muted">[redacted: the content was erased; its digest (cd) keeps the chain whole]</p>')
    else:
        if isinstance(rec.get("text"), str):
            parts.append(f'<pre class="text">{esc(rec["text"])}</pre>')
        if rec.get("body") is not None:
            parts.append(f'<h2>Body</h2><pre class="body">{esc(render.body_text(rec["body"]))}</pre>')
    client = rec.get("client")
    proof = [
        ("seq", str(seq)),
        ("hash", f"<code>{esc(rec.get('hash'))}</code>"),
        ("prev", f"<code>{esc(rec.get('prev'))}</code>" + (f" ({seq_link(seq - 1, store)})" if seq > 1 else " (the first record)")),
        ("offset", f"{int(entry['offset']):,} (byte in {esc(log_path)})"),
        ("length", f"{int(entry['length']):,} bytes"),
        ("time", f"<time>{esc(rec.get('ts'))}</time>"),
        ("client", esc(render.client(client)) + (f" <code>{esc(render.dumps(client))}</code>" if client else "")),
    ]
    parts.append("<h2>Proof</h2>" + _table(proof))
    fields = [(esc(k), _value(v)) for k, v in sorted(rec.items()) if k not in PROOF_KEYS]
    parts.append("<h2>Every field</h2>" + (_table(fields) if fields else '<p class="muted">none</p>'))
    links = [(label, _seq_links(rec[name], store))
             for name, label in (("supersedes", "corrects"), ("retracts", "retracts"), ("redacts", "redacts")) if rec.get(name)]
    links += [(name.replace("_", " "), _seq_links(entry[name], store)) for name in LINK_KEYS if entry.get(name)]
    if links:
        parts.append("<h2>Links</h2>" + _table(links))
    if len(chain) > 1:
        items = "".join(
            f'<li class="{"current" if c["seq"] == seq else ""}">{seq_link(c["seq"], store)} '
            f'<time>{esc(render.ts(c["record"].get("ts")))}</time> '
            f'{esc(_preview(str(c["record"].get("text", "")), 160))}</li>'
            for c in chain
        )
        parts.append(f'<h2>Supersede chain</h2><p class="muted">oldest first; the last is current</p>'
                     f'<ol class="chain">{items}</ol>')
    scope = rec.get("scope")
    scope_label = f"scope {esc(scope)}" if isinstance(scope, str) else "no scope"
    parts.append(f"<h2>Neighbours in {'its store' if store else scope_label}</h2>")
    parts.append('<div class="neighbours"><div><h3>newer</h3>' + record_list(newer) + "</div>"
                 '<div><h3>older</h3>' + record_list(older) + "</div></div>")
    commands = check_commands(entry, log_path, str(where.get("directory", "")), store)
    parts.append("<h2>Check it yourself</h2>" + _table(
        [(esc(k), f'<code class="cmd">{esc(v)}</code>') for k, v in commands.items()], "kv commands"))
    return page(title, "".join(parts), where=where)


# -- health ------------------------------------------------------------------------


def _counts(title: str, counts: Mapping[str, int], param: str | None, shown: int | None = None) -> str:
    items = list(counts.items())
    rows = []
    for name, n in items[:shown] if shown else items:
        label = esc(name)
        if param and name != "(none)":
            label = f'<a href="{href("/", {param: name})}">{label}</a>'
        rows.append(f"<tr><th>{label}</th><td>{n:,}</td></tr>")
    more = f'<p class="muted">and {len(items) - shown:,} more</p>' if shown and len(items) > shown else ""
    return f'<section class="counts"><h3>{esc(title)}</h3><table class="kv">{"".join(rows)}</table>{more}</section>'


def _buckets(by_day: Mapping[str, int]) -> tuple[str, list[tuple[str, int]], int]:
    """Records per day, week or month (the finest that fits ``CHART_BARS_MAX`` bars), gaps as zeros; and the odd days."""
    days: dict[datetime.date, int] = {}
    odd = 0
    for text, n in by_day.items():
        try:
            day = datetime.date.fromisoformat(text)
            days[day] = days.get(day, 0) + n
        except ValueError:
            odd += n  # a record whose ts is not a date (only a hand-made line can have one)
    if not days:
        return "day", [], odd
    first, last = min(days), max(days)
    span = (last - first).days + 1
    if span <= CHART_BARS_MAX:
        unit, step, key = "day", 1, lambda d: d
    elif span <= CHART_BARS_MAX * 7:
        unit, step, key = "week", 7, lambda d: d - datetime.timedelta(days=d.weekday())
    else:
        unit, step, key = "month", 31, lambda d: d.replace(day=1)
    totals: dict[datetime.date, int] = {}
    for d, n in days.items():
        totals[key(d)] = totals.get(key(d), 0) + n
    out = []
    cursor = key(first)
    while cursor <= last:
        out.append((cursor.isoformat(), totals.get(cursor, 0)))
        cursor = key(cursor + datetime.timedelta(days=step))  # a month's first day + 31 days is in the next month
    return unit, out, odd


def chart(by_day: Mapping[str, int]) -> str:
    """Records over time as an inline SVG bar chart (drawn here: no script, no external file)."""
    unit, bars, odd = _buckets(by_day)
    if not bars:
        return '<p class="muted">No records to chart.</p>'
    width, height, pad_left, pad_bottom, pad_top = 720, 180, 48, 28, 12
    plot_w, plot_h = width - pad_left - 8, height - pad_bottom - pad_top
    top = max(n for _, n in bars) or 1
    # A few bars keep the width of one in CHART_SLOTS_MIN, so one day is not a wall.
    bar_w = plot_w / max(len(bars), CHART_SLOTS_MIN)
    right = pad_left + bar_w * len(bars)
    rects = []
    for i, (label, n) in enumerate(bars):
        h = 0 if n == 0 else max(1.0, plot_h * n / top)
        x = pad_left + i * bar_w
        rects.append(
            f'<rect class="bar" x="{x + bar_w * 0.1:.1f}" y="{pad_top + plot_h - h:.1f}" width="{max(bar_w * 0.8, 1):.1f}" '
            f'height="{h:.1f}"><title>{esc(unit)} of {esc(label)}: {n:,} records</title></rect>'
        )
    axis = (
        f'<line class="axis" x1="{pad_left}" y1="{pad_top + plot_h}" x2="{right:.1f}" y2="{pad_top + plot_h}"/>'
        f'<text x="{pad_left - 6}" y="{pad_top + 10}" text-anchor="end">{top:,}</text>'
        f'<text x="{pad_left - 6}" y="{pad_top + plot_h}" text-anchor="end">0</text>'
        f'<text x="{pad_left}" y="{height - 8}">{esc(bars[0][0])}</text>'
        + (f'<text x="{right:.1f}" y="{height - 8}" text-anchor="end">{esc(bars[-1][0])}</text>'
           if len(bars) > 1 else "")
    )
    note = f'<p class="muted">{odd:,} record(s) with a time that is not a date are not charted.</p>' if odd else ""
    return (f'<figure class="chart"><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
            f'role="img" aria-label="records per {esc(unit)}">{axis}{"".join(rects)}</svg>'
            f"<figcaption>records per {esc(unit)}, UTC</figcaption></figure>{note}")


def _bytes(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def verify_summary(job: Mapping[str, Any] | None) -> str:
    """The last verify run in a few lines (the health page), or that none ran yet."""
    if job is None:
        return f'<p class="muted">Not run since the viewer started.</p>{RUN_BUTTON}'
    if job["state"] == "running":
        return f'<p>Running: <a href="{href("/verify")}">see its progress</a>.</p>'
    return _verdict(job) + f'<p><a href="{href("/verify")}">full report</a></p>{RUN_BUTTON}'


def _verdict(job: Mapping[str, Any]) -> str:
    if job["state"] == "failed":
        return f'<p class="verdict bad">verify could not run: {esc(job["error"])}</p>'
    report = job["report"]
    n = len(report.get("findings") or ())
    cls, text = ("good", "ok: the chain and the index agree with the log; no findings") if report.get("ok") else (
        "bad", f"{_plural(n, 'finding')}")
    return (f'<p class="verdict {cls}">verify {esc(text)} — judged {report.get("records", 0):,} records, '
            f'{report.get("bytes", 0):,} bytes, in {job["seconds"]:.1f} s (finished {esc(job["finished_at"])})</p>')


def health(stats: Mapping[str, Any], job: Mapping[str, Any] | None, where: Mapping[str, Any]) -> str:
    """Head, counts by kind, scope and client, sizes, damage, the index, records over time, and verify."""
    head = stats["head"]
    sizes = stats["sizes"]
    idx = stats.get("index")
    if idx is None:
        index_text = "none yet (built on the first read)"
    elif idx.get("state") == "unreadable":
        index_text = f"unreadable: {idx.get('error')}"
    else:
        index_text = f"{idx['state']}, indexed to seq {idx['seq']}; lag {idx['lag_records']} records"
    damage = [
        ("chain findings (stats' walk)", f"{stats['findings']:,}"),
        ("foreign lines (kept, skipped)", f"{stats['foreign_lines']:,}"),
        ("damaged lines", f"{stats['damaged_lines']:,}"),
        ("quarantined torn tails", f"{len(stats['quarantined']):,} ({_bytes(sizes['quarantined_bytes'])})"),
        ("unterminated tail now", "yes" if stats["torn_tail"] else "no"),
    ]
    bad = stats["findings"] or stats["damaged_lines"] or stats["torn_tail"]
    overview = [
        ("head", f"{seq_link(head['seq'])} <code>{esc(head['hash'])}</code>" if head.get("seq") else "no records"),
        ("records", f"{stats['records']:,} (superseded {stats['superseded']:,}, retracted {stats['retracted']:,}, "
                    f"redacted {stats['redacted']:,})"),
        ("log", f"{esc(stats['log'])}: {_bytes(sizes['log_bytes'])}"),
        ("record size", f"mean {sizes['record_bytes_mean']:,} bytes, largest {sizes['record_bytes_max']:,}"),
        ("index", f"{esc(index_text)} ({_bytes(sizes['index_bytes'])})"),
        ("vectors", esc(render.vectors_held(stats))),
    ]
    quarantined = "".join(f"<li><code>{esc(q.get('file'))}</code>: {q.get('bytes', 0):,} bytes, was at byte "
                          f"{q.get('offset', 0):,}</li>" for q in stats["quarantined"])
    body = (
        "<h1>Health</h1>"
        f'<p class="verdict {"bad" if bad else "good"}">'
        f'{"the log has problems: run verify for the details" if bad else "the chain walk found no problem"}</p>'
        + _table(overview)
        + "<h2>Verify</h2>" + verify_summary(job)
        + "<h2>Damage</h2>" + _table(damage)
        + (f"<ul>{quarantined}</ul>" if quarantined else "")
        + "<h2>Records over time</h2>" + chart(stats.get("by_day") or {})
        + '<h2>Counts</h2><div class="columns">'
        + _counts("by kind", stats["by_kind"], "kind")
        + _counts("by scope", stats["by_scope"], "scope", SCOPES_SHOWN)
        + _counts("by client", stats.get("by_client") or {}, "client")
        + "</div>"
        + _capture(stats.get("capture"))
    )
    return page("Health", body, where=where, current="/health")


def _capture(cap: Mapping[str, Any] | None) -> str:
    """The capture ledger (docs/capture.md): every event received and what became of it, overall and per day."""
    if not cap:
        return ""
    t = cap["totals"]
    adds = "good" if cap["adds_up"] else "bad"
    rows = [(name, f"{t[name]:,}") for name in ("received", "captured", "deduplicated", "skipped", "spooled", "failed")]
    rows += [("secrets redacted", f"{t['redactions']:,}"), ("private spans removed", f"{t['private_spans']:,}"),
             ("waiting in the spool", f"{cap.get('spool_files', 0):,}")]
    for outcome, reasons in cap["reasons"].items():
        rows.append((f"{outcome}: why", esc(", ".join(f"{why} {n:,}" for why, n in reasons.items()))))
    days = "".join(f"<tr><th>{esc(day)}</th><td>{c['received']:,}</td><td>{c['captured']:,}</td><td>{c['deduplicated']:,}</td>"
                   f"<td>{c['skipped']:,}</td><td>{c['spooled']:,}</td><td>{c['failed']:,}</td></tr>"
                   for day, c in list(cap["days"].items())[-14:])
    return ("<h2>Capture</h2>"
            f'<p class="verdict {adds}">received = captured + deduplicated + skipped + spooled + failed: '
            f'{"adds up" if cap["adds_up"] else "does not add up"}</p>' + _table(rows)
            + ('<table class="kv"><tr><th>day (UTC)</th><th>received</th><th>captured</th><th>deduplicated</th>'
               f"<th>skipped</th><th>spooled</th><th>failed</th></tr>{days}</table>" if days else ""))


def verify(job: Mapping[str, Any] | None, where: Mapping[str, Any]) -> str:
    """A verify run: its progress while it runs (the page reloads itself each second), then every finding."""
    if job is None:
        return page("Verify", "<h1>Verify</h1>" + verify_summary(None), where=where, current="/health")
    if job["state"] == "running":
        done, total = job["done_bytes"], job["total_bytes"]
        pct = 100 * done // total if total else 0
        body = (f"<h1>Verify</h1><p>Walking the chain and checking the index: {done:,} of {total:,} bytes "
                f"({pct}%), {job['seconds']:.1f} s so far.</p>"
                f'<progress max="{max(total, 1)}" value="{done}">{pct}%</progress>'
                '<p class="muted">This page reloads itself every second until verify is done.</p>')
        return page("Verify (running)", body, where=where, current="/health", refresh_s=1)
    parts = ["<h1>Verify</h1>", _verdict(job)]
    if job["state"] == "done":
        report = job["report"]
        findings = report.get("findings") or []
        if findings:
            rows = "".join(
                f"<tr><td>{esc(f.get('kind'))}</td><td>{seq_link(f.get('seq')) if _is_seq(f.get('seq')) else ''}</td>"
                f"<td>{esc(f.get('offset') if f.get('offset') is not None else '')}</td><td>{esc(f.get('message'))}</td></tr>"
                if isinstance(f, dict) else f'<tr><td colspan="4">{esc(f)}</td></tr>'
                for f in findings
            )
            parts.append('<h2>Findings</h2><table class="findings"><tr><th>kind</th><th>seq</th><th>byte</th>'
                         f"<th>what</th></tr>{rows}</table>")
        facts = []
        head = report.get("head") or {}
        if head.get("seq"):
            facts.append(("head judged", f"{seq_link(head['seq'])} <code>{esc(head.get('hash'))}</code>"))
        facts.append(("index checked", "yes" if report.get("index") else "no (none yet)"))
        for name in ("redacted", "foreign"):
            if report.get(name):
                facts.append((name, f"{len(report[name]):,}"))
        if report.get("torn_tail"):
            facts.append(("unterminated tail", esc(report["torn_tail"])))
        for q in report.get("quarantined") or ():
            facts.append(("quarantined tail", f"<code>{esc(q.get('file'))}</code> {q.get('bytes', 0):,} bytes"))
        for name, value in report.items():
            if name in ("anchors", "anchor", "snapshot", "vectors") and value:
                facts.append((esc(name), f"<code>{esc(value)}</code>"))
        parts.append("<h2>What was judged</h2>" + _table(facts))
    parts.append(RUN_BUTTON)
    return page("Verify", "".join(parts), where=where, current="/health")


# -- brief -------------------------------------------------------------------------


def brief(result: Mapping[str, Any], text: str, params: Mapping[str, Any], where: Mapping[str, Any]) -> str:
    """What the session-start brief would show at this budget, and what it left out, by reason."""
    form = (
        '<form class="filters" method="get" action="/brief">'
        + _field("budget", "token budget", params.get("budget"), "number", ' min="0"')
        + _field("scope", "scope", params.get("scope"))
        + '<button type="submit">Show</button></form>'
    )
    dropped = result.get("dropped") or {}
    rows = [(esc(k.replace("_", " ")), f"{v:,}") for k, v in dropped.items()]
    included = "".join(
        f"<li>{seq_link(e.get('seq'), pulled_from(e))} {origin_badge(e) + ' ' if pulled_from(e) else ''}"
        f"{esc(e.get('kind'))} · {e.get('tokens', 0):,} tokens"
        + (" · cut to fit" if e.get("cut") else "") + "</li>"
        for e in result.get("included") or ()
    )
    index = result.get("index") or {}
    facts = [
        ("status", esc(result.get("status"))),
        ("shown", f"{len(result.get('included') or ()):,} of {result.get('eligible', 0):,} eligible records"),
        ("tokens", f"{result.get('tokens', 0):,} of {result.get('budget', 0):,} (estimate: UTF-8 bytes / 4)"),
        ("counted", esc(index.get("how") or "")),
        ("exact", "yes" if result.get("exact") else "no"),
    ]
    body = (
        "<h1>Brief</h1>" + form
        + '<p class="muted">What <code>retained brief</code> prints at session start with this budget.</p>'
        + _table(facts)
        + "<h2>Left out</h2>" + _table(rows)
        + "<h2>As the agent sees it</h2>" + f'<pre class="brief">{esc(text)}</pre>'
        + (f'<h2>Records shown</h2><ul class="plain">{included}</ul>' if included else "")
    )
    return page("Brief", body, where=where, current="/brief")
