"""The live status line of scripts/dev-cluster: one line per call, from one manager's
/v1/cluster and /v1/state.

argv: the manager's URL, then (TLS) the CA, the admin certificate and its key.
"""

import json
import ssl
import sys
import urllib.request


def get(url, context):
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as reply:
            return json.load(reply)
    except Exception:
        return None


def index(value):
    # JSON null (nothing applied yet) reads as a word, not as Python's None.
    return "nothing" if value is None else "%d" % value


def status_line(cluster, state):
    leader = cluster.get("leader_id")
    parts = [
        "%s, term %d, applied %s"
        % (
            "no leader yet" if leader is None else "leader %d" % leader,
            cluster["term"],
            index(cluster.get("applied_index")),
        )
    ]
    parts.append("rev %d" % state["revision"])
    for executor in state["executors"]:
        label = executor.get("name") or executor["executor_id"]
        parts.append(
            "%s: %d shards, lease %ds"
            % (label, len(executor["shards"]), executor["lease_remaining_ms"] // 1000)
        )
    releasing = sum(1 for shard in state["shards"] if shard.get("handoff"))
    unowned = sum(1 for shard in state["shards"] if not shard.get("owner"))
    parts.append("releasing %d, unowned %d" % (releasing, unowned))
    return " | ".join(parts)


def main():
    context = None
    if len(sys.argv) == 5:
        context = ssl.create_default_context(cafile=sys.argv[2])
        context.load_cert_chain(sys.argv[3], sys.argv[4])
    manager = sys.argv[1]
    cluster = get(manager + "/v1/cluster", context)
    state = get(manager + "/v1/state", context)
    if not cluster or not state:
        print("waiting for the cluster ...")
    else:
        print(status_line(cluster, state))


if __name__ == "__main__":
    main()
