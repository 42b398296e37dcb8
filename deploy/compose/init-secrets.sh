#!/bin/sh
# Makes the secrets of the compose deployment, once, into the agentrt-secrets volume (mounted at
# $SECRETS): a throwaway development PKI and grant key pair (`agentrt auth dev-pki`), an admin
# bearer token, payload encryption keys and the metrics scrape token. For a laptop only: the
# production manifests take these from your own CA and secret store (README, "Deploying").
# Runs again as a no-op; `docker compose down -v` throws everything away.
set -eu
SECRETS="${SECRETS:-/secrets}"
OWNER="${OWNER:-10001:10001}"

if [ -e "$SECRETS/tls/server.pem" ]; then
    echo "agentrt secrets exist in $SECRETS; nothing to do"
    exit 0
fi
umask 077
mkdir -p "$SECRETS/tls" "$SECRETS/grants" "$SECRETS/grants-public" "$SECRETS/auth" \
    "$SECRETS/encryption" "$SECRETS/metrics" "$SECRETS/client"

# One server certificate for both names (development): the runtime's and the tool hosts'.
agentrt auth dev-pki "$SECRETS/pki" --host agentrt-runtime --host agentrt-toolhost \
    --host localhost --host 127.0.0.1 --client probe --days 365
mv "$SECRETS/pki/grant.key" "$SECRETS/grants/grant.key"
mv "$SECRETS/pki/grant.pub" "$SECRETS/grants-public/grant.pub"
# Nothing signs certificates after this: the CA key does not stay beside them.
rm "$SECRETS/pki/ca.key"
mv "$SECRETS/pki/"* "$SECRETS/tls/"
rmdir "$SECRETS/pki"

# The token is written once, for you (agentrt --token-file); the runtime keeps only its hash.
agentrt auth hash-token --generate --token-out "$SECRETS/client/admin.token" \
    --subject admin --tenant default --role admin --role operator --role approver --role runner \
    > "$SECRETS/auth/tokens.toml"

python - "$SECRETS" <<'PY'
import base64, json, secrets, sys
root = sys.argv[1]
with open(f"{root}/encryption/keys.json", "w") as fh:
    json.dump({"active": "k1", "keys": {"k1": base64.b64encode(secrets.token_bytes(32)).decode()}}, fh)
with open(f"{root}/metrics/token", "w") as fh:
    fh.write(secrets.token_urlsafe(32) + "\n")
PY

chown -R "$OWNER" "$SECRETS"
# Prometheus runs as another user (nobody) and must read the scrape token.
chmod 0755 "$SECRETS/metrics"
chmod 0644 "$SECRETS/metrics/token"
echo "agentrt secrets written to $SECRETS"
