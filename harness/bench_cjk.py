"""Why CJK text is indexed as bigrams: recall, index size and query time of three ways.

    python harness/bench_cjk.py [--docs 20000] [--json]

Ways compared, each an FTS5 table over the same documents:

- ``unicode61``: the product's tokenizer alone. A run of Chinese or Japanese
  characters is one token, so a word inside a longer run is never found.
- ``trigram``: FTS5's trigram tokenizer. Finds any substring of three or more
  characters, but a two-character query (most Chinese words) matches nothing.
- ``bigram``: what retained does (``query.segment``): each CJK run becomes
  overlapping bigrams plus its last character, under the same porter
  unicode61 tokenizer as everything else; a query run becomes a phrase of its
  bigrams, a single character a prefix query.

Recall is measured against substring truth: a (query, document) pair is
relevant when the document contains the query text. The documents are short
sentences written for this test (Chinese and Japanese, with some Latin words
mixed in), replicated with shuffled clauses to reach ``--docs``. Query time
here is dominated by how many rows a query returns (the replication makes
every word common); compare it per row returned.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retained.index import query
from retained.index.writer import TOKENIZER

SENTENCES = [
    "我们明天去东京参观博物馆",
    "北京的天气今天很好",
    "他在上海工作了三年",
    "数据库索引需要定期重建",
    "这个项目使用SQLite存储数据",
    "请把会议记录发给我",
    "部署目标是生产环境",
    "她喜欢喝绿茶和咖啡",
    "我们讨论了搜索引擎的排序",
    "日志文件是唯一的事实来源",
    "東京都庁の展望台に行きました",
    "日本語のテキストを検索する",
    "明日は雨が降るでしょう",
    "データベースのインデックスを再構築する",
    "会議の議事録を共有してください",
    "彼はコーヒーが好きです",
    "新しいプロジェクトが始まりました",
    "検索エンジンの順位付けについて話した",
    "このログは改ざんを検出できる",
    "京都で桜を見ました",
    "한국어 텍스트도 검색할 수 있어야 합니다",
    "서울의 날씨가 좋습니다",
]
QUERIES = [
    "东京", "北京", "上海", "数据", "索引", "重建", "会议", "记录", "部署", "生产", "绿茶", "搜索", "排序", "日志",
    "事实", "東京", "検索", "テキスト", "インデックス", "議事録", "コーヒー", "京都", "プロジェクト", "ログ",
    "天气", "博物馆", "生产环境", "展望台", "改ざん", "検出", "날씨", "텍스트", "검색", "京", "茶", "雨",
]


def corpus(n: int) -> list[str]:
    rng = random.Random(3)
    docs = list(SENTENCES)
    while len(docs) < n:
        a, b = rng.sample(SENTENCES, 2)
        docs.append(a + "，" + b if rng.random() < 0.5 else b + " and " + a)
    return docs[:n]


def build(kind: str, docs: list[str]) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    tok = {"unicode61": TOKENIZER, "trigram": "trigram", "bigram": TOKENIZER}[kind]
    db.execute(f"CREATE VIRTUAL TABLE f USING fts5(t, content='', tokenize='{tok}')")
    prep = query.segment if kind == "bigram" else (lambda s: s)
    db.executemany("INSERT INTO f (rowid, t) VALUES (?, ?)", [(i, prep(d)) for i, d in enumerate(docs)])
    return db


def expr(kind: str, q: str) -> str | None:
    if kind == "bigram":
        return query.build(q)
    return '"' + q.replace('"', '""') + '"'


def measure(kind: str, docs: list[str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    db = build(kind, docs)
    build_s = time.perf_counter() - t0
    pages = db.execute("PRAGMA page_count").fetchone()[0] * db.execute("PRAGMA page_size").fetchone()[0]
    relevant = found = returned = 0
    lat = []
    for q in QUERIES:
        truth = {i for i, d in enumerate(docs) if q in d}
        e = expr(kind, q)
        t1 = time.perf_counter()
        got = {r[0] for r in db.execute("SELECT rowid FROM f WHERE f MATCH ?", (e,))} if e else set()
        lat.append((time.perf_counter() - t1) * 1000)
        relevant += len(truth)
        found += len(truth & got)
        returned += len(got)
    return {
        "way": kind,
        "recall": round(found / relevant, 3),
        "precision": round(found / returned, 3) if returned else None,
        "rows_returned": returned,
        "index_bytes": pages,
        "build_s": round(build_s, 3),
        "query_ms_p50": round(statistics.median(lat), 3),
        "query_ms_max": round(max(lat), 3),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="CJK indexing: unicode61 vs trigram vs bigrams",
                                epilog="example: python harness/bench_cjk.py --docs 20000")
    p.add_argument("--docs", type=int, default=20000)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    docs = corpus(args.docs)
    out = [measure(k, docs) for k in ("unicode61", "trigram", "bigram")]
    if args.json:
        print(json.dumps({"docs": len(docs), "queries": len(QUERIES), "ways": out}))
    else:
        print(f"{len(docs)} documents, {len(QUERIES)} queries (1-6 characters)")
        for r in out:
            print(f"{r['way']:10s} recall {r['recall']:.3f}  index {r['index_bytes'] / 1e6:6.2f} MB  "
                  f"build {r['build_s']:.2f} s  precision {r['precision']}  rows {r['rows_returned']}  "
                  f"query p50 {r['query_ms_p50']:.2f} ms  max {r['query_ms_max']:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
