#!/usr/bin/env bash
# Try the druse agent in five minutes: a local Bluesky (PLC, PDS and AppView from
# @atproto/dev-env, with its own PostgreSQL) on this machine, three accounts on it (the agent's,
# its owner's and yours), and a druse node whose agent lives on that Bluesky and thinks with the
# OpenAI-compatible model you name. No account anywhere; once the network is installed, nothing
# leaves the machine but the model's requests (to LLM_URL).
#
#   LLM_URL=http://127.0.0.1:11434/v1 LLM_MODEL=llama3.2 bash deploy/try-agent.sh   # Ollama
#
# It installs the local network when needed (bash tests/atproto/install.sh: Node 22,
# @atproto/dev-env, Debian's PostgreSQL; the first install needs npm, and apt-get as root for
# PostgreSQL), starts it, creates the accounts, writes the node's config, starts druse-node,
# waits until the agent is logged in, prints what to do next, and stays in the foreground. Stop
# it with Ctrl-C or SIGTERM: the node gets SIGTERM (and is waited for), then the network stops
# and removes its PostgreSQL state; the data dir and the logs are kept.
#
# From another terminal, while it runs:
#   deploy/try-agent.sh say "hello @agent.test, what do you know about tide pools?"
#                            post as you (with a mention facet for each @handle of the local
#                            network; "@agent.test " is put first when the text does not name
#                            the agent) and wait for the agent's answer (--no-wait: just post)
#   deploy/try-agent.sh reply "and where are they?"
#                            answer the agent's newest reply to you, in its thread (and wait)
#   deploy/try-agent.sh replies [N]
#                            your N newest threads (default 5) with every answer, and the
#                            agent's own newest posts (approval requests, musings)
#   deploy/try-agent.sh approve [POST_URI]
#                            as the owner, like the agent's newest approval request (or the one
#                            named): that approves the action it asks for, once
#   deploy/try-agent.sh status
#                            the agent's status (GET /v1/agent)
# A subcommand finds the running session through TRY_DIR, or, when the session was started
# without TRY_DIR, through ~/.cache/druse/try-agent.current.
#
# Everything is configurable through the environment:
#   LLM_URL             required: the model server's base URL up to /v1 (Ollama
#                       http://127.0.0.1:11434/v1, llama-server http://127.0.0.1:8080/v1, or a
#                       hosted API such as https://api.openai.com/v1)
#   LLM_MODEL           required: the model's name (llama3.2, qwen2.5:7b, gpt-4o-mini, …)
#   LLM_API_KEY_ENV     the NAME of the variable holding the API key (e.g. OPENAI_API_KEY, set
#                       in the environment too); unset for a server without a key
#   LLM_TIMEOUT         the longest wait for one answer of the model (default 120s)
#   TRY_DIR             config, data dir, session and logs (default: a new temp dir; kept after
#                       exit). It must not hold an earlier session's data dir.
#   BIN_DIR             where druse-node is (default: target/release, then target/debug; if
#                       neither has it, `cargo build --release -p druse-node` builds it)
#   TRY_HOST            the address the node's listeners bind (default 127.0.0.1)
#   API_PORT            the node's HTTP API (default 7720)
#   METRICS_PORT        the node's Prometheus metrics (default 9470)
#   P2P_PORT            the node's P2P port, TCP and QUIC (default 4020); mDNS is off
#                       (the defaults do not clash with deploy/local-swarm.sh's)
#   AGENT_HANDLE        the agent's handle (default agent.test)
#   OWNER_HANDLE        its owner's handle (default theowner.test): only the owner's like approves
#   USER_HANDLE         your handle (default human.test). The local PDS takes handles of 3 to 18
#                       letters, digits and dashes before .test, and refuses reserved names
#                       (owner, you, me, admin, …)
#   POLL_INTERVAL       how often the agent reads its notifications (default 2s)
#   PERSONA_FILE        a text file that replaces the agent's default persona (optional)
#   AGENT_EXTRA         more lines for the node's [agent] table, e.g. $'musing = true\ndry_run = true'
#   MODEL_DOWNLOAD      true: fetch all-MiniLM-L6-v2 (~90 MB) into the data dir for the agent's
#                       memory; false (default): the built-in hashing embedder, or MiniLM from
#                       the folder DRUSE_MINILM_DIR names
#   NET_TIMEOUT         seconds to wait for the local network (default 180)
#   READY_TIMEOUT       seconds to wait for the node's /healthz, then for its agent (default 120)
#   STOP_TIMEOUT        seconds to wait for the node after SIGTERM before SIGKILL (default 30)
#   REPLY_TIMEOUT       seconds `say` and `reply` wait for the agent's answer (default 180)
#   LOG_FORMAT          the node's log format, text or json (default text)
#   RUST_LOG            the node's log filter (default info; e.g. info,druse_agent=debug)
#   DRUSE_ATPROTO_HOME  where the local network is installed (default ~/.cache/druse/atproto);
#                       DRUSE_ATPROTO_PDS_PORT, _APPVIEW_PORT, _PLC_PORT fix its ports (unset:
#                       free ports)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
POINTER="${HOME:-/tmp}/.cache/druse/try-agent.current"

TRY_HOST="${TRY_HOST:-127.0.0.1}"
API_PORT="${API_PORT:-7720}"
METRICS_PORT="${METRICS_PORT:-9470}"
P2P_PORT="${P2P_PORT:-4020}"
AGENT_HANDLE="${AGENT_HANDLE:-agent.test}"
OWNER_HANDLE="${OWNER_HANDLE:-theowner.test}"
USER_HANDLE="${USER_HANDLE:-human.test}"
POLL_INTERVAL="${POLL_INTERVAL:-2s}"
LLM_TIMEOUT="${LLM_TIMEOUT:-120s}"
MODEL_DOWNLOAD="${MODEL_DOWNLOAD:-false}"
NET_TIMEOUT="${NET_TIMEOUT:-180}"
READY_TIMEOUT="${READY_TIMEOUT:-120}"
STOP_TIMEOUT="${STOP_TIMEOUT:-30}"
REPLY_TIMEOUT="${REPLY_TIMEOUT:-180}"
LOG_FORMAT="${LOG_FORMAT:-text}"

say() { printf '[try-agent] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

usage() {
  # The comment at the top of this file, without its `#`s.
  awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"
}

# --- the ATProto side, in Python (standard library only) ------------------------------------
# Every subcommand that talks to the local network runs this with the session's variables in
# its environment (TRY_PDS, TRY_API, TRY_<WHO>_HANDLE/_DID/_PASSWORD).
read -r -d '' PY <<'PYTHON' || true
import json, os, re, sys, time, urllib.error, urllib.parse, urllib.request
from datetime import datetime, timezone

E = os.environ


class Failed(Exception):
    pass


def xrpc(nsid, params=None, body=None, token=None, timeout=30):
    url = f"{E['TRY_PDS']}/xrpc/{nsid}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read()
    except urllib.error.HTTPError as e:
        raise Failed(f"{nsid}: HTTP {e.code} {e.read().decode(errors='replace')}") from None
    except (urllib.error.URLError, OSError) as e:
        raise Failed(f"{nsid}: {e} (is the session still running?)") from None
    return json.loads(text) if text else None


def who(role):
    return {k: E[f"TRY_{role}_{k.upper()}"] for k in ("handle", "did", "password")}


def login(role):
    w = who(role)
    s = xrpc("com.atproto.server.createSession", body={"identifier": w["handle"], "password": w["password"]})
    return s["accessJwt"], s["did"]


def now_iso():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def mention_facets(text):
    """A mention facet (UTF-8 byte offsets) for each @handle that resolves on the local PDS."""
    facets, dids = [], {}
    for m in re.finditer(r"(?:^|(?<=[\s(\"'\[]))@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)", text):
        handle = m.group(1).rstrip(".").lower()
        if handle not in dids:
            try:
                dids[handle] = xrpc("com.atproto.identity.resolveHandle", {"handle": handle})["did"]
            except Failed:
                dids[handle] = None
        if dids[handle] is None:
            print(f"(@{handle} is not an account of the local network: no mention facet)", file=sys.stderr)
            continue
        start = len(text[: m.start()].encode())
        end = start + len(("@" + handle).encode())
        facets.append({"index": {"byteStart": start, "byteEnd": end},
                       "features": [{"$type": "app.bsky.richtext.facet#mention", "did": dids[handle]}]})
    return facets


def thread(token, uri, depth=20):
    return xrpc("app.bsky.feed.getPostThread", {"uri": uri, "depth": depth}, token=token)["thread"]


def agent_chain(node, agent_did):
    """The agent's answers under a thread node: each reply by the agent, followed down while
    the agent continued itself (a long answer is a thread of posts)."""
    out = []
    for r in node.get("replies") or []:
        if r.get("post", {}).get("author", {}).get("did") != agent_did:
            continue
        chain, cur = [], r
        while cur:
            chain.append(cur["post"]["record"].get("text", ""))
            cur = next((c for c in cur.get("replies") or []
                        if c.get("post", {}).get("author", {}).get("did") == agent_did), None)
        out.append(chain)
    return out


def post(text, reply=None):
    token, did = login("USER")
    agent = who("AGENT")
    # A reply to the agent reaches it without a mention; a new post needs one.
    if reply is None and not re.search(r"(?:^|\W)@" + re.escape(agent["handle"]) + r"(?![\w-]|\.\w)", text, re.I):
        text = f"@{agent['handle']} {text}"
        print(f"(put @{agent['handle']} first so the agent is mentioned)", file=sys.stderr)
    record = {"$type": "app.bsky.feed.post", "text": text, "createdAt": now_iso()}
    facets = mention_facets(text)
    if facets:
        record["facets"] = facets
    if reply:
        record["reply"] = reply
    out = xrpc("com.atproto.repo.createRecord", token=token,
               body={"repo": did, "collection": "app.bsky.feed.post", "record": record})
    print(f"posted as @{who('USER')['handle']}: {out['uri']}")
    return token, out["uri"]


def wait_answer(token, uri):
    """Waits until the agent answered `uri`; prints the answer. Exit 3 when none came."""
    agent_did = E["TRY_AGENT_DID"]
    deadline = time.monotonic() + float(E.get("REPLY_TIMEOUT", "180"))
    print(f"waiting up to {E.get('REPLY_TIMEOUT', '180')} s for @{E['TRY_AGENT_HANDLE']} ...", file=sys.stderr)
    seen = None
    while time.monotonic() < deadline:
        try:
            chains = agent_chain(thread(token, uri), agent_did)
        except Failed:
            chains = []  # not indexed by the AppView yet
        if chains and chains == seen:
            # The same answer twice in a row: a long answer's posts are all there.
            for chain in chains:
                print(f"@{E['TRY_AGENT_HANDLE']}:")
                for text in chain:
                    print("  " + text.replace("\n", "\n  "))
            return 0
        seen = chains or None
        time.sleep(1)
    print(f"no answer from @{E['TRY_AGENT_HANDLE']} within {E.get('REPLY_TIMEOUT', '180')} s: it may have "
          f"chosen not to answer, or the model is slow. Look later with `replies`; the agent's log is "
          f"{E['TRY_NODE_LOG']}", file=sys.stderr)
    return 3


def cmd_create_account(handle, password):
    try:
        out = xrpc("com.atproto.server.createAccount",
                   body={"handle": handle, "email": f"{handle}@example.test", "password": password})
    except Failed as e:
        raise Failed(f"creating @{handle}: {e} (AGENT_HANDLE, OWNER_HANDLE and USER_HANDLE choose others)") from None
    print(out["did"])


def cmd_say(text, wait):
    token, uri = post(text)
    return wait_answer(token, uri) if wait else 0


def cmd_reply(text, wait):
    token, _ = login("USER")
    agent_did, user_did = E["TRY_AGENT_DID"], E["TRY_USER_DID"]
    records = xrpc("com.atproto.repo.listRecords",
                   {"repo": agent_did, "collection": "app.bsky.feed.post", "limit": 100}, token=token)["records"]
    for rec in records:  # newest first
        parent = rec["value"].get("reply", {}).get("parent", {}).get("uri", "")
        if parent.startswith(f"at://{user_did}/"):
            root = rec["value"]["reply"]["root"]
            _, uri = post(text, {"root": root, "parent": {"uri": rec["uri"], "cid": rec["cid"]}})
            return wait_answer(token, uri) if wait else 0
    raise Failed(f"@{E['TRY_AGENT_HANDLE']} has not answered you yet: start a thread with `say`")


def show(node, depth=0):
    p = node.get("post", {})
    author = p.get("author", {}).get("handle", "?")
    when = p.get("record", {}).get("createdAt", "")[11:19]
    pad = "  " * depth
    text = p.get("record", {}).get("text", "").replace("\n", "\n" + pad + "    ")
    print(f"{pad}{'' if depth == 0 else '↳ '}@{author} {when}: {text}")
    for r in sorted(node.get("replies") or [], key=lambda r: r.get("post", {}).get("record", {}).get("createdAt", "")):
        show(r, depth + 1)


def cmd_replies(n):
    token, did = login("USER")
    records = xrpc("com.atproto.repo.listRecords",
                   {"repo": did, "collection": "app.bsky.feed.post", "limit": 100}, token=token)["records"]
    roots = [r["uri"] for r in records if "reply" not in r["value"]][:n]
    if not roots:
        print(f"@{E['TRY_USER_HANDLE']} has posted nothing yet: try `say`")
    for uri in reversed(roots):
        print(f"--- {uri}")
        try:
            show(thread(token, uri))
        except Failed as e:
            print(f"(not shown yet: {e})")
    agent_did = E["TRY_AGENT_DID"]
    own = xrpc("com.atproto.repo.listRecords",
               {"repo": agent_did, "collection": "app.bsky.feed.post", "limit": 100}, token=token)["records"]
    own = [r for r in own if "reply" not in r["value"]][:5]
    if own:
        print(f"--- @{E['TRY_AGENT_HANDLE']}'s own newest posts")
        for r in reversed(own):
            print(f"{r['value'].get('createdAt', '')[11:19]} {r['uri']}\n    {r['value'].get('text', '')}")
    return 0


def cmd_approve(uri):
    with urllib.request.urlopen(f"{E['TRY_API']}/v1/agent", timeout=10) as r:
        status = json.load(r)
    pending = sorted(status.get("pending") or [], key=lambda p: p.get("created", 0))
    if not pending:
        raise Failed("no approval request is waiting for the owner (`status` shows `pending`)")
    chosen = next((p for p in pending if p["post"] == uri), None) if uri else pending[-1]
    if chosen is None:
        raise Failed(f"{uri} is not a pending approval request; pending: {[p['post'] for p in pending]}")
    token, did = login("OWNER")
    repo, collection, rkey = chosen["post"][len("at://"):].split("/")
    record = xrpc("com.atproto.repo.getRecord", {"repo": repo, "collection": collection, "rkey": rkey}, token=token)
    print(f"approving: {record['value'].get('text', '')}")
    print(f"  the action in full: {json.dumps(chosen.get('action'))}")
    xrpc("com.atproto.repo.createRecord", token=token, body={
        "repo": did, "collection": "app.bsky.feed.like",
        "record": {"$type": "app.bsky.feed.like", "subject": {"uri": record["uri"], "cid": record["cid"]},
                   "createdAt": now_iso()}})
    print(f"liked as @{who('OWNER')['handle']}: the agent acts at its next poll")
    return 0


def main(argv):
    cmd, args = argv[0], argv[1:]
    wait = "--no-wait" not in args
    args = [a for a in args if a != "--no-wait"]
    if cmd == "create-account":
        return cmd_create_account(*args)
    if cmd == "say":
        return cmd_say(" ".join(args), wait)
    if cmd == "reply":
        return cmd_reply(" ".join(args), wait)
    if cmd == "replies":
        return cmd_replies(int(args[0]) if args else 5)
    if cmd == "approve":
        return cmd_approve(args[0] if args else None)
    raise Failed(f"unknown command {cmd}")


try:
    sys.exit(main(sys.argv[1:]) or 0)
except Failed as e:
    print(f"[try-agent] error: {e}", file=sys.stderr)
    sys.exit(1)
PYTHON

atproto() { python3 -c "$PY" "$@"; }

# --- subcommands on a running session --------------------------------------------------------
# Loads the session of TRY_DIR (or of the pointer file) into the environment.
load_session() {
  local dir="${TRY_DIR:-}"
  if [[ -z "$dir" && -f "$POINTER" ]]; then
    dir="$(cat "$POINTER")"
  fi
  [[ -n "$dir" ]] || die "no session: start one with deploy/try-agent.sh (or set TRY_DIR to its directory)"
  [[ -f "$dir/session.env" ]] || die "no running session in $dir (start one with deploy/try-agent.sh)"
  # shellcheck source=/dev/null
  source "$dir/session.env"
  kill -0 "$TRY_PID" 2>/dev/null || die "the session in $dir is not running any more (pid $TRY_PID)"
  export TRY_PDS TRY_API TRY_NODE_LOG REPLY_TIMEOUT
  local role
  for role in AGENT OWNER USER; do
    export "TRY_${role}_HANDLE" "TRY_${role}_DID" "TRY_${role}_PASSWORD"
  done
}

case "${1:-start}" in
  start) ;;
  say | reply)
    command -v python3 >/dev/null 2>&1 || die "python3 is needed"
    (($# >= 2)) || die "usage: deploy/try-agent.sh $1 [--no-wait] \"your message\""
    load_session
    exec python3 -c "$PY" "$@"
    ;;
  replies | approve)
    command -v python3 >/dev/null 2>&1 || die "python3 is needed"
    load_session
    exec python3 -c "$PY" "$@"
    ;;
  status)
    load_session
    curl -fsS --max-time 10 "$TRY_API/v1/agent" | python3 -m json.tool
    exit
    ;;
  help | -h | --help)
    usage
    exit 0
    ;;
  *)
    usage >&2
    die "unknown subcommand: $1"
    ;;
esac

# --- start: check what the user gave ---------------------------------------------------------
missing=()
[[ -n "${LLM_URL:-}" ]] || missing+=("LLM_URL (the model server up to /v1, e.g. http://127.0.0.1:11434/v1 for Ollama)")
[[ -n "${LLM_MODEL:-}" ]] || missing+=("LLM_MODEL (the model's name, e.g. llama3.2)")
if ((${#missing[@]})); then
  for m in "${missing[@]}"; do say "error: set $m"; done
  die "the agent needs a model: LLM_URL=http://127.0.0.1:11434/v1 LLM_MODEL=llama3.2 bash deploy/try-agent.sh"
fi
LLM_API_KEY_ENV="${LLM_API_KEY_ENV:-}"
if [[ -n "$LLM_API_KEY_ENV" ]]; then
  [[ "$LLM_API_KEY_ENV" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "LLM_API_KEY_ENV must be a variable's NAME, not $LLM_API_KEY_ENV"
  [[ -n "${!LLM_API_KEY_ENV:-}" ]] || die "LLM_API_KEY_ENV names $LLM_API_KEY_ENV, which is not set: export $LLM_API_KEY_ENV=…"
  export "${LLM_API_KEY_ENV?}"
fi
for h in "$AGENT_HANDLE" "$OWNER_HANDLE" "$USER_HANDLE"; do
  [[ "$h" =~ ^[a-z0-9-]{3,18}\.test$ ]] || die "the local PDS takes handles like name.test (3 to 18 letters, digits, dashes), not $h"
done
[[ "$AGENT_HANDLE" != "$OWNER_HANDLE" && "$AGENT_HANDLE" != "$USER_HANDLE" && "$OWNER_HANDLE" != "$USER_HANDLE" ]] \
  || die "AGENT_HANDLE, OWNER_HANDLE and USER_HANDLE must differ"
if [[ -n "${PERSONA_FILE:-}" ]]; then
  [[ -f "$PERSONA_FILE" ]] || die "PERSONA_FILE=$PERSONA_FILE is not a file"
  PERSONA_FILE="$(cd "$(dirname "$PERSONA_FILE")" && pwd)/$(basename "$PERSONA_FILE")"
fi
for tool in curl python3; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is needed (apt-get install $tool)"
done
# A model that does not answer at all is worth a word now; the agent retries it anyway.
if ! curl -sS --max-time 5 -o /dev/null "${LLM_URL%/}/models" 2>/dev/null; then
  say "warning: nothing answers at $LLM_URL yet (start your model server; the agent keeps trying)"
fi

# --- the binary ------------------------------------------------------------------------------
if [[ -n "${BIN_DIR:-}" ]]; then
  [[ -x "$BIN_DIR/druse-node" ]] || die "BIN_DIR=$BIN_DIR has no executable druse-node"
elif [[ -x "$ROOT/target/release/druse-node" ]]; then
  BIN_DIR="$ROOT/target/release"
elif [[ -x "$ROOT/target/debug/druse-node" ]]; then
  BIN_DIR="$ROOT/target/debug"
  say "using the debug binary in $BIN_DIR (build a release one with: cargo build --release -p druse-node)"
else
  say "no druse-node yet; building it: cargo build --release -p druse-node"
  (cd "$ROOT" && cargo build --release -p druse-node)
  BIN_DIR="$ROOT/target/release"
fi
BIN_DIR="$(cd "$BIN_DIR" && pwd)"
NODE="$BIN_DIR/druse-node"

# --- the session's directory -----------------------------------------------------------------
OWN_POINTER=false
if [[ -z "${TRY_DIR:-}" ]]; then
  TRY_DIR="$(mktemp -d "${TMPDIR:-/tmp}/druse-try-agent.XXXXXX")"
  OWN_POINTER=true
fi
mkdir -p "$TRY_DIR"
TRY_DIR="$(cd "$TRY_DIR" && pwd)"
if [[ -f "$TRY_DIR/session.env" ]]; then
  old_pid="$(sed -n 's/^TRY_PID=//p' "$TRY_DIR/session.env")"
  if [[ -n "$old_pid" ]] && kill -0 "$old_pid" 2>/dev/null; then
    die "a session already runs in $TRY_DIR (pid $old_pid)"
  fi
  rm -f "$TRY_DIR/session.env"
fi
DATA_DIR="$TRY_DIR/node"
# Each start is a new local network (new accounts and DIDs): an old data dir would not fit it.
if [[ -d "$DATA_DIR" ]] && [[ -n "$(ls -A "$DATA_DIR")" ]]; then
  die "$DATA_DIR holds an earlier session's data; choose a new TRY_DIR or move it away"
fi
mkdir -p "$DATA_DIR"
NODE_LOG="$TRY_DIR/node.log"
NET_OUT="$TRY_DIR/atproto.out"
NET_LOG="$TRY_DIR/atproto.log"
CONFIG="$TRY_DIR/node.toml"

# --- starting and stopping -------------------------------------------------------------------
NODE_PID=""
NET_PID=""
NET_IN=""

stop_all() {
  local code="${1:-0}"
  trap - INT TERM EXIT
  local status
  if [[ -n "$NODE_PID" ]]; then
    say "stopping druse-node (pid $NODE_PID) with SIGTERM"
    kill -TERM "$NODE_PID" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$NODE_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    if kill -0 "$NODE_PID" 2>/dev/null; then
      say "druse-node did not stop in ${STOP_TIMEOUT}s; sending SIGKILL"
      kill -KILL "$NODE_PID" 2>/dev/null || true
    fi
    status=0
    wait "$NODE_PID" 2>/dev/null || status=$?
    say "druse-node exited with status $status"
  fi
  if [[ -n "$NET_PID" ]]; then
    say "stopping the local network (pid $NET_PID); it removes its PostgreSQL state"
    # Closing its standard input stops it. No SIGTERM unless it hangs: it may be removing its
    # state already (after a Ctrl-C, which it got too), and a signal would cut that short.
    if [[ -n "$NET_IN" ]]; then exec {NET_IN}>&-; fi
    local deadline=$((SECONDS + 60))
    while kill -0 "$NET_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    if kill -0 "$NET_PID" 2>/dev/null; then
      say "the network did not stop in 60s; sending SIGTERM"
      kill -TERM "$NET_PID" 2>/dev/null || true
      deadline=$((SECONDS + 30))
      while kill -0 "$NET_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    fi
    if kill -0 "$NET_PID" 2>/dev/null; then
      say "the network did not stop; sending SIGKILL (its state may be left in /tmp/druse-atproto.*)"
      kill -KILL "$NET_PID" 2>/dev/null || true
    fi
    status=0
    wait "$NET_PID" 2>/dev/null || status=$?
    say "the local network exited with status $status"
  fi
  rm -f "$TRY_DIR/session.env"
  if [[ "$OWN_POINTER" == true && -f "$POINTER" && "$(cat "$POINTER" 2>/dev/null)" == "$TRY_DIR" ]]; then
    rm -f "$POINTER"
  fi
  say "the node's data dir is $DATA_DIR; logs: $NODE_LOG (node), $NET_LOG (network)"
  exit "$code"
}
trap 'stop_all 130' INT
trap 'stop_all 143' TERM
trap 'stop_all $?' EXIT

# Prints the last lines of a log to stderr.
tail_log() {
  say "the end of $1:"
  tail -n "${2:-30}" "$1" >&2 2>/dev/null || true
}

# --- 1. the local network ---------------------------------------------------------------------
say "checking the local ATProto network's install (bash tests/atproto/install.sh)"
bash "$ROOT/tests/atproto/install.sh" >/dev/null \
  || die "installing the local ATProto network failed (the first install needs npm, and apt-get as root for PostgreSQL); see above"

say "starting the local ATProto network (PLC, PDS, AppView, PostgreSQL); log $NET_LOG"
: >"$NET_OUT"
# Its standard input is a pipe this script holds: should the script die without stopping it,
# the pipe closes and the network stops and removes its state by itself.
exec {NET_IN}> >(exec bash "$ROOT/tests/atproto/start.sh" >"$NET_OUT" 2>"$NET_LOG")
NET_PID=$!
net_json=""
deadline=$((SECONDS + NET_TIMEOUT))
until net_json="$(sed -n 's/^DRUSE_ATPROTO //p' "$NET_OUT")" && [[ -n "$net_json" ]]; do
  if ! kill -0 "$NET_PID" 2>/dev/null; then
    tail_log "$NET_LOG"
    die "the local network exited before it was up"
  fi
  if ((SECONDS >= deadline)); then
    tail_log "$NET_LOG"
    die "the local network was not up within ${NET_TIMEOUT}s"
  fi
  sleep 0.3
done
json_get() { python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
TRY_PDS="$(json_get "$net_json" pds)"
TRY_APPVIEW="$(json_get "$net_json" appview)"
TRY_PLC="$(json_get "$net_json" plc)"
export TRY_PDS
say "the local network is up: PDS $TRY_PDS, AppView $TRY_APPVIEW, PLC $TRY_PLC"

# --- 2. the accounts --------------------------------------------------------------------------
new_password() { python3 -c 'import secrets; print(secrets.token_urlsafe(12))'; }
TRY_AGENT_HANDLE="$AGENT_HANDLE" TRY_OWNER_HANDLE="$OWNER_HANDLE" TRY_USER_HANDLE="$USER_HANDLE"
TRY_AGENT_PASSWORD="$(new_password)" TRY_OWNER_PASSWORD="$(new_password)" TRY_USER_PASSWORD="$(new_password)"
TRY_AGENT_DID="$(atproto create-account "$TRY_AGENT_HANDLE" "$TRY_AGENT_PASSWORD" </dev/null {NET_IN}>&-)"
TRY_OWNER_DID="$(atproto create-account "$TRY_OWNER_HANDLE" "$TRY_OWNER_PASSWORD" </dev/null {NET_IN}>&-)"
TRY_USER_DID="$(atproto create-account "$TRY_USER_HANDLE" "$TRY_USER_PASSWORD" </dev/null {NET_IN}>&-)"
say "created @$TRY_AGENT_HANDLE, @$TRY_OWNER_HANDLE and @$TRY_USER_HANDLE on the local PDS"

# --- 3. the node's config ---------------------------------------------------------------------
# A TOML string: JSON's escapes are TOML's.
toml_str() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }
PASSWORD_ENV=DRUSE_TRY_AGENT_PASSWORD
{
  echo "# Written by deploy/try-agent.sh for one session on a local ATProto network."
  echo "# The agent's password is not here: druse-node reads it from \$$PASSWORD_ENV."
  echo "[store]"
  echo "data_dir = $(toml_str "$DATA_DIR")"
  echo
  echo "[p2p]"
  echo "mdns = false"
  echo
  echo "[agent]"
  echo "enabled = true"
  echo "poll_interval = $(toml_str "$POLL_INTERVAL")"
  if [[ -n "${PERSONA_FILE:-}" ]]; then echo "persona_file = $(toml_str "$PERSONA_FILE")"; fi
  if [[ -n "${AGENT_EXTRA:-}" ]]; then printf '%s\n' "$AGENT_EXTRA"; fi
  echo
  echo "[agent.bluesky]"
  echo "service = $(toml_str "$TRY_PDS")"
  echo "handle = $(toml_str "$TRY_AGENT_HANDLE")"
  echo "password_env = $(toml_str "$PASSWORD_ENV")"
  echo "owner = $(toml_str "$TRY_OWNER_HANDLE")"
  echo
  echo "[agent.llm]"
  echo "base_url = $(toml_str "${LLM_URL%/}")"
  echo "model = $(toml_str "$LLM_MODEL")"
  echo "api_key_env = $(toml_str "$LLM_API_KEY_ENV")"
  echo "timeout = $(toml_str "$LLM_TIMEOUT")"
} >"$CONFIG"
say "wrote $CONFIG"

# --- 4. the node ------------------------------------------------------------------------------
TRY_API="http://$TRY_HOST:$API_PORT"
TRY_METRICS="http://$TRY_HOST:$METRICS_PORT/metrics"
# The node dies with this script, even a SIGKILLed one, where setpriv can arrange it.
pdeath=()
if command -v setpriv >/dev/null 2>&1 && setpriv --help 2>&1 | grep -q -- --pdeathsig; then
  pdeath=(setpriv --pdeathsig TERM --)
fi
say "starting $NODE (log $NODE_LOG)"
DRUSE_TRY_AGENT_PASSWORD="$TRY_AGENT_PASSWORD" RUST_LOG="${RUST_LOG:-info}" \
  "${pdeath[@]}" "$NODE" run \
  --config "$CONFIG" \
  --data-dir "$DATA_DIR" \
  --listen "/ip4/$TRY_HOST/tcp/$P2P_PORT,/ip4/$TRY_HOST/udp/$P2P_PORT/quic-v1" \
  --api-listen "$TRY_HOST:$API_PORT" \
  --metrics-listen "$TRY_HOST:$METRICS_PORT" \
  --mdns false \
  --model-download "$MODEL_DOWNLOAD" \
  --log-format "$LOG_FORMAT" \
  </dev/null >"$NODE_LOG" 2>&1 {NET_IN}>&- &
NODE_PID=$!

node_alive() {
  kill -0 "$NODE_PID" 2>/dev/null && return 0
  tail_log "$NODE_LOG"
  die "druse-node exited during its start"
}
deadline=$((SECONDS + READY_TIMEOUT))
until curl -fsS --max-time 2 "$TRY_API/healthz" >/dev/null 2>&1; do
  node_alive
  if ((SECONDS >= deadline)); then
    tail_log "$NODE_LOG"
    die "druse-node did not answer $TRY_API/healthz within ${READY_TIMEOUT}s"
  fi
  sleep 0.3
done
say "druse-node answers on $TRY_API; waiting for its agent to log in"
deadline=$((SECONDS + READY_TIMEOUT))
agent_state() {
  curl -fsS --max-time 2 "$TRY_API/v1/agent" 2>/dev/null \
    | python3 -c 'import json, sys; s = json.load(sys.stdin); print(s.get("state", ""), s.get("last_error") or "")' \
      2>/dev/null || true
}
state="$(agent_state)"
until [[ "$state" == running* ]]; do
  node_alive
  if ((SECONDS >= deadline)); then
    tail_log "$NODE_LOG"
    die "the agent is not running after ${READY_TIMEOUT}s (state: ${state:-none})"
  fi
  sleep 0.3
  state="$(agent_state)"
done

# --- 5. the session, and what to do next ------------------------------------------------------
{
  for var in TRY_PID TRY_DIR TRY_PDS TRY_APPVIEW TRY_PLC TRY_API TRY_METRICS TRY_NODE_PID TRY_NET_PID \
    TRY_DATA_DIR TRY_NODE_LOG TRY_NET_LOG TRY_BIN \
    TRY_AGENT_HANDLE TRY_AGENT_DID TRY_AGENT_PASSWORD TRY_OWNER_HANDLE TRY_OWNER_DID TRY_OWNER_PASSWORD \
    TRY_USER_HANDLE TRY_USER_DID TRY_USER_PASSWORD; do
    case "$var" in
      TRY_PID) value=$$ ;;
      TRY_NODE_PID) value=$NODE_PID ;;
      TRY_NET_PID) value=$NET_PID ;;
      TRY_DATA_DIR) value=$DATA_DIR ;;
      TRY_NODE_LOG) value=$NODE_LOG ;;
      TRY_NET_LOG) value=$NET_LOG ;;
      TRY_BIN) value=$NODE ;;
      *) value="${!var}" ;;
    esac
    printf '%s=%q\n' "$var" "$value"
  done
} >"$TRY_DIR/session.env.tmp"
chmod 600 "$TRY_DIR/session.env.tmp"
prefix=""
if [[ "$OWN_POINTER" == true ]]; then
  mkdir -p "$(dirname "$POINTER")"
  printf '%s\n' "$TRY_DIR" >"$POINTER"
else
  prefix="TRY_DIR=$(printf '%q' "$TRY_DIR") "
fi
me="$ROOT/deploy/try-agent.sh"
[[ "$PWD" == "$ROOT" ]] && me="deploy/try-agent.sh"
{
  cat <<EOF

The druse agent is up on a local Bluesky, thinking with $LLM_MODEL at $LLM_URL.
  accounts on the local PDS $TRY_PDS (passwords for this session only):
$(printf '    %-6s %-24s %-34s password %s\n' \
    agent "@$TRY_AGENT_HANDLE" "$TRY_AGENT_DID" "$TRY_AGENT_PASSWORD" \
    owner "@$TRY_OWNER_HANDLE" "$TRY_OWNER_DID" "$TRY_OWNER_PASSWORD" \
    you "@$TRY_USER_HANDLE" "$TRY_USER_DID" "$TRY_USER_PASSWORD")
  node     api $TRY_API  metrics $TRY_METRICS  (pid $NODE_PID)
           config $CONFIG, data $DATA_DIR, log $NODE_LOG
  network  AppView $TRY_APPVIEW, PLC $TRY_PLC, log $NET_LOG

Talk to it, from another terminal:
  ${prefix}$me say "hello @$TRY_AGENT_HANDLE, what do you know about tide pools?"
  ${prefix}$me reply "and when is the best time to visit one?"   # goes on in its thread
  ${prefix}$me replies                      # your threads, with every answer
  ${prefix}$me say "@$TRY_AGENT_HANDLE please follow @$TRY_OWNER_HANDLE"   # the agent asks its owner first:
  ${prefix}$me approve                      # as @$TRY_OWNER_HANDLE, like its approval request
  ${prefix}$me status                       # the agent's status: polls, replies, pending requests
  $NODE agent log --api $TRY_API --data-dir $DATA_DIR   # what the model was shown and did
  tail -f $NODE_LOG

Press Ctrl-C (or send SIGTERM to pid $$) to stop the agent and the network.
EOF
} >&2
# The session is ready once what to do next is on the screen: the other commands, and anything
# that waits for this file, find it only then.
mv "$TRY_DIR/session.env.tmp" "$TRY_DIR/session.env"

# --- 6. run until a signal, or until the node or the network dies ----------------------------
while :; do
  if ! kill -0 "$NODE_PID" 2>/dev/null; then
    status=0
    wait "$NODE_PID" 2>/dev/null || status=$?
    NODE_PID=""
    say "druse-node exited on its own with status $status"
    tail_log "$NODE_LOG"
    stop_all 1
  fi
  if ! kill -0 "$NET_PID" 2>/dev/null; then
    status=0
    wait "$NET_PID" 2>/dev/null || status=$?
    NET_PID=""
    say "the local network exited on its own with status $status"
    tail_log "$NET_LOG"
    stop_all 1
  fi
  # `sleep` in the background and `wait` on it, so a signal is handled at once.
  sleep 1 {NET_IN}>&- &
  wait $! 2>/dev/null || true
done
