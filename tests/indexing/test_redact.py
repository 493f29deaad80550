"""Secrets never reach the store: each pattern family, what must be left alone, and `remember`."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client

from agentmemrec.indexing.redact import PATTERNS, redact
from agentmemrec.server.app import create_server
from agentmemrec.server.cli import build_parser, serve_settings

from helpers import call, settings_for, turn

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"

# (pattern name, text, the secret that must disappear)
FAMILIES = [
    ("openai-key", "export key sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z", "sk-proj-Ab3dEf6hIj9kLm2n"),
    ("anthropic-key", "ANTHROPIC_API_KEY=sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2", "sk-ant-api03-Zx9Yw8"),
    ("aws-access-key", f"aws_access_key_id = {AWS_KEY}", AWS_KEY),
    ("aws-secret-key", "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "wJalrXUtnFEMI/K7MDENG"),
    ("github-token", "git clone https://x:ghp_1234567890abcdefghijABCDEFGHIJ123456@github.com/a/b",
     "ghp_1234567890abcdefghij"),
    ("github-token", "GH=github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstu", "github_pat_11ABCDEFG"),
    ("slack-token", "the bot token is xoxb-2048-4096-AbCdEfGhIjKl", "xoxb-2048-4096"),
    ("stripe-key", "charge with sk_live_4eC39HqLyjWDarjtT1zdp7dc today", "sk_live_4eC39HqLyjWD"),
    ("stripe-key", "restricted rk_live_51H8abcdefghijklmnop", "rk_live_51H8abcdefgh"),
    ("google-api-key", "maps key AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI", "AIzaSyDdI0hCZtE6vySjMm"),
    ("jwt", "cookie eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9P",
     "eyJzdWIiOiIxMjM0NTY3ODkwIn0"),
    ("private-key", "key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
     "-----END OPENSSH PRIVATE KEY-----\ndone", "b3BlbnNzaC1rZXktdjEAAAAA"),
    ("bearer-token", "curl -H 'Authorization: Bearer 0a1b2c3d4e5f6a7b8c9d0e1f2a3b'", "0a1b2c3d4e5f6a7b8c9d"),
    ("url-credentials", "DATABASE at postgres://app:pa55w0rd@db.internal:5432/pay", "pa55w0rd"),
    ("secret-assignment", "psql with password=hunter22 then --token=abcd1234", "hunter22"),
    ("secret-assignment", '{"client_secret": "s3cr3t"}', "s3cr3t"),
    ("secret-assignment", "db_password: Tr0ub4dor&3", "Tr0ub4dor&3"),
    ("high-entropy", "SESSION_SIGNING=f3Kq9vLx2Wm8Rt4Zp7Yb1Nc6", "f3Kq9vLx2Wm8Rt4Zp7Yb1Nc6"),
    ("secret-assignment", 'password: "correct horse battery staple"', "correct horse"),
    ("secret-flag", "mysql --password hunter22 -u root", "hunter22"),
    ("secret-flag", "deploy --api-key 'k9 two words' --yes", "k9 two words"),
    ("basic-credentials", "curl -H 'Authorization: Basic dXNlcjpzM2NyZXQ=' api", "dXNlcjpzM2NyZXQ="),
    ("gitlab-token", "CI uses glpat-Ab3dEf6hIj9kLm2nOp5q", "glpat-Ab3dEf6hIj9kLm2nOp5q"),
    ("huggingface-token", "login hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", "hf_AbCdEfGhIjKlMnOpQrStUv"),
    ("webhook-secret", "stripe listen gave whsec_Ab3dEf6hIj9kLm2nOp5qRs8t", "whsec_Ab3dEf6hIj9kLm2nOp5qRs8t"),
    ("webhook-url", "alerts go to https://hooks.slack.com/services/T0AB12CD3/B0EF45GH6/ZyXwVuTsRqPoNmLk",
     "B0EF45GH6/ZyXwVuTsRqPoNmLk"),
    ("aws-secret-key", "here is the secret key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    ("user-credentials", "curl -u admin:S3cr3tPassw0rd https://api.example.com/v1/items", "S3cr3tPassw0rd"),
    ("user-credentials", "curl --user 'deploy:Zx8!kQ2 mP' https://ci.example.com", "Zx8!kQ2 mP"),
    ("secret-assignment", "DB_PASS=hunter2hunter psql", "hunter2hunter"),
    ("secret-statement", "fyi the staging db password is Xk9#mm2pq, rotate it Friday", "Xk9#mm2pq"),
    ("secret-statement", "the old admin password was 'swordfish'", "swordfish"),
    ("secret-statement", "my api key is 9f8e7d6c5b4a3210ffee", "9f8e7d6c5b4a3210ffee"),
    ("secret-statement", "ssh root@10.0.0.5 with password Xk9#mm2pq, then sudo", "Xk9#mm2pq"),
    ("secret-statement", "the password for the staging db is Xk9mm2pq", "Xk9mm2pq"),
    ("secret-assignment", "export MYSQL_PWD=Tr0ub4dor", "Tr0ub4dor"),
    ("netrc-password", "machine api.heroku.com\n  login me@example.com\n  password 01234567-89ab-cdef", "01234567-89ab"),
    ("command-password", "sshpass -p 'Hunter2!x' ssh root@10.0.0.5", "Hunter2!x"),
    ("command-password", "mysql -h db -P 3306 -u root -pXk9mm2pq payments", "Xk9mm2pq"),
    ("command-password", "mysqldump -u app -p's3cr et' shop > dump.sql", "s3cr et"),
    ("command-password", "sudo docker login -u ci -p Xk9mm2pq reg.example.com && docker run -p 80:80 x", "Xk9mm2pq"),
    ("command-password", "twine upload -u deploy -p hunterhunter dist/*", "hunterhunter"),
    ("command-password", "redis-cli -h cache -a Xk9mm2pq7 --no-auth-warning ping", "Xk9mm2pq7"),
    ("command-password", "ldapsearch -x -D cn=admin,dc=example -w 'Xk9 mm2pq' -b dc=example", "Xk9 mm2pq"),
    ("command-password", "sqlcmd -S db -U sa -P Xk9mm2pq! -Q 'select 1'", "Xk9mm2pq!"),
    ("command-password", "unzip -P hunterhunter backup.zip; 7z x -phunterseven backup.7z", "hunterhunter"),
    ("command-password", "unzip -P hunterhunter backup.zip; 7z x -phunterseven backup.7z", "hunterseven"),
    ("command-password", "keytool -genkeypair -keystore k.jks -storepass Xk9mm2pq -keypass Yk9mm2pq", "Xk9mm2pq"),
    ("command-password", "keytool -genkeypair -keystore k.jks -storepass Xk9mm2pq -keypass Yk9mm2pq", "Yk9mm2pq"),
    ("command-password", "openssl pkcs12 -export -in a.pem -passout pass:Xk9mm2pq -passin pass:Yk9mm2pq", "Xk9mm2pq"),
    ("command-password", "openssl pkcs12 -export -in a.pem -passout pass:Xk9mm2pq -passin pass:Yk9mm2pq", "Yk9mm2pq"),
    ("command-password", "openssl enc -aes-256-cbc -k hunterhunter -in a -out b", "hunterhunter"),
    ("command-password", "ssh-keygen -p -P oldphrase -N newphrase -f key", "oldphrase"),
    ("command-password", "ssh-keygen -p -P oldphrase -N newphrase -f key", "newphrase"),
    ("command-password", "mongosh -u admin -p Xk9mm2pq --authenticationDatabase admin", "Xk9mm2pq"),
    ("command-password", "smbclient //srv/share -U admin%Xk9mm2pq; lftp -u deploy,Yk9mm2pq sftp://h", "Xk9mm2pq"),
    ("command-password", "smbclient //srv/share -U admin%Xk9mm2pq; lftp -u deploy,Yk9mm2pq sftp://h", "Yk9mm2pq"),
    ("command-password", "htpasswd -cb /etc/nginx/.htpasswd admin hunterhunter", "hunterhunter"),
    ("command-password", "htpasswd -nbB admin hunterhunter", "hunterhunter"),
    ("command-password", "mc alias set minio http://minio:9000 minioadmin hunterhunter", "hunterhunter"),
    ("command-password", "aws configure set aws_secret_access_key hunterhunter --profile dev", "hunterhunter"),
    ("command-password", "sqlplus -s scott/Tiger123@orcl @report.sql", "Tiger123"),
    ("command-password", "echo 'Xk9mm2pq' | sudo -S apt-get update", "Xk9mm2pq"),
    ("command-password", 'echo "Xk9mm2pq" | docker login -u ci --password-stdin ghcr.io', "Xk9mm2pq"),
    ("user-credentials", "curl --user deploy:hunterhunter https://ci.example.com", "hunterhunter"),
    ("url-credentials", "redis-cli -u redis://:Xk9mm2pq@cache:6379 ping", "Xk9mm2pq"),
    ("vault-token", "vault login hvs.CAESIJ1a2b3c4d5e6f7g8h9i0jKLMNOPQRSTUVWXYZ", "hvs.CAESIJ1a2b3c4d5e6f"),
    ("npm-token", "use the npm token npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8 to publish", "npm_a1B2c3D4e5F6"),
    ("pypi-token", "twine upload -u __token__ -p pypi-AgEIcHlwaS5vcmcCJGE0ZjY5ZGQ5LWI1NzMtNGUxNS1hNmUyLTQ0OWI3NmZjNTQyNA dist/*",
     "pypi-AgEIcHlwaS5vcmcCJGE0"),
    ("kubeconfig-credentials", "    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlF",
     "LS0tLS1CRUdJTiBSU0Eg"),
    ("kubeconfig-credentials", "    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t",
     "LS0tLS1CRUdJTiBDRVJU"),
    ("docker-auth", '{"auths":{"https://index.docker.io/v1/":{"auth":"dXNlcm5hbWU6cGFzc3dvcmQxMjM0NQ=="}}}',
     "dXNlcm5hbWU6cGFzc3dvcmQxMjM0NQ"),
    ("sendgrid-key", "SENDGRID SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
     "SG.abcdefghijklmnopqrstuv"),
    ("google-oauth-secret", "the client secret is GOCSPX-AbCdEfGhIjKlMnOpQrStUvWxYz12", "GOCSPX-AbCdEf"),
    ("shopify-token", "admin api shpat_0123456789abcdef0123456789abcdef", "shpat_0123456789abcdef"),
    ("shopify-token", "shared secret shpss_0123456789abcdef0123456789abcdef", "shpss_0123456789abcdef"),
    ("age-secret-key", "AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ9F7ELL",
     "AGE-SECRET-KEY-1QQQQ"),
]


@pytest.mark.parametrize(("name", "text", "secret"), FAMILIES,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(FAMILIES)])
def test_each_secret_family_is_replaced_by_its_marker(name, text, secret):
    result = redact(text)
    assert secret not in result.text
    assert f"[REDACTED:{name}]" in result.text
    assert result.counts.get(name, 0) >= 1


def test_every_pattern_in_the_table_has_a_test():
    assert {p.name for p in PATTERNS} == {name for name, _, _ in FAMILIES}


@pytest.mark.parametrize("text", [
    "tokens = count_tokens(text)  # the tokenizer decides",
    "password = form.password; token = read_token",
    "The secret: we never log it. max_tokens: 4096",
    "API_KEY=$API_KEY PASSWORD=changeme password=<your password>",
    "PATH=/usr/local/bin:/usr/bin:/bin",
    "We decided to rotate the AWS keys monthly and keep them in Vault.",
    "Use the --password option, or --token-file /run/token, or --token $GITHUB_TOKEN.",
    "Basic authentication is enabled; basic configuration lives in config.yaml.",
    "API_URL=https://api.example.com/v1/a8d7f6g5h4k3j2",
    "GIT_SHA=3f2b8c1e9a4d4c2b8e1f0a1b2c3d4e5f6a7b8c9d",  # a digest under a name that says so
    "ERROR auth refresh_token: KeyError: exp",  # an exception's name in a log line
    "export imageDigest=4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b",
    # settings about a secret, not the secret: numbers, header names, addresses, calls
    "MAX_TOKEN_LENGTH=4096", "TOKEN_BUDGET=1200", "PASSWORD_RESET_TIMEOUT=3600", "token_limit = 8192",
    "TOKEN_EXPIRY_SECONDS=3600", 'token_type="Bearer"', "TOKEN_URL=https://auth.example.com/oauth/token",
    'api_key_header = "X-API-Key"', "AUTH_TOKEN_HEADER=Authorization", "token_endpoint: /oauth2/v1/token",
    "password_hasher = argon2.PasswordHasher()", "NODE_VERSION=20.11.1-bookworm-slim", "CF_RAY=7d4a5b6c8e9f0a1b-LHR",
    "IMAGE_TAG=sha256:9b2f3c7d1e4a5b6c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c",
    "from sklearn import svm  # sk-learn-model-selection-helpers",
    # words that hold "pass", and the current folder
    "PASSAGE=Tr0ub4dor3 bypass=hunter2hunter compass=N0rth3rly PWD=/home/me/src OLDPWD=/tmp/x9",
    "docker run -u 1000:1000 img; docker exec -u www-data:www-data web; git push -u origin main:main",
    "the machine learning password reset flow",
    # a key word in prose followed by ordinary words
    "The password is stored in Vault; the token is JWT-based and the secret is out.",
    "The password is 12 characters long and the token was expired.",
    "The secret 'intro' holds the username; the tokenizer cl100k_base; the password reset flow v2.",
    "Set the token limit 8192 and secret santa 2024; the password was reset on 2024-01-05.",
    # where a secret is kept, not the secret
    "Deploy private key: ~/.ssh/deploy_ed25519; secret: /run/secrets/db_password2; the token at ../keys/t1",
    # mysql's -p asks for the password, or names a variable; other commands' -p is something else
    "mysql -u root -p payments; mariadb -uroot -p$MYSQL_PWD x; mkdir -p build && ssh -p 2222 host",
    # a password option of one command is something else in another, or asks for the password
    "ssh -p 2222 host; docker run -p 8080:80 img; cp -P a b; git log -p -w f; sort -k 2 f; grep -a x f",
    "mongosh -p --host db; ssh-keygen -t ed25519 -N '' -f key; docker login registry.example.com",
    "unzip -P $ZIP_PASSWORD a.zip; redis-cli -a \"$REDIS_PASSWORD\" ping; openssl rsa -passin file:pw.txt",
    "htpasswd -c .htpasswd admin; sqlplus / as sysdba; zipfile -P x; docker login; echo login -p x",
    'echo "$TOKEN" | docker login -u ci --password-stdin; echo x | sudo -s; echo done | sudo tee -a f',
    "Fixed in commit 3f786850e387550fdab836ed7e6dc881de23001b; src/agentmemrec/indexing/sources/watcher",
])
def test_ordinary_prose_and_code_are_left_alone(text):
    result = redact(text)
    assert result.text == text and result.counts == {}


def test_the_key_name_stays_readable():
    assert redact("DB_PASSWORD=hunter22").text == "DB_PASSWORD=[REDACTED:secret-assignment]"


def test_redaction_stays_linear_on_adversarial_text():
    # Each of these took minutes with a backtracking pattern; linear patterns take milliseconds.
    runs = ["x_y_z-", "a.", "eyJ-", "sk-", "xoxb-", "token_", "secret", "a://", "postgres://u:",
            "password=", "TOKEN = ", "ghp_", "Bearer ", "A=", "secret: ", "AIza-", 'token="', "--a-",
            "--token ", "Basic ", 'password: "a ', "glpat-", "hf_", "whsec_", "https://hooks.slack.com/services/",
            "-u a:", "--user ", "sshpass -p ", "machine a login b ", "npm_", "pypi-AgE", "SG.", "GOCSPX-",
            "shpat_", "AGE-SECRET-KEY-1", '"auth": "', "client-key-data: ", "DB_PASS=", "aB3/", "TOKEN_TYPE=",
            "password is ", "token was a1", "password for a b ", "secret of x y z is ", "api key ",
            "mysql -u ", "mysql a -pb ", "docker login -p ", "-keypass ", "7z -pa ", "lftp -u a,", "-U a%",
            "htpasswd -b a ", "mc alias set ", "sqlplus a/", "redis://:a@", "openssl -passin pass:", "hvs.",
            "curl -u a:", "echo a | docker login ", "echo a | sudo -S ", "echo "]
    started = time.perf_counter()
    for run in runs:
        redact(run * (100_000 // len(run)))
    assert time.perf_counter() - started < 10


fragments = st.sampled_from([text for _, text, _ in FAMILIES] + ["plain words", "\n", " = ", ": "])


@settings(max_examples=150, deadline=None)
@given(st.lists(fragments | st.text(max_size=30), max_size=8))
def test_redacting_twice_changes_nothing(parts):
    once = redact("".join(parts)).text
    assert redact(once).text == once


@pytest.mark.anyio
async def test_remember_redacts_every_kind(client):
    written = await call(client, "remember", items=[
        turn(f"Deploy with {AWS_KEY} as the access key id", ref="t"),
        {"kind": "decision", "ref": "d", "title": "Use ghp_1234567890abcdefghijABCDEFGHIJ123456",
         "text": "CI pushes with password=hunter22"},
        {"kind": "note", "path": "ops.md", "text": "SESSION_SIGNING=f3Kq9vLx2Wm8Rt4Zp7Yb1Nc6"},
    ])
    assert written["redacted"] == {"aws-access-key": 1, "github-token": 1, "high-entropy": 1,
                                   "secret-assignment": 1}
    slate = await call(client, "recall_slate", with_items=True, query="deploy access key CI pushes ops")
    context = slate["context"]
    assert {i["ref"] for i in slate["items"]} == {"t", "d", "ops.md"}
    for secret in (AWS_KEY, "ghp_1234567890", "hunter22", "f3Kq9vLx2Wm8"):
        assert secret not in context
    assert "[REDACTED:aws-access-key]" in context and "[REDACTED:github-token]" in context
    again = await call(client, "remember", items=[turn("the ledger closes at midnight", ref="plain")])
    assert again["redacted"] == {}


@pytest.mark.anyio
async def test_a_server_started_with_no_redact_stores_text_verbatim(home):
    settings = serve_settings(build_parser().parse_args(["serve", "--project", "alpha", "--no-redact"]))
    assert settings.redact is False
    async with Client(create_server(replace(settings_for(home, "alpha"), redact=False))) as c:
        await call(c, "remember", items=[turn(f"The access key id is {AWS_KEY}")])
        slate = await call(c, "recall_slate", query="access key id")
    assert AWS_KEY in slate["context"]


def test_a_token_used_as_a_urls_user_leaves_one_clean_marker():
    """The URL rule read the first marker as user:password and redacted inside it."""
    token = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5q"
    out = redact(f"git push https://{token}@github.com/o/r")
    assert out.text == "git push https://[REDACTED:github-token]@github.com/o/r"
    assert out.counts == {"github-token": 1}


@pytest.mark.parametrize("text, secret", [
    ("postgresql://admin:secretP4ss99@db.internal/app", "secretP4ss99"),
    ("mysql://root:Password123!@db/app", "Password123!"),
    ("DB_PASSWORD=Password123!", "Password123!"),
])
def test_a_weak_password_that_starts_like_a_placeholder_is_redacted(text, secret):
    assert secret not in redact(text).text


@pytest.mark.parametrize("text", ["password=changeme", "DB_PASSWORD=$DB_PASSWORD", "password: <your password>",
                                  "postgresql://user:password@localhost/db", "secret: password_here"])
def test_placeholders_stay(text):
    assert redact(text).text == text


@pytest.mark.parametrize("text", ["SESSION_ID=3f2b8c1e9a4d4c2b8e1f0a1b2c3d4e5f",  # hex under another name
                                  "GIT_SHA=zz2b8c1e9a4d4c2b8e1f0a1b2c3d4e5fQQ9"])  # not hex
def test_hex_is_kept_only_under_a_digests_name(text):
    assert redact(text).counts == {"high-entropy": 1}


@settings(max_examples=200, deadline=None)
@given(st.lists(fragments | st.sampled_from(["ſecret=", "prİvate_key: ", "PAſſWORD", "\u212a"]) | st.text(max_size=30),
                max_size=8))
def test_skipping_patterns_whose_literals_are_absent_changes_nothing(parts):
    text = "".join(parts)
    assert redact(text) == redact(text, tuple(replace(p, needles=()) for p in PATTERNS))
