#!/usr/bin/env bash
# The etcd roles of an idgen deployment, created in one region's etcd (docs/runbook.md, "etcd users and roles").
# Run it once per region, as etcd's root, with etcdctl's own settings in the environment; it is safe to run again:
#
#   ETCDCTL_ENDPOINTS=https://etcd-2:2379 ETCDCTL_CACERT=ca.crt ETCDCTL_USER=root ETCDCTL_PASSWORD=… \
#     deploy/etcd/roles.sh /idgen 5 6 7
#
# Arguments: the key prefix (--etcd-prefix, default /idgen), then the layout's spare region codes (default 5 6 7).
#   idgen-node         read and write {prefix}/: generator nodes and embedded callers (leases, last-ms, discovery,
#                      the layout record the first node writes)
#   idgen-operator     read {prefix}/: idgen status, leases, layout, decode --etcd, spare list
#   idgen-spare-admin  read {prefix}/, write {prefix}/spare-codes/, {prefix}/spare-registry/ (the registry's records
#                      where this etcd is the deployment's spare-code registry, and in every region's etcd
#                      {prefix}/spare-registry/seen, its memory of the registry) and each spare code's
#                      {prefix}/regions/{code}/last-ms/:
#                      idgen spare lend, reclaim and adopt, nothing of the leases of the region's own codes
# Then give each user one role, e.g.:
#   etcdctl user add idgen-node --new-user-password="$(cat node-password)" && etcdctl user grant-role idgen-node idgen-node
set -euo pipefail

prefix="${1:-/idgen}"
shift || true
codes=("$@")
((${#codes[@]})) || codes=(5 6 7)
if [[ ! "$prefix" =~ ^/[A-Za-z0-9._/-]*$ || "$prefix" == *//* || ("$prefix" != / && "$prefix" == */) ]]; then
  echo "roles.sh: the prefix must start with /, not end with / and use [A-Za-z0-9._-/], got \"$prefix\"" >&2
  exit 2
fi
for code in "${codes[@]}"; do
  [[ "$code" =~ ^[0-9]+$ ]] || { echo "roles.sh: a spare region code is a number, got \"$code\"" >&2; exit 2; }
done
command -v etcdctl >/dev/null || { echo 'roles.sh: etcdctl not found: install it (apt-get install etcd-client)' >&2; exit 2; }
export ETCDCTL_API=3
keys="${prefix%/}/"

role() {
  local name="$1"
  etcdctl role get "$name" >/dev/null 2>&1 || etcdctl role add "$name" >/dev/null
  echo "role $name:"
}
grant() {
  etcdctl role grant-permission "$1" --prefix=true "$2" "$3" >/dev/null
  echo "  $2 $3"
}

role idgen-node
grant idgen-node readwrite "$keys"
role idgen-operator
grant idgen-operator read "$keys"
role idgen-spare-admin
grant idgen-spare-admin read "$keys"
grant idgen-spare-admin readwrite "${keys}spare-codes/"
grant idgen-spare-admin readwrite "${keys}spare-registry/"
for code in "${codes[@]}"; do grant idgen-spare-admin readwrite "${keys}regions/${code}/last-ms/"; done
