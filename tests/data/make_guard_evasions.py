"""Write tests/data/guard_evasions.jsonl: secrets in disguise, and benign text that looks a little like them.

Run: ``python tests/data/make_guard_evasions.py`` (deterministic: a fixed seed).

The write guard normalises text before it scans it (issue 29): Unicode
compatibility forms (NFKC: fullwidth and mathematical letters, no-break
spaces), format characters (zero-width spaces and joiners, soft hyphens,
direction marks, tag characters), the case of PEM armour, broken or missing
armour, and keys split by whitespace. This script makes the evasions it is
scored on: fake credentials in each provider's format (random characters made
up here, never issued by anyone), each passed through one or more disguises.
A real-shaped PEM body is made from a DER prefix of the right structure
followed by random bytes.

The benign rows are the other side of the score: conversation turns,
prose in several scripts (accents, CJK, emoji joined with ZWJ, right-to-left
text with its marks, soft hyphens, fullwidth text), code, URLs, and prose
about keys and passwords. None may be refused.

As in guard_corpus.jsonl, no secret is stored whole: a secret row's value is
``{"$join": [parts]}`` with parts of at most 10 characters, joined by
``tests/unit/test_guard_evasions.py`` when it loads the file.

Each line: ``{"value": str, "secret": bool, "disguise": str, "base": str}``.
"""

from __future__ import annotations

import base64
import json
import random
import string
import sys
from pathlib import Path

OUT = Path(__file__).with_name("guard_evasions.jsonl")
rng = random.Random(20261202)

B62 = string.ascii_letters + string.digits
URLSAFE = B62 + "-_"
UPPER_DIGITS = string.ascii_uppercase + string.digits


def rand(alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def split_parts(value: str) -> dict[str, list[str]]:
    return {"$join": [value[i : i + 10] for i in range(0, len(value), 10)] or [""]}


# -- the secrets, undisguised ------------------------------------------------------------------


def der_body(prefix: bytes, total: int) -> str:
    """A base64 body: a private key's DER header, then random bytes up to ``total``."""
    return base64.b64encode(prefix + rng.randbytes(total - len(prefix))).decode()


def wrap(body: str, width: int = 64) -> list[str]:
    return [body[i : i + width] for i in range(0, len(body), width)]


RSA_DER = bytes.fromhex("308204a40201000282010100")  # PKCS#1: SEQUENCE, version 0, the modulus
PKCS8_DER = bytes.fromhex("308204bd020100300d06092a864886f70d0101010500048204a7")
EC_DER = bytes.fromhex("307702010104")
OPENSSH = b"openssh-key-v1\x00\x00\x00\x00\x04none\x00\x00\x00\x04none"


def tokens() -> dict[str, str]:
    return {
        "aws": "AKIA" + rand(UPPER_DIGITS, 16),
        "github": "ghp_" + rand(B62, 36),
        "stripe": "sk_live_" + rand(B62, 24),
        "slack": "xoxb-" + rand(string.digits, 12) + "-" + rand(string.digits, 13) + "-" + rand(B62, 24),
        "openai": "sk-proj-" + rand(URLSAFE, 48),
        "gcp": "AIza" + rand(URLSAFE, 35),
        "hf": "hf_" + rand(string.ascii_letters, 34),
        "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiI" + rand(URLSAFE, 20) + "." + rand(URLSAFE, 43),
        "generic": rand(B62, 40),
    }


def pem(kind: str, body: str) -> tuple[str, str, str]:
    return f"-----BEGIN {kind}PRIVATE KEY-----", "\n".join(wrap(body)), f"-----END {kind}PRIVATE KEY-----"


# -- disguises -------------------------------------------------------------------------------

FORMAT_CHARS = {
    "zwsp": "\u200b", "zwnj": "\u200c", "zwj": "\u200d", "word_joiner": "\u2060", "bom": "\ufeff",
    "soft_hyphen": "\u00ad", "lrm": "\u200e", "rlm": "\u200f", "rlo": "\u202e", "lri": "\u2066",
    "invisible_times": "\u2062", "tag_space": "\U000e0020", "mongolian_vs": "\u180e",
}


def sprinkle(s: str, ch: str, every: int) -> str:
    return ch.join(s[i : i + every] for i in range(0, len(s), every))


def fullwidth(s: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in s)


def math_letters(s: str, upper: int, lower: int, digit: int) -> str:
    """``s`` in one of Unicode's mathematical alphabets (NFKC folds them back to ASCII)."""
    out = []
    for c in s:
        if "A" <= c <= "Z":
            out.append(chr(upper + ord(c) - 65))
        elif "a" <= c <= "z":
            out.append(chr(lower + ord(c) - 97))
        elif "0" <= c <= "9":
            out.append(chr(digit + ord(c) - 48))
        else:
            out.append(c)
    return "".join(out)


def math_bold(s: str) -> str:
    return math_letters(s, 0x1D400, 0x1D41A, 0x1D7CE)


def math_mono(s: str) -> str:
    return math_letters(s, 0x1D670, 0x1D68A, 0x1D7F6)


def groups(s: str, n: int, sep: str = " ") -> str:
    return sep.join(s[i : i + n] for i in range(0, len(s), n))


def secret_rows() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []

    def add(disguise: str, base: str, text: str) -> None:
        rows.append({"value": text, "secret": True, "disguise": disguise, "base": base})

    t = tokens()
    # Format characters inside provider tokens: after the prefix, and every few characters.
    for (name, ch), base in zip(FORMAT_CHARS.items(), ["aws", "github", "stripe", "slack", "openai", "gcp", "hf",
                                                          "jwt", "aws", "github", "stripe", "openai", "gcp"], strict=True):
        tok = t[base]
        add(f"format_char:{name}", base, f"the deploy key is {tok[:4]}{ch}{tok[4:]} for now")
        add(f"format_char:{name}:every_3", base, sprinkle(tok, ch, 3))
    # Compatibility forms.
    for base in ("aws", "github", "stripe", "openai", "gcp", "hf"):
        add("nfkc:fullwidth", base, f"token {fullwidth(t[base])} please")
    for base in ("aws", "github", "stripe"):
        add("nfkc:math_bold", base, math_bold(t[base]))
        add("nfkc:math_mono", base, f"key: {math_mono(t[base])}")
    add("nfkc:fullwidth_prefix_only", "github", fullwidth(t["github"][:4]) + t["github"][4:])
    add("nfkc+zwsp", "aws", sprinkle(fullwidth(t["aws"]), "\u200b", 5))
    add("nfkc:no_break_space", "password", "DB_PASSWORD\u00a0=\u00a0" + rand(B62, 14) + "!x9")
    add("zwsp:assigned_name", "password", "pass\u200bword: " + rand(B62, 12) + "#7Q")
    add("nfkc:fullwidth_name", "password", fullwidth("api_key") + "=" + rand(B62, 32))
    add("zwsp:url_password", "url", "postgres://admin:" + rand(B62, 6) + "\u200b" + rand(B62, 8) + "@db.internal:5432/app")
    add("nfkc:fullwidth_colon_url", "url", "redis://app" + fullwidth(":") + rand(B62, 16) + "@cache.internal/0")
    # Keys split by whitespace.
    add("split:groups_of_4", "aws", groups(t["aws"], 4))
    add("split:groups_of_8", "github", "use " + groups(t["github"], 8) + " in CI")
    add("split:newline", "stripe", t["stripe"][:16] + "\n" + t["stripe"][16:])
    add("split:two_halves", "openai", t["openai"][:28] + " " + t["openai"][28:])
    add("split:groups_of_6_tabs", "gcp", groups(t["gcp"], 6, "\t"))
    add("split:dash_groups_spaces", "slack", groups(t["slack"], 10))
    add("split:jwt_parts", "jwt", " ".join(t["jwt"].split(".", 1)[:1]) + ". " + t["jwt"].split(".", 1)[1])
    # PEM private keys: armour in disguise, broken or gone.
    rsa = der_body(RSA_DER, 1192)
    pkcs8 = der_body(PKCS8_DER, 1217)
    ec = der_body(EC_DER, 121)
    ossh = base64.b64encode(OPENSSH + rng.randbytes(360)).decode()
    h, b, e = pem("RSA ", rsa)
    add("pem:zwsp_in_header", "rsa", h.replace("PRIVATE", "PRI\u200bVATE") + "\n" + b + "\n" + e)
    add("pem:zwsp_every_header_word", "rsa", h.replace(" ", " \u200b") + "\n" + b + "\n" + e.replace(" ", "\u200b "))
    add("pem:lower_case_armour", "rsa", h.lower() + "\n" + b + "\n" + e.lower())
    add("pem:mixed_case_armour", "rsa", h.replace("PRIVATE KEY", "Private Key") + "\n" + b + "\n" + e)
    add("pem:four_dashes", "rsa", h.replace("-----", "----") + "\n" + b + "\n" + e.replace("-----", "----"))
    add("pem:no_dashes", "rsa", "BEGIN RSA PRIVATE KEY\n" + b + "\nEND RSA PRIVATE KEY")
    add("pem:double_spaces", "rsa", h.replace(" ", "  ") + "\n" + b + "\n" + e)
    add("pem:no_armour", "rsa", b)
    add("pem:no_armour_one_line", "rsa", "here it is: " + rsa)
    add("pem:body_one_line", "rsa", h + rsa + e)
    add("pem:crlf", "rsa", (h + "\n" + b + "\n" + e).replace("\n", "\r\n"))
    add("pem:indented", "rsa", "key:\n    " + h + "\n    " + b.replace("\n", "\n    ") + "\n    " + e)
    add("pem:header_only_start", "rsa", h + "\n" + "\n".join(wrap(rsa)[:3]))
    add("pem:fullwidth_armour", "rsa", fullwidth(h) + "\n" + b + "\n" + fullwidth(e))
    add("pem:nbsp_armour", "rsa", h.replace(" ", "\u00a0") + "\n" + b + "\n" + e.replace(" ", "\u00a0"))
    add("pem:body_split_in_groups", "rsa", h + "\n" + groups(rsa[:400], 16) + "\n" + e)
    add("pem:zwsp_in_body", "rsa", h + "\n" + sprinkle(rsa, "\u200b", 40) + "\n" + e)
    h8, b8, e8 = pem("", pkcs8)
    add("pem:pkcs8_no_armour", "pkcs8", b8)
    add("pem:pkcs8_lower_case", "pkcs8", h8.lower() + "\n" + b8 + "\n" + e8.lower())
    add("pem:pkcs8_soft_hyphens", "pkcs8", h8.replace("PRIVATE", "PRI\u00adVATE") + "\n" + b8 + "\n" + e8)
    he, be, ee = pem("EC ", ec)
    add("pem:ec_no_armour", "ec", be)
    add("pem:ec_three_dashes", "ec", he.replace("-----", "---") + "\n" + be + "\n" + ee.replace("-----", "---"))
    ho, bo, eo = pem("OPENSSH ", ossh)
    add("pem:openssh_no_armour", "openssh", bo)
    add("pem:openssh_word_joiner", "openssh", ho.replace("OPENSSH", "OPEN\u2060SSH").replace("KEY", "K\u2060EY") + "\n" + bo + "\n" + eo)
    return rows


# -- benign text -----------------------------------------------------------------------------

SPEAKERS = ("Caroline", "Melanie", "Jon", "Gina", "Zoë", "José", "Ana", "Chloé")
WORDS = (
    "I went to a support group yesterday and it was so powerful the kids painted a sunset at the lake last "
    "weekend my new job at the bakery starts next month we adopted a puppy named Oscar he loves the beach I've "
    "been reading a book about mindfulness and pottery classes help me relax our family camping trip was "
    "amazing despite the rain the deploy moved to friday after the staging fix review the key points of the plan"
).split()


def sentence(n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def benign_rows() -> list[dict[str, object]]:
    texts: list[tuple[str, str]] = []
    for i in range(80):
        texts.append(("turn", f"{SPEAKERS[i % len(SPEAKERS)]}: {sentence(rng.randint(6, 28))}{rng.choice('.!?')}"))
    decorated = [
        ("emoji_zwj", "Family day! 👨\u200d👩\u200d👧 we baked bread and watched the sunset 🌅"),
        ("emoji_zwj", "Caroline: my rainbow flag 🏳\ufe0f\u200d🌈 is up again, feels good"),
        ("emoji_vs", "I love it ❤\ufe0f thanks so much ☺\ufe0f"),
        ("accents", "Zoë: the café on rue Saint-Honoré serves crème brûlée and piña colada"),
        ("accents", "Straße, Größe, naïve, façade, coöperate, résumé, jalapeño, Ångström"),
        ("cjk", "今日は図書館で本を読みました。明日は友達と公園に行きます。"),
        ("cjk", "我们明天下午三点在会议室讨论部署计划，请准备好幻灯片。"),
        ("korean", "오늘 회의는 오후 세 시에 시작합니다. 자료를 준비해 주세요."),
        ("rtl_marks", "\u202bשלום עולם\u202c and then \u200fمرحبا\u200f in one note"),
        ("rtl", "مرحبا بالعالم، نلتقي غدا في المكتب الساعة العاشرة"),
        ("soft_hyphen", "an extra\u00adordinarily long word with soft hy\u00adphens in it"),
        ("fullwidth", "ＡＢＣ株式会社の会議は１０時からです"),
        ("fullwidth", "ｈｅｌｌｏ ｗｏｒｌｄ， ｔｈｉｓ ｉｓ ｗｉｄｅ ｔｅｘｔ"),
        ("nbsp", "10\u00a0km from the lake, 5\u00a0°C at night, 3\u00a0kids"),
        ("ligature", "the ﬁrst oﬃce ﬂoor has a ﬁne view"),
        ("math", "let x² + y² = r², with α ≈ 0.5 and β ∈ ℝ"),
        ("bom", "\ufeffcsv header: name, city, visits"),
        ("zwsp_prose", "long\u200burl\u200bbreaks are allowed in this para\u200bgraph"),
        ("word_joiner", "keep these\u2060together on one line please"),
        ("cyrillic", "Привет, как дела? Встретимся завтра в десять."),
        ("greek", "Καλημέρα, η συνάντηση είναι στις δέκα."),
        ("hindi", "नमस्ते, कल सुबह दस बजे मिलते हैं।"),
        ("thai", "สวัสดีครับ พรุ่งนี้เจอกันตอนสิบโมง"),
        ("emoji_flags", "trip plan 🇫🇷 → 🇮🇹 → 🇪🇸, back on the 14th"),
        ("mixed", "Gina: 我的新工作 starts Monday — so excited! 🎉"),
        ("keycap", "press 1\ufe0f\u20e3 for yes and 2\ufe0f\u20e3 for no"),
        ("tag_flag", "go Scotland 🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f!"),
    ]
    texts += decorated
    for i in range(30):
        p = i % 6
        if p == 0:
            texts.append(("url", f"see https://example.com/docs/page-{i}?ref=notes#part-{i % 7}"))
        elif p == 1:
            texts.append(("url", f"the issue is at https://github.com/org/repo-{i}/issues/{100 + i} and the PR links it"))
        elif p == 2:
            texts.append(("url", f"https://www.youtube.com/watch?v={rand(URLSAFE, 11)}&t={i}s"))
        elif p == 3:
            texts.append(("url", f"docs: https://docs.python.org/3/library/unicodedata.html#unicodedata.normalize ({i})"))
        elif p == 4:
            texts.append(("url", f"https://ja.wikipedia.org/wiki/東京 and https://de.wikipedia.org/wiki/Straße_{i}"))
        else:
            texts.append(("url", f"mirror: http://localhost:{8000 + i}/api/v1/items?page={i}&per_page=50"))
    code = [
        "def handle(request, retries=3):\n    return client.get(url, timeout=30)  # retry on 503",
        "password = getpass.getpass('Password: ')\nif not password:\n    raise SystemExit(1)",
        "api_key = os.environ['API_KEY']\nheaders = {'Authorization': f'Bearer {api_key}'}",
        "for (let i = 0; i < items.length; i++) { total += items[i].price * items[i].qty; }",
        "SELECT id, name FROM users WHERE created_at > '2024-01-01' ORDER BY id LIMIT 50;",
        "const key = crypto.randomBytes(32); // the private key is generated at runtime, never stored",
        "ssh-keygen -t ed25519 -C 'me@example.com' -f ~/.ssh/id_ed25519",
        "openssl genrsa -out private.pem 2048 && openssl rsa -in private.pem -pubout -out public.pem",
        "if (token == null) { throw new IllegalStateException(\"token missing\"); }",
        "git log --oneline | head -5\n87643fa tests: the plugin's capture tests always run",
        "name = unicodedata.normalize('NFKC', name).casefold()",
        "x = [n ** 2 for n in range(10) if n % 2 == 0]\nprint(sum(x))",
        "docker run -p 8080:80 -v $(pwd)/data:/data nginx:1.25",
        "kubectl get secrets -n prod -o name | wc -l",
        "# 設定ファイル\nport = 8080\nhost = \"localhost\"",
        "fn main() { let v: Vec<u8> = vec![0; 16]; println!(\"{:?}\", v); }",
        "BEGIN TRANSACTION; UPDATE accounts SET balance = balance - 10 WHERE id = 7; COMMIT;",
        "with open(path, 'rb') as f:\n    digest = hashlib.sha256(f.read()).hexdigest()",
        "ruff check . && mypy retained && pytest -q -x tests/unit",
        "curl -s https://api.example.com/v1/status | jq '.components[] | .name'",
    ]
    for c in code:
        texts.append(("code", c))
    public_der = bytes.fromhex("30820122300d06092a864886f70d01010105000382010f00")
    public_key = "\n".join(wrap(base64.b64encode(public_der + rng.randbytes(270)).decode()))
    certificate = "\n".join(wrap(base64.b64encode(bytes.fromhex("308203") + rng.randbytes(600)).decode()))
    about = [
        "Store the private key in the vault, never in the repo; rotate it every 90 days.",
        "The PEM file starts with BEGIN PUBLIC KEY; that one is safe to share.",
        "-----BEGIN PUBLIC KEY-----\n" + public_key + "\n-----END PUBLIC KEY-----",
        "-----BEGIN CERTIFICATE-----\n" + certificate + "\n-----END CERTIFICATE-----",
        "I forgot my password again, so I reset it from the phone.",
        "AKIA is the prefix of an AWS access key id; ASIA is a temporary one.",
        "GitHub tokens start with ghp_ and Stripe keys with sk_live_.",
        "The token expired, so the session ended and I logged in again.",
        "Use MIIE as a memory aid? No, that was the Roman numeral MMII.",
        "The secret ingredient is cinnamon, Melanie said, don't tell anyone.",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + rand(B62, 43) + " me@laptop",
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==",
        "commit 3f9a2b1c4d5e6f708192a3b4c5d6e7f8091a2b3c\nAuthor: Dev <dev@example.com>",
        "uuid 0b1f6471-1bf0-4dda-aec3-111122223333 and blake3 99c5aa0cbf6c318315a330dbebfe1cb6769bca8e57da71d7a8e550bd5ec5eaf3",
        "The AKIA key was rotated last week; the new one lives in the secrets manager.",
        "sk-learn is a library, and scikit-learn is its full name.",
        "She wrote “private key” in quotes and underlined it twice.",
        "Begin the private key rotation at noon, end it by three.",
        "the word ＡＫＩＡ in fullwidth is still just four letters",
        "ISBN 978-3-16-148410-0, phone +1 (555) 010-9999, order #A1B2-C3D4",
    ]
    for a in about:
        texts.append(("about_secrets", a))
    for _ in range(40):
        n = rng.randint(20, 60)
        texts.append(("prose", sentence(n).capitalize() + "."))
    return [{"value": v, "secret": False, "disguise": kind, "base": ""} for kind, v in texts]


def main() -> None:
    rows = secret_rows()
    for row in rows:
        row["value"] = split_parts(str(row["value"]))
    rows += benign_rows()
    with OUT.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    secrets = sum(1 for r in rows if r["secret"])
    sys.stdout.write(f"{OUT}: {secrets} evasions, {len(rows) - secrets} benign texts\n")


if __name__ == "__main__":
    main()
