#!/usr/bin/env bash
# make-certs.sh DIR ID [ID...]: a CA and one certificate per phalanx replica id, with
# openssl, for `phalanx serve --tls-cert/--tls-key/--tls-ca` (docs/security.md).
#
#   DIR/ca.crt             the CA certificate (every replica's --tls-ca)
#   DIR/ca/ca.key          the CA's private key, kept out of DIR's top level so that
#                          `kubectl create secret generic NAME --from-file=DIR` takes only
#                          what the replicas need (docs/install.md, "TLS")
#   DIR/replica-ID.crt     replica ID's certificate: DNS SAN replica-ID.phalanx (the name
#                          serve checks against the id a peer claims), for both server and
#                          client authentication
#   DIR/replica-ID.key     its private key (EC P-256, PKCS#8)
#
# Files that exist are kept: a second run adds the ids still missing, signed by the same CA,
# so the replicas of a grown group trust each other. PHALANX_CERT_DAYS sets the validity
# (default 365). Used by the testbed e2e (scheduler/tests/testbed), the chaos matrix
# (chaos/src/fleet.rs) and the Helm e2e (deploy/helm/test/e2e.sh): one place makes the
# certificates, so they cannot drift apart.
set -euo pipefail
umask 077

if [[ $# -lt 2 ]]; then
  echo "usage: $0 DIR ID [ID...]  (ID: a replica id, 1 or more)" >&2
  exit 2
fi
dir="$1"
shift
days="${PHALANX_CERT_DAYS:-365}"
[[ "$days" =~ ^[1-9][0-9]*$ ]] || { echo "$0: PHALANX_CERT_DAYS '$days' is not a positive number of days" >&2; exit 2; }
for id in "$@"; do
  [[ "$id" =~ ^[1-9][0-9]*$ ]] || { echo "$0: replica id '$id' is not a number from 1 up" >&2; exit 2; }
done
mkdir -p "$dir/ca"
# One caller at a time (tests start replicas in parallel): two would make two CAs.
exec 9>"$dir/ca/.lock"
flock 9
work="$(mktemp -d "$dir/ca/.work.XXXXXX")"
trap 'rm -rf "$work"' EXIT
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

# Written under a temporary name and moved into place: a replica that reloads its files
# never reads half of one.
if [[ ! -f "$dir/ca.crt" ]]; then
  openssl req -x509 "${ec[@]}" -keyout "$work/ca.key" -out "$work/ca.crt" -days "$days" \
    -subj /CN=phalanx-ca -addext basicConstraints=critical,CA:TRUE \
    -addext keyUsage=critical,keyCertSign,cRLSign 2>"$work/log" || { cat "$work/log" >&2; exit 1; }
  mv "$work/ca.key" "$dir/ca/ca.key"
  chmod 644 "$work/ca.crt"
  mv "$work/ca.crt" "$dir/ca.crt"
fi
for id in "$@"; do
  name="replica-$id"
  [[ -f "$dir/$name.crt" && -f "$dir/$name.key" ]] && continue
  printf 'subjectAltName=DNS:%s.phalanx\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature\n' \
    "$name" >"$work/$name.ext"
  openssl req "${ec[@]}" -keyout "$work/$name.key" -out "$work/$name.csr" -subj "/CN=$name" \
    2>"$work/log" || { cat "$work/log" >&2; exit 1; }
  openssl x509 -req -in "$work/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$days" -extfile "$work/$name.ext" \
    -out "$work/$name.crt" 2>"$work/log" || { cat "$work/log" >&2; exit 1; }
  chmod 644 "$work/$name.crt"
  mv "$work/$name.key" "$dir/$name.key"
  mv "$work/$name.crt" "$dir/$name.crt"
done
