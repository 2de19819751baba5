#!/bin/sh
# The quick start's secrets, generated on your machine and never committed: a random password for the demo
# PostgreSQL and the database URL Tide reaches it with, written as the env files that kustomization.yaml's
# secretGenerator reads (secrets/, ignored by git). Run it once before the first `kubectl apply -k
# deploy/k8s/quickstart`; run again, it keeps the files it made (the database was created with that password).
set -eu
dir="$(dirname "$0")/secrets"
umask 077
mkdir -p "$dir"
if [ -e "$dir/postgres.env" ] && [ -e "$dir/tide.env" ]; then
    echo "kept the quick start's secrets in $dir (delete the directory to make new ones)"
    exit 0
fi
password="$(openssl rand -hex 24)"
printf 'password=%s\n' "$password" > "$dir/postgres.env"
printf 'database-url=postgresql://tide:%s@tide-postgres.tide.svc:5432/tide\n' "$password" > "$dir/tide.env"
echo "made the quick start's secrets in $dir"
