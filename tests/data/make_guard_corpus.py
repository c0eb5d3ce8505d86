"""Write tests/data/guard_corpus.jsonl, the write guard's labelled corpus.

Run: ``python tests/data/make_guard_corpus.py`` (deterministic: a fixed seed).

Every credential here is fake: random characters laid out in the provider's
real format, made up by this script, never issued by anyone. So that
repository secret scanners do not mistake the corpus for a leak, no secret is
stored whole in the file: a secret's value is written as ``{"$join": [parts]}``
(parts of at most 10 characters)
(nested anywhere inside a structured value too), and
``tests/unit/test_guard.py`` joins the parts when it loads the corpus. Benign
strings are stored as they are.

Each line: ``{"value": ..., "secret": true|false, "kind": ..., "note": ...}``;
``kind`` is the guard kind expected for a secret, or the kind of hard case for
a benign string. A value is a string, or a JSON object standing for the
caller fields of a record.
"""

from __future__ import annotations

import base64
import json
import random
import string
import struct
import uuid
import zlib
from hashlib import md5, sha1, sha256, sha512
from pathlib import Path

import blake3

OUT = Path(__file__).with_name("guard_corpus.jsonl")
# The record-format vectors (real retained log lines, made by harness/make_vectors.py).
VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "chain-v1.jsonl"
rng = random.Random(20261129)

B62 = string.ascii_letters + string.digits
URLSAFE = B62 + "-_"
UPPER_DIGITS = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"


def rand(alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def b64(nbytes: int) -> str:
    return base64.b64encode(rng.randbytes(nbytes)).decode()


def split(s: str) -> dict:
    """Cut a secret into parts of at most 10 characters: no part is a whole credential."""
    return {"$join": [s[i : i + 10] for i in range(0, len(s), 10)]}


def embed(template: str, secret: str) -> dict:
    """A secret inside surrounding text, stored in parts."""
    before, after = template.split("{}")
    joined = split(secret)["$join"]
    return {"$join": [before, *joined, after]}


rows: list[dict] = []


def secret(value, kind: str, note: str) -> None:
    rows.append({"value": value, "secret": True, "kind": kind, "note": note})


def benign(value, kind: str, note: str = "") -> None:
    rows.append({"value": value, "secret": False, "kind": kind, "note": note})


# -- secrets -----------------------------------------------------------------

for i in range(4):
    key = rng.choice(["AKIA", "ASIA"]) + rand(UPPER_DIGITS, 16)
    secret(split(key) if i % 2 else embed("aws key id {} for the deploy role", key), "aws_access_key", "AWS access key id")
for i in range(2):
    key = "AKIA" + rand(UPPER_DIGITS, 16)
    sk = b64(30)
    secret(
        {"$join": ["[default]\naws_access_key_id = ", *split(key)["$join"], "\naws_secret_access_key = ", *split(sk)["$join"], "\n"]},
        "aws_access_key",
        "AWS credentials file: key id and secret",
    )
for template in ["AWS_SECRET_ACCESS_KEY={}", 'aws_secret_key: "{}"', "export AWS_SECRET_ACCESS_KEY='{}'"]:
    secret(embed(template, b64(30)), "aws_secret_key", "AWS secret access key with its name")
secret(split(b64(30)), "high_entropy", "AWS secret access key alone (40 base64 chars; no name to tell it is AWS)")
secret(embed("keys: AKIA" + "{}", rand(UPPER_DIGITS, 16) + " / " + b64(30)), "aws_access_key", "AWS key pair on one line")

for _ in range(4):
    secret(split("AIza" + rand(URLSAFE, 35)), "gcp_api_key", "Google API key")
secret(embed("client_secret={}", "GOCSPX-" + rand(URLSAFE, 28)), "gcp_oauth_secret", "Google OAuth client secret")


def pem(label: str, nbytes: int, escaped: bool = False) -> str:
    body = base64.b64encode(rng.randbytes(nbytes)).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    nl = "\\n" if escaped else "\n"
    return f"-----BEGIN {label}-----{nl}" + nl.join(lines) + f"{nl}-----END {label}-----{nl}"


def pem_parts(text: str) -> dict:
    return split(text)


sa_key = pem("PRIVATE KEY", 300, escaped=True)
project = f"demo-project-{rand(string.digits, 6)}"
sa_json = (
    '{"type": "service_account", "project_id": "' + project + '", "private_key_id": "' + rand(HEX, 40)
    + '", "private_key": "' + sa_key + '", "client_email": "ci@' + project + '.iam.gserviceaccount.com"}'
)
secret(pem_parts(sa_json), "gcp_service_account", "GCP service-account key file as text")
sa_key2 = pem("PRIVATE KEY", 300)
secret(
    {
        "creds": {
            "type": "service_account",
            "project_id": project,
            "private_key_id": rand(HEX, 40),
            "private_key": pem_parts(sa_key2),
            "client_email": f"ci@{project}.iam.gserviceaccount.com",
        }
    },
    "private_key",
    "GCP service-account key passed as a nested field",
)
for label, n in [("RSA PRIVATE KEY", 600), ("EC PRIVATE KEY", 120), ("OPENSSH PRIVATE KEY", 400), ("PRIVATE KEY", 400), ("ENCRYPTED PRIVATE KEY", 500)]:
    secret(pem_parts("here is the key:\n" + pem(label, n)), "private_key", f"PEM {label}")
secret(pem_parts(pem("RSA PRIVATE KEY", 300)[:300]), "private_key", "PEM block cut short (no END line)")
legacy = pem("RSA PRIVATE KEY", 600).replace(
    "-----\n", f"-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,{rand(HEX, 32).upper()}\n\n", 1
)
secret(pem_parts(legacy), "private_key", "PEM legacy encrypted key with headers")

for _ in range(2):
    acct = "st" + rand(string.ascii_lowercase + string.digits, 10)
    conn = f"DefaultEndpointsProtocol=https;AccountName={acct};AccountKey={b64(64)};EndpointSuffix=core.windows.net"
    secret(split(conn), "azure_storage_key", "Azure storage connection string")
secret(split(b64(64)), "azure_storage_key", "Azure storage account key alone (88 chars)")
for _ in range(2):
    ns = "sb-" + rand(string.ascii_lowercase, 8)
    conn = f"Endpoint=sb://{ns}.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={b64(32)}"
    secret(split(conn), "azure_shared_access_key", "Azure Service Bus connection string")
for _ in range(2):
    sig = base64.b64encode(rng.randbytes(32)).decode().replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")
    url = f"https://st{rand(string.ascii_lowercase, 8)}.blob.core.windows.net/backups/db.bak?sv=2022-11-02&ss=b&srt=o&sp=r&se=2026-12-31T00:00:00Z&sig={sig}"
    secret(split(url), "azure_sas_token", "Azure SAS URL")
for _ in range(3):
    cs = rand(URLSAFE + "~.", 3) + rng.choice(string.digits) + "Q~" + rand(URLSAFE + "~.", 34)
    secret(embed("AZURE_CLIENT_SECRET={}", cs), "azure_client_secret", "Azure AD client secret")

for prefix in ["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]:
    secret(embed("token {}", prefix + rand(B62, 36)), "github_token", f"GitHub {prefix} token")
for _ in range(2):
    secret(split("github_pat_" + rand(B62, 22) + "_" + rand(B62, 59)), "github_token", "GitHub fine-grained PAT")
secret(embed("git clone https://x-access-token:{}@github.com/org/repo.git", "ghs_" + rand(B62, 36)), "github_token", "GitHub token as URL password")

for _ in range(3):
    secret(split("glpat-" + rand(URLSAFE, 20)), "gitlab_token", "GitLab personal access token")
secret(split("glrt-" + rand(URLSAFE, 20)), "gitlab_token", "GitLab runner token")

secret(split(f"xoxb-{rand(string.digits, 12)}-{rand(string.digits, 13)}-{rand(B62, 24)}"), "slack_token", "Slack bot token")
secret(embed("SLACK_TOKEN={}", f"xoxp-{rand(string.digits, 12)}-{rand(string.digits, 12)}-{rand(string.digits, 13)}-{rand(HEX, 32)}"), "slack_token", "Slack user token")
secret(split(f"xapp-1-A{rand(UPPER_DIGITS, 10)}-{rand(string.digits, 13)}-{rand(HEX, 64)}"), "slack_token", "Slack app-level token")
secret(split(f"xoxa-2-{rand(string.digits, 12)}-{rand(B62, 30)}"), "slack_token", "Slack legacy xoxa token")
for _ in range(2):
    hook = f"https://hooks.slack.com/services/T{rand(UPPER_DIGITS, 8)}/B{rand(UPPER_DIGITS, 10)}/{rand(B62, 24)}"
    secret(embed("post alerts to {} please", hook), "slack_webhook", "Slack incoming webhook")

secret(split("sk_live_" + rand(B62, 24)), "stripe_key", "Stripe live secret key (short form)")
secret(embed("STRIPE_SECRET_KEY={}", "sk_live_51" + rand(B62, 97)), "stripe_key", "Stripe live secret key (long form)")
secret(split("rk_live_" + rand(B62, 99)), "stripe_key", "Stripe restricted key")
secret(split("sk_test_" + rand(B62, 24)), "stripe_key", "Stripe test secret key")
secret(split("whsec_" + rand(B62, 32)), "stripe_key", "Stripe webhook signing secret")

secret(split("sk-" + rand(B62, 20) + "T3BlbkFJ" + rand(B62, 20)), "openai_key", "OpenAI legacy key")
for _ in range(2):
    secret(embed("OPENAI_API_KEY={}", "sk-proj-" + rand(URLSAFE, 156)), "openai_key", "OpenAI project key")
secret(split("sk-svcacct-" + rand(URLSAFE, 120)), "openai_key", "OpenAI service-account key")
secret(embed('openai.api_key = "{}"', "sk-" + rand(B62, 48)), "openai_key", "OpenAI key (48 chars)")

for _ in range(2):
    secret(split("sk-ant-api03-" + rand(URLSAFE, 93) + "AA"), "anthropic_key", "Anthropic API key")
secret(embed("ANTHROPIC_API_KEY={}", "sk-ant-admin01-" + rand(URLSAFE, 93) + "AA"), "anthropic_key", "Anthropic admin key")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


for claims in [
    {"sub": "1234567890", "name": "Test User", "iat": 1764412800},
    {"iss": "https://auth.example.test/", "aud": "api", "exp": 1796000000, "scope": "read write"},
    {"user_id": rng.randrange(10**6), "role": "admin"},
]:
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    tok = header + "." + b64url(json.dumps(claims).encode()) + "." + b64url(rng.randbytes(32))
    secret(split(tok), "jwt", "JWT")
tok = b64url(b'{"alg":"RS256","kid":"k1"}') + "." + b64url(b'{"sub":"svc","exp":1796000000}') + "." + b64url(rng.randbytes(256))
secret(embed("Authorization: Bearer {}", tok), "jwt", "JWT in an Authorization header")

for scheme, user, host in [
    ("postgres", "app", "db.internal:5432/app"),
    ("postgresql", "admin", "10.0.0.5/prod"),
    ("mysql", "root", "localhost:3306/shop"),
    ("redis", "default", "cache.example.test:6379/0"),
    ("mongodb+srv", "svc", "cluster0.abcde.mongodb.net/?retryWrites=true"),
    ("amqp", "guest", "mq.example.test:5672/"),
    ("https", "deploy", "registry.example.test/v2/"),
    ("ftp", "backup", "files.example.test/dump"),
]:
    pw = rng.choice([rand(B62, 16), rand(B62 + "!%^*", 12), "S3cure" + rand(string.digits, 4) + "Pw"])
    secret(embed(f"DATABASE_URL={scheme}://{user}:" + "{}" + f"@{host}", pw), "url_password", f"{scheme} URL with a password")

for _ in range(3):
    secret(split(rand(B62, 40)), "high_entropy", "random 40-char token alone")
secret(embed("the new deploy token is {} (rotate monthly)", rand(URLSAFE, 43)), "assigned_secret", "random base64url token in prose")
secret(embed("X-Api-Key: {}", rand(B62, 32)), "assigned_secret", "API key header")
secret(embed("curl -H 'X-Auth: {}' https://api.example.test/v1/items", rand(B62, 48)), "high_entropy", "key in a curl command")
secret(embed("api_key={}", rand(HEX, 32)), "assigned_secret", "hex API key with its name")
secret(embed('"client_secret": "{}"', rand(HEX, 40)), "assigned_secret", "hex client secret in JSON text")
secret(embed("DB_PASSWORD=Tr0ub4dor&{}", rand(string.digits, 2)), "assigned_secret", "password assigned in an env file")
secret(embed("password: {}", "hunter" + rand(string.digits, 3) + "!x"), "assigned_secret", "password in YAML")
passphrase = "-".join(rng.choice(["correct", "horse", "battery", "staple", "orange", "river", "castle", "window"]) for _ in range(4))
secret(embed("REDIS_PASSWORD={}", passphrase), "assigned_secret", "word passphrase in an env file")
secret({"x-origin": {"token": split(rand(B62, 24))}}, "assigned_secret", "token under a secret-named key (nested field)")
secret({"config": {"db": {"password": split("Pa55" + rand(B62, 8))}}}, "assigned_secret", "password under a secret-named key (nested)")
secret(embed("Authorization: Bearer {}", rand(URLSAFE, 40)), "bearer_token", "opaque bearer token")
secret(split("npm_" + rand(B62, 36)), "npm_token", "npm token")
secret(embed("curl -u admin:{} https://api.example.test/v1/users", rand(B62, 20)), "basic_auth", "curl user:password")
secret(split("key-" + rand(HEX, 32)), "mailgun_key", "Mailgun key")
secret(embed("shopify token {}", "shpat_" + rand(HEX, 32)), "shopify_token", "Shopify access token")
secret(embed("passwd {}!", rand(B62, 12)), "assigned_secret", "password after its name, no operator")
secret(embed("the wifi password is {}", rand(B62, 10)), "assigned_secret", "password is ... in prose")
discord = f"https://discord.com/api/webhooks/{rand(string.digits, 19)}/{rand(URLSAFE, 68)}"
secret(embed("notify via {}", discord), "webhook_token", "Discord webhook URL")
secret(embed("Authorization: Basic {}", base64.b64encode(f"deploy:{rand(B62, 14)}".encode()).decode()), "basic_auth", "HTTP basic credentials")
k8s_pw = base64.b64encode(("sk_live_" + rand(B62, 24)).encode()).decode()
secret(embed("apiVersion: v1\nkind: Secret\ndata:\n  stripe: {}\n", k8s_pw), "base64_stripe_key", "Kubernetes Secret data (base64 of a key)")
secret(split("pypi-AgEIcHlwaS5vcmc" + rand(URLSAFE, 120)), "pypi_token", "PyPI token")
secret(split("hf_" + rand(string.ascii_letters, 34)), "huggingface_token", "Hugging Face token")
secret(split("SG." + rand(URLSAFE, 22) + "." + rand(URLSAFE, 43)), "sendgrid_key", "SendGrid key")
secret({"tags": ["deploy", split("ghp_" + rand(B62, 36))]}, "github_token", "token as a list item")

# -- benign ------------------------------------------------------------------

for _ in range(12):
    benign(rand(HEX, 40), "git_sha", "full git SHA")
for _ in range(4):
    benign(f"commit {rand(HEX, 40)}\nMerge: {rand(HEX, 7)} {rand(HEX, 7)}", "git_sha", "git log header")
benign(f"fixed in {rand(HEX, 7)}, reverted in {rand(HEX, 12)}", "git_sha", "short SHAs in prose")
for _ in range(8):
    benign(str(uuid.UUID(int=rng.getrandbits(128), version=4)), "uuid", "UUID v4")
for _ in range(3):
    benign(str(uuid.UUID(int=rng.getrandbits(128), version=4)).upper(), "uuid", "UUID upper case")
for _ in range(3):
    benign(uuid.UUID(int=rng.getrandbits(128), version=4).hex, "uuid", "UUID without dashes")
benign(f"request {uuid.UUID(int=rng.getrandbits(128), version=4)} failed with 503", "uuid", "UUID in a log line")


def png(width: int, height: int, seed: int) -> bytes:
    r = random.Random(seed)
    raw = b"".join(
        b"\x00" + bytes((x * 7 + y * 3 + r.randrange(40)) & 0xFF for x in range(width * 3)) for y in range(height)
    )

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


img = base64.b64encode(png(24, 24, 1)).decode()
benign("data:image/png;base64," + img[:120] + "...", "base64_image", "data URI head")
benign(f'<img src="data:image/png;base64,{img}">', "base64_image", "whole small PNG in an img tag")
benign(img[:60], "base64_image", "PNG header fragment")
benign("\n".join(img[i : i + 76] for i in range(0, 76 * 6, 76)), "base64_image", "MIME-wrapped base64 lines")
jpeg_head = base64.b64encode(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" + rng.randbytes(40)).decode()
benign(jpeg_head, "base64_image", "JPEG header fragment")
benign("background: url(data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7)", "base64_image", "1px GIF data URI in CSS")
for off in (200, 400, 600):
    benign(f"![chart](data:image/png;base64,{img[off:off + 80]})", "base64_image", "markdown image data fragment")
benign(base64.b64encode(b"Hello, this is just an ordinary sentence encoded in base64 for the test.").decode(), "base64_text", "base64 of prose")
benign(base64.b64encode(json.dumps({"page": 3, "cursor": "after:1200"}).encode()).decode(), "base64_text", "base64 of a JSON cursor")
svg = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16"><circle cx="8" cy="8" r="7"/></svg>').decode()
benign(f"data:image/svg+xml;base64,{svg}", "base64_image", "SVG data URI")

for _ in range(5):
    benign(sha256(rng.randbytes(16)).hexdigest(), "hex_digest", "sha256 hex")
for _ in range(5):
    benign(blake3.blake3(rng.randbytes(16)).hexdigest(), "hex_digest", "blake3 hex (as retained hashes)")
benign(md5(b"x").hexdigest(), "hex_digest", "md5 hex")
benign(sha1(b"x").hexdigest(), "hex_digest", "sha1 hex")
benign(sha512(b"x").hexdigest(), "hex_digest", "sha512 hex")
benign(f"sha256:{sha256(b'layer').hexdigest()}", "hex_digest", "docker digest")
benign(f"ghcr.io/org/app@sha256:{sha256(b'img').hexdigest()}", "hex_digest", "image reference by digest")
benign(f"sha512-{base64.b64encode(sha512(b'pkg').digest()).decode()}", "sri_hash", "npm integrity (SRI) hash")
benign(f'<script src="app.js" integrity="sha384-{base64.b64encode(sha512(b"js").digest()[:48]).decode()}"></script>', "sri_hash", "SRI in a script tag")
benign(f"{sha256(b'a').hexdigest()}  retained-0.1.0.tar.gz", "hex_digest", "sha256sum output line")

for line in VECTORS.read_text(encoding="utf-8").splitlines()[:8] if VECTORS.exists() else []:
    benign(line, "retained_record", "a retained log line (64-hex hash and prev)")
prev = "0" * 64
for seq in range(1, 5):
    h = blake3.blake3(f"{seq}".encode()).hexdigest()
    benign(json.dumps({"seq": seq, "hash": h, "prev": prev, "cd": blake3.blake3(h.encode()).hexdigest()}), "retained_record", "retained chain fields")
    prev = h
benign(f"head: seq 4121 hash {blake3.blake3(b'head').hexdigest()}", "retained_record", "retained head output")

identifiers = [
    "test_append_after_torn_tail_truncates_it_and_continues_the_chain",
    "getUserAccountPreferencesForTenant2FactorAuthentication",
    "AbstractSingletonProxyFactoryBeanConfigurationHolder",
    "org.springframework.boot.autoconfigure.jdbc.DataSourceAutoConfiguration",
    "com.example.payments.internal.v2.RefundReconciliationService",
    "RETAINED_EMBED_REQUEST_TIMEOUT_MILLISECONDS",
    "k8s-prod-eu-west-1-ingress-nginx-controller-7d4b9c8f6d-x2klp",
    "numpy-2.4.6-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "aws-sdk-go-v2/service/secretsmanager/internal/endpoints",
    "useInfiniteScrollWithVirtualizedListAndStickyHeaders",
    "handleOAuth2AuthorizationCodeCallbackWithPKCEVerifier",
    "XMLHttpRequestEventTargetUploadProgressHandler",
    "tf_keras_layers_experimental_preprocessing_RandomFlip",
    "__pytest_fixture_tmp_path_factory_session_scope__",
    "MAX_CONCURRENT_EMBEDDING_REQUESTS_PER_CLIENT_2048",
    "ui-component-library-button-variant-secondary-outline",
    "io.opentelemetry.exporter.otlp.http.trace.OtlpHttpSpanExporter",
    "ConvNeXtV2ForImageClassificationWithTeacherDistillation",
    "x86_64-unknown-linux-gnu-gcc-13.2.0-static-pie",
    "memory_write_tool_input_schema_json_validation_error",
    "SHA256WithRSAEncryptionSignatureAlgorithmIdentifier",
    "base64UrlEncodeWithoutPaddingForJwtHeaderSegments",
    "reciprocal_rank_fusion_k60_bm25_cosine_hybrid_v2",
    "VeryLongEnumValueName_IPv6AddressFamilyUnspecified",
    "libstdcxx-ng-13.2.0-hc0a3c3a_7.conda",
    "python3.11-venv_3.11.7-1+jammy1_amd64.deb",
    "openapi-generator-cli-7.8.0-SNAPSHOT-jar-with-dependencies.jar",
    "eu.gcr.io/my-gcp-project-123456/backend-api:2026.11.29-rc3",
    "projects/my-project/locations/us-central1/keyRings/prod/cryptoKeys/signing",
    "arn:aws:iam::123456789012:role/service-role/AmazonSageMakerExecutionRole",
    "arn:aws:s3:::my-company-data-lake-raw-zone-eu-central-1/ingest/2026/11/29/",
    "subscriptions/0b1f6471-1bf0-4dda-aec3-111122223333/resourceGroups/rg-prod/providers/Microsoft.Web/sites/api",
    "i-0abcd1234ef567890",
    "vpc-0a1b2c3d4e5f67890 subnet-0123456789abcdef0 sg-0f1e2d3c4b5a69788",
    "cus_NffrFeUfNV2Hib pi_3MtwBwLkdIwHu7ix28a3tqPa ch_3MmlLrLkdIwHu7ix0snN0B15",
    "pk_live_51HqLyjWDarjtT1zdp7dc5pM3s8tv7Hkcy9mZBKPcVaLsqMQ1ADKbPrR0zHhLh2OWsXs1BuVahSdjaqkSFOJi5zeZ00Hog9V2FB",
    "pk_test_TYooMQauvdEDq54NiTphI7jx",
    "01ARZ3NDEKTSV4RRFFQ69G5FAV 01HZX3K9Q7M2B8V5T4R6N0P1CD",
    "dQw4w9WgXcQ",
    "session_01HZX3K9Q7M2B8V5T4R6N0P1CD_checkpoint_summary",
    "A1B2C3D4E5F6G7H8I9J0",
    "THIS_IS_NOT_A_SECRET_JUST_A_LONG_CONSTANT_NAME_FOR_TESTS",
    "ExampleCorpHQ-Printer-3rdFloor-WestWing-Color",
    "wpa_supplicant_interface_add_bridge_ifname",
    "ThinkPad-X1-Carbon-Gen11-21HMCTO1WW",
]
for ident in identifiers:
    benign(ident, "identifier", "long identifier")

paths = [
    "/usr/local/lib/python3.11/site-packages/retained/guard.py",
    "/home/dev/.cache/huggingface/hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/",
    "C:\\Users\\Developer\\AppData\\Local\\Programs\\Python\\Python311\\Lib\\site-packages",
    "~/.retained/log.jsonl.torn-918344",
    "/var/lib/docker/overlay2/3f9a1c77c0d2b4e5/merged/etc/nginx/conf.d/default.conf",
    "src/components/Dashboard/Widgets/RevenueByRegionChart.test.tsx",
    "./node_modules/.pnpm/@babel+core@7.26.0/node_modules/@babel/core/lib/index.js",
    "/private/var/folders/xz/3kq9m2x54b1c7d8_2n6fwv9h0000gn/T/pytest-of-dev/pytest-12/",
    "gs://my-bucket-eu/exports/2026-11-29/part-00000-of-00128.parquet",
    "s3://analytics-raw/events/year=2026/month=11/day=29/hour=12/part-0001.snappy.parquet",
    "/etc/ssl/certs/ca-certificates.crt",
    "~/.ssh/id_ed25519.pub",
    "/proc/self/fd/3",
]
for p in paths:
    benign(p, "path", "file path")

urls = [
    "https://github.com/pydantic/pydantic/blob/main/pydantic/_internal/_model_construction.py#L120",
    "https://docs.google.com/document/d/1BxiMVs0XRA5nFMdKvBdBZjgmUUqptlbs74OgvE2upms/edit",
    "https://www.youtube.com/watch?v=dQw4w9WgXcQ&t=42s",
    "https://example.com/search?q=hash+chained+log&page=2&sort=relevance",
    "https://api.github.com/repos/org/repo/commits/" + rand(HEX, 40),
    "ssh://git@github.com/org/repo.git",
    "git@github.com:org/retained.git",
    "https://user@example.com/path",
    "ftp://anonymous@ftp.example.org/pub/",
    "postgres://app@localhost:5432/app",
    "postgres://user:${DB_PASSWORD}@db:5432/app",
    "mysql://root:<password>@localhost/test",
    "redis://:password@localhost:6379",
    "http://[::1]:8080/api/v1/health",
    "http://127.0.0.1:8765/mcp",
    "https://registry.npmjs.org/@types%2fnode/-/node-22.10.1.tgz",
    "https://files.pythonhosted.org/packages/5a/b3/2c1f1a0e9ea12bc8e43a2a10e8a8d0a0d6e2c1b1a7a0d7d9b0e1d9d3d7f2/orjson-3.13.0.tar.gz",
    "https://cdn.example.net/assets/app.8f3a2b1c9d4e5f60.js",
    "https://example.com/callback?code_challenge_method=S256&state=xyz&redirect_uri=https%3A%2F%2Fapp.example.com%2Fcb",
    "https://s3.eu-west-1.amazonaws.com/bucket-name/key/with/many/parts/report-2026-11.pdf",
    "https://hooks.example.com/services/notify",
    "https://medium.com/@someone/why-append-only-logs-are-underrated-4f2a9c8e1b3d",
    "https://www.amazon.com/dp/B0CHX1W1XY/ref=sr_1_3?keywords=usb+c+hub",
    "https://open.spotify.com/track/4uLU6hMCjMI75M1A2tKUQC?si=1a2b3c4d5e6f4a7b",
    "https://drive.google.com/file/d/1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwX/view?usp=sharing",
    "https://login.microsoftonline.com/72f988bf-86f1-41af-91ab-2d7cd011db47/oauth2/v2.0/authorize",
    "https://user:@example.com/empty-password",
]
for u in urls:
    benign(u, "url", "URL without a password")

versions = ["1.0.0", "v2.3.0-rc.1+build.20261129.abc1234", "3.11.7", "2026.11.29", "0.1.0.dev0+g3f9a1c7.d20261129", "1.2.3-alpha.10.beta.0+exp.sha.5114f85", "Python 3.11.7 (main, Dec  8 2023, 18:56:58) [GCC 11.4.0] on linux", "mcp>=2.3,<3"]
for v in versions:
    benign(v, "version", "version string")

prose = [
    "The deploy target is staging; production goes out on Friday after the review.",
    "Remember to rotate the API key every 90 days and store it in the vault, never in the repo.",
    "Zoë prefers «dark mode» 🌙 and \"vim\" key bindings; she asked twice.",
    "The password policy requires at least 12 characters, one digit and one symbol.",
    "We store only the token's hash, never the token itself, and compare in constant time.",
    "Secret management: use the platform's secret store; the app reads secrets at start-up.",
    "The bearer of this letter is authorised to collect the parcel on my behalf.",
    "token: expired",
    "password: see 1Password entry 'staging db'",
    "api_key: read from the environment",
    "The key insight is that the log is the store of record and the index is derived.",
    "Checkpoint: shipped 0.1; chain checks pass; next is search and the brief.",
    "If the lock is held for more than ten seconds, report store_busy and let the client retry with the same client_op_id.",
    "Incident 2026-11-12: the embedder timed out for 40 minutes; writes landed without vectors and were backfilled.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.",
    "Meeting notes: Alice will own the CLI, Bob the index; we agreed the brief must print in under 100 ms.",
    "temporary: call 555-0199 about the venue",
    "The SSH host key fingerprint is SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s (verify before connecting).",
    "BM25 with k1=1.2 and b=0.75 ranked the runbook first; cosine put the design doc first; RRF merged them.",
    "Use `secrets.token_urlsafe(32)` to make a session key; never hard-code it.",
    "Die Schlüsselverwaltung läuft über den Tresor; Passwörter werden nie im Klartext gespeichert.",
    "密钥必须存放在密钥管理服务中，不要写进代码仓库。",
    "The quick brown fox jumps over the lazy dog 1234567890 times per second.",
    "Our internal ticket PAY-48213 tracks the refund reconciliation bug in RefundReconciliationService.",
    "Her passphrase hint was 'the name of the first dog', which is not the passphrase.",
    "Set RETAINED_SECRETS=redact to store records with secrets replaced by [secret:<kind>].",
    "Private key rotation happens quarterly; the public key is published at /.well-known/jwks.json.",
    "The AWS account id is 123456789012 and the region is eu-west-1.",
    "Bitcoin whitepaper: a purely peer-to-peer version of electronic cash.",
    "To reset, click 'Forgot password?' and follow the emailed link; it expires in 15 minutes.",
]
for p in prose:
    benign(p, "prose", "ordinary prose")

code = [
    'api_key = os.environ["OPENAI_API_KEY"]',
    "password = getpass.getpass()",
    "token = request.headers.get('Authorization', '').removeprefix('Bearer ')",
    "def verify_password(password: str, hashed: bytes) -> bool:\n    return bcrypt.checkpw(password.encode(), hashed)",
    "const secret = process.env.JWT_SECRET ?? throwMissing('JWT_SECRET');",
    "client_secret: ${{ secrets.AZURE_CLIENT_SECRET }}",
    "export GITHUB_TOKEN=$(gh auth token)",
    "password: !vault |\n  $ANSIBLE_VAULT;1.1;AES256",
    "DB_PASSWORD=changeme",
    "SECRET_KEY=your-secret-key-here",
    "api_key: <YOUR_API_KEY>",
    "aws_secret_access_key = {{ aws_secret }}",
    "self.access_token = self._refresh_access_token(refresh_token=self.refresh_token)",
    "if (password.length < MIN_PASSWORD_LENGTH) { return invalid('password too short'); }",
    "SELECT id, email FROM users WHERE password_hash = crypt($1, password_hash);",
    "assert record['hash'] == chain_hash(content_digest(record), prev, seq)",
    "for (let i = 0; i < tokens.length; i++) { total += tokens[i].length; }",
    "docker run -e POSTGRES_PASSWORD_FILE=/run/secrets/db_password postgres:16",
    "kubectl create secret generic db-creds --from-file=password=./password.txt",
    "token=settings.SLACK_BOT_TOKEN",
    "headers = {'Authorization': f'Bearer {token}'}",
    "git log --format='%H %an %s' " + rand(HEX, 7) + ".." + rand(HEX, 7),
    "pip install 'retained[vectors]' && python -m retained --selftest",
    "re.compile(r'(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])')",
    "hashlib.sha256(b'payload').hexdigest() == '239f59ed55e737c77147cf55ad0c1b030b6d7ee748a7426952f9b852d5a935e5'",
    "print(base64.b64encode(os.urandom(32)).decode())  # generate a key, do not paste the output here",
    "password_reset_token_expiry_seconds = 900",
    "SECRET_KEY=os.environ.get('DJANGO_SECRET_KEY')",
    "password = user_password",
    "self.password = password_hash",
    "SECRET_KEY_FALLBACKS = []",
    "auth_token = None",
    "private_key = load_pem_private_key(data, password=None)",
    "credentials = service_account.Credentials.from_service_account_file('sa.json')",
    "if line.startswith('-----BEGIN RSA PRIVATE KEY-----'):\n    raise ValueError('do not commit keys')",
    "ssh-keygen -t ed25519 -C 'dev@example.com' -f ~/.ssh/id_ed25519",
    '{"token_count": 512, "token_budget": 2000, "tokens_dropped": 3}',
    '{"password_min_length": 12, "secret_rotation_days": 90}',
]
for c in code:
    benign(c, "code", "code snippet")

misc = [
    "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
    "fe80::1ff:fe23:4567:890a%eth0",
    "00:1A:2B:3C:4D:5E",
    "2026-11-29T12:00:00.000000Z",
    "+1 (555) 010-0199",
    "ISBN 978-0-13-468599-1",
    "IBAN DE89 3704 0044 0532 0130 00 (the example from the standard)",
    "0x742d35Cc6634C0532925a3b844Bc454e4438f44e",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + b64(32)[:43] + " dev@laptop",
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 user@host (truncated public key)",
    "MIT License\n\nCopyright (c) 2026 retained developers",
    "| seq | hash | prev |\n|---|---|---|\n| 1 | 168c85b9 | 00000000 |",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
    "0123456789" * 5,
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUO\n-----END CERTIFICATE-----",
    "<private>my pin is 4321</private> the rest is public",
    "[secret:aws_access_key] was removed from this note",
    "x" * 2000,
    "The hash is " + "f" * 64,
    {"scope": "proj-a", "source": "conversation", "tags": ["deploy", "staging"], "meta": {"attempt": 3, "ok": True}},
    {"x-origin": {"session": str(uuid.UUID(int=rng.getrandbits(128), version=4)), "commit": rand(HEX, 40)}},
    {"token_count": 512, "password_min_length": 12, "token": "none"},
    {"secret_rotation": {"days": 90, "owner": "platform-team"}},
    {"password": "see the team vault entry", "token": "expired"},
    "github.com/stretchr/testify v1.8.4 h1:CcVxjf3Q8PM0mHFKJX5KP4nXNc7TJ7yiH5oAE9v5nXs=",
    "github.com/stretchr/testify v1.8.4/go.mod h1:sz/lmYIOXD/1dqDmKjjqLyZ2RngseejIcXlSw2iwfAo=",
    "pinned on IPFS as QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG",
    "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi",
    "donations: bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq",
    "x-amz-request-id: 4442587FB7D0A2F9 x-amz-id-2: vlR7PnpV2Ce81l0PRw6jlUpck7Jo5ZsQjryTjKlc5aLWGVHPZLj5NeC6qMa0emYBDXOo6QBU0Wo=",
    "--hash=sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
    "2026-11-29T12:00:01.123Z INFO request_id=7f3c9a1e-2b4d-4c8e-9f1a-0b2c3d4e5f60 user=alice latency_ms=42",
    "Traceback (most recent call last):\n  File \"/app/server.py\", line 42, in handle\n    raise KeyError(key)\nKeyError: 'session_token'",
    "Set GITHUB_TOKEN in the repository secrets, then reference it as ${{ secrets.GITHUB_TOKEN }}.",
    "The AKIA prefix marks a long-term AWS access key; ASIA marks a temporary one.",
    "eyJhbGciOiJIUzI1NiJ9 is just the header of a JWT",
    "cache key: Linux-pip-9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "actions/checkout@b4ffde65f46336ab88eb53be808477a3936bae11 # v4.1.1",
    {"links": ["https://example.com/a", "https://example.com/b?page=2"], "digest": sha256(b"z").hexdigest()},
]
for m in misc:
    benign(m, "misc", "hard benign string")


def main() -> None:
    n_secret = sum(r["secret"] for r in rows)
    n_benign = len(rows) - n_secret
    with OUT.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"wrote {OUT} ({n_secret} secret, {n_benign} benign)")


if __name__ == "__main__":
    main()
