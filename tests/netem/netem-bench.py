#!/usr/bin/env python3
"""netem-bench: a druse swarm on a network with real latency and loss (issue 30, item 4).

Starts one `druse-mgmt` and N `druse-node` processes (default 30), each in its own Linux network
namespace with a veth link to one switch namespace, gives every link a one-way delay drawn from
20-150 ms with jitter and 1% loss, and measures:

  * the links' round-trip times (ICMP echo between namespaces: p50, p99, max, loss);
  * publish -> stored on every node, and weather -> halted on every node (p50 / p99);
  * a partition made with `ip neigh` (each side's addresses pinned to a MAC that goes nowhere)
    and healed: heal -> every node holds every listing published during it;
  * churn: a tenth of the edges SIGKILLed and restarted every period while listings are published
    throughout; every acknowledged listing must end up on every node (nothing lost), and the time
    to converge after the churn stops.

The delay and loss come from `tc netem` on each node's veth when the kernel has netem; a kernel
without it (CONFIG_NET_SCH_NETEM unset, as on the 2-core development VM) gets the same model
from a userspace switch in the switch namespace: this script, run as `--switch-daemon`, forwards
frames between the veths over AF_PACKET sockets, delaying and dropping what each node sends.

Run as root; out of CI. Everything it makes is named `dn-*` (namespaces, interfaces) and removed
on exit, on Ctrl-C and on SIGTERM; `--cleanup` removes what an interrupted run (SIGKILL) left.
See tests/netem/README.md.
"""

import argparse
import atexit
import concurrent.futures as cf
import ctypes
import fcntl
import heapq
import http.client
import json
import os
import random
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

PREFIX = "dn-"
SW_NS = "dn-sw"
BRIDGE = "dn-br"
NODE_IF = "dn-eth"
API_PORT = 7700
METRICS_PORT = 9464
P2P_PORT = 4001
CRYSTALS_TOPIC = "druse/crystals/1"
MAX_NODES = 250  # mgmt + edges, on 10.77.0.0/24

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def ns_name(i):
    return f"dn-n{i}"


def port_if(i):
    return f"dn-p{i}"


def addr(i):
    return f"10.77.0.{i + 1}"


def node_name(i):
    return "mgmt" if i == 0 else f"edge-{i}"


T0 = time.monotonic()


def log(msg):
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def run(cmd, check=True, quiet=False):
    """Runs a command (a list); returns CompletedProcess. Never hangs: 30 s bound."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    if not quiet and p.returncode != 0:
        pass
    return p


def pct(samples, q):
    """Nearest-rank percentile of a non-empty list."""
    s = sorted(samples)
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 100)) - 1))
    return s[k]


# --------------------------------------------------------------------------------------------
# Namespaces: threads that live in a node's namespace (API calls, pings, ioctls)
# --------------------------------------------------------------------------------------------

def setns_net(name):
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns {name}: {os.strerror(e)}")
    finally:
        os.close(fd)


class NsExec:
    """A small thread pool whose threads have joined one network namespace: sockets they create
    (HTTP to the node's 127.0.0.1 API, raw ICMP) live there."""

    def __init__(self, ns, workers=3):
        self.ns = ns
        self.pool = cf.ThreadPoolExecutor(max_workers=workers, initializer=setns_net, initargs=(ns,),
                                          thread_name_prefix=ns)

    def submit(self, fn, *a, **kw):
        return self.pool.submit(fn, *a, **kw)

    def call(self, fn, *a, timeout=60, **kw):
        return self.pool.submit(fn, *a, **kw).result(timeout=timeout)

    def close(self):
        self.pool.shutdown(wait=False, cancel_futures=True)


def http_json(method, path, body=None, token=None, timeout=5.0, port=API_PORT):
    """One HTTP request to 127.0.0.1:port in the calling thread's namespace.
    Returns (status, parsed JSON or text); raises OSError on connection failure."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        if token:
            headers["authorization"] = f"Bearer {token}"
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw) if raw else None
        except ValueError:
            return r.status, raw.decode(errors="replace")
    finally:
        conn.close()


def icmp_checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return (~s) & 0xFFFF


def icmp_ping(dst, count, interval, timeout, ident):
    """ICMP echo from the calling thread's namespace; returns a list of RTTs in ms (None = lost)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.settimeout(0.2)
    out = []
    try:
        for seq in range(count):
            hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
            payload = b"druse-netem-bench".ljust(32, b".")
            pkt = struct.pack("!BBHHH", 8, 0, icmp_checksum(hdr + payload), ident, seq) + payload
            t = time.monotonic()
            rtt = None
            try:
                s.sendto(pkt, (dst, 0))
            except OSError:  # e.g. no route: counted as lost
                out.append(None)
                time.sleep(interval)
                continue
            while time.monotonic() - t < timeout:
                try:
                    data, src = s.recvfrom(2048)
                except socket.timeout:
                    continue
                ihl = (data[0] & 0x0F) * 4
                typ, _code, _c, rid, rseq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
                if typ == 0 and rid == ident and rseq == seq and src[0] == dst:
                    rtt = (time.monotonic() - t) * 1000
                    break
            out.append(rtt)
            time.sleep(interval)
    finally:
        s.close()
    return out


def ethtool_off(ifname):
    """Turns off TX checksum offload, scatter-gather, TSO and GSO on ifname (calling thread's
    namespace), so frames read from the peer with AF_PACKET are whole, checksummed, MTU-sized."""
    SIOCETHTOOL = 0x8946
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for cmd in (0x24, 0x1F, 0x19, 0x17):  # SGSO, STSO, SSG, STXCSUM
            buf = ctypes.create_string_buffer(struct.pack("II", cmd, 0))
            ifr = struct.pack("16sP", ifname.encode(), ctypes.addressof(buf)).ljust(40, b"\0")
            try:
                fcntl.ioctl(s.fileno(), SIOCETHTOOL, ifr)
            except OSError:
                pass
    finally:
        s.close()


# --------------------------------------------------------------------------------------------
# The userspace switch (a kernel without sch_netem)
# --------------------------------------------------------------------------------------------

def switch_daemon(cfg_path):
    """Forwards Ethernet frames between the switch-side veths, delaying each frame by its source
    link's delay (uniform jitter, per-link FIFO order kept) and dropping with its loss rate.
    Runs inside the switch namespace (started with `ip netns exec dn-sw`)."""
    cfg = json.load(open(cfg_path))
    rng = random.Random(cfg["seed"])
    ports = cfg["ports"]
    SOL_PACKET, PACKET_IGNORE_OUTGOING, PACKET_STATISTICS = 263, 23, 6
    ETH_P_ALL = 0x0003
    socks, fd_port = [], {}
    for i, p in enumerate(ports):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:
            s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        except OSError:
            pass
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        s.bind((p["ifname"], 0))
        s.setblocking(False)
        socks.append(s)
        fd_port[s.fileno()] = i
    own = set()
    for p in ports:
        try:
            with open(f"/sys/class/net/{p['ifname']}/address") as f:
                own.add(bytes.fromhex(f.read().strip().replace(":", "")))
        except OSError:
            pass
    delay = [p["delay_ms"] / 1000.0 for p in ports]
    jitter = [p["jitter_ms"] / 1000.0 for p in ports]
    loss = [p["loss"] for p in ports]
    last_due = [0.0] * len(ports)
    macs = {}
    heap = []
    seq = 0
    st = {"rx": 0, "lost": 0, "tx": 0, "tx_err": 0, "oversize": 0, "outgoing": 0, "to_switch": 0}
    ep = select.epoll()
    for s in socks:
        ep.register(s.fileno(), select.EPOLLIN)
    stop = [False]

    def on_sig(*_):
        stop[0] = True

    signal.signal(signal.SIGTERM, on_sig)
    signal.signal(signal.SIGINT, on_sig)
    kdrops = [0]

    def read_kernel_drops():
        # PACKET_STATISTICS resets the socket's counters when read, so they are summed here.
        for s in socks:
            try:
                _p, d = struct.unpack("II", s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
                kdrops[0] += d
            except OSError:
                pass

    read_kernel_drops()
    print("ready", flush=True)
    period = 10.0
    next_report = time.monotonic() + period
    last = (time.monotonic(), time.process_time(), 0)
    while not stop[0]:
        now = time.monotonic()
        timeout = min(1.0, max(0.0, heap[0][0] - now)) if heap else 1.0
        try:
            events = ep.poll(timeout)
        except InterruptedError:
            continue
        for fd, _ev in events:
            i = fd_port[fd]
            s = socks[i]
            for _ in range(256):
                try:
                    frame, a = s.recvfrom(65536)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break
                if a[2] == 4:  # PACKET_OUTGOING (a kernel without PACKET_IGNORE_OUTGOING)
                    st["outgoing"] += 1
                    continue
                st["rx"] += 1
                if len(frame) > 1514:
                    st["oversize"] += 1
                if frame[0:6] in own:  # addressed to the switch itself (the partition): consumed
                    st["to_switch"] += 1
                    continue
                macs[frame[6:12]] = i
                if loss[i] > 0 and rng.random() < loss[i]:
                    st["lost"] += 1
                    continue
                t = time.monotonic()
                d = delay[i] + (rng.uniform(-jitter[i], jitter[i]) if jitter[i] > 0 else 0.0)
                due = max(last_due[i], t + max(0.0, d))
                last_due[i] = due
                seq += 1
                heapq.heappush(heap, (due, seq, i, frame))
        now = time.monotonic()
        while heap and heap[0][0] <= now:
            _due, _s, i, frame = heapq.heappop(heap)
            dst = frame[0:6]
            if dst[0] & 1 or dst not in macs:
                targets = [j for j in range(len(socks)) if j != i]
            else:
                targets = [macs[dst]]
            for j in targets:
                try:
                    socks[j].send(frame)
                    st["tx"] += 1
                except OSError:
                    st["tx_err"] += 1
        if now >= next_report:
            next_report = now + period
            read_kernel_drops()
            cpu = time.process_time()
            fps = (st["rx"] - last[2]) / (now - last[0])
            busy = 100.0 * (cpu - last[1]) / (now - last[0])
            last = (now, cpu, st["rx"])
            st["kernel_rx_drops"] = kdrops[0]
            st["peak_rx_per_s"] = max(st.get("peak_rx_per_s", 0), round(fps))
            st["peak_cpu_pct"] = max(st.get("peak_cpu_pct", 0), round(busy))
            print(f"switch: {fps:.0f} frames/s received, {busy:.0f}% of a core; {json.dumps(st)} "
                  f"queued {len(heap)}", flush=True)
    read_kernel_drops()
    st["kernel_rx_drops"] = kdrops[0]
    print(f"switch final: {json.dumps(st)}", flush=True)


# --------------------------------------------------------------------------------------------
# Cleanup
# --------------------------------------------------------------------------------------------

def list_our_netns():
    p = run(["ip", "netns", "list"], check=False)
    out = []
    for line in p.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(PREFIX):
            out.append(name)
    return out


def cleanup_leftovers(verbose=True):
    """Kills every process inside a dn-* namespace, deletes the namespaces (their veths and the
    bridge go with them) and any dn-* link left in the root namespace."""
    names = list_our_netns()
    killed = 0
    for ns in names:
        p = run(["ip", "netns", "pids", ns], check=False)
        for pid in p.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, ValueError):
                pass
    for ns in names:
        run(["ip", "netns", "del", ns], check=False)
    links = 0
    p = run(["ip", "-o", "link", "show"], check=False)
    for line in p.stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith(PREFIX):
                run(["ip", "link", "del", name], check=False)
                links += 1
    if verbose:
        print(f"cleanup: {len(names)} namespace(s) deleted, {killed} process(es) killed, {links} root link(s) deleted",
              flush=True)
    return names


# --------------------------------------------------------------------------------------------
# The bench
# --------------------------------------------------------------------------------------------

class Node:
    def __init__(self, i, data, bin_path, extra):
        self.i = i
        self.name = node_name(i)
        self.ns = ns_name(i)
        self.data = data
        self.bin = bin_path
        self.extra = extra
        self.proc = None
        self.logf = None
        self.token = None
        self.ex = None
        self.up = False
        self.starts = 0

    def start(self, tmp, env):
        self.logf = open(os.path.join(tmp, f"{self.name}.log"), "ab")
        self.starts += 1
        self.logf.write(f"\n=== start {self.starts} at {time.strftime('%H:%M:%S')} ===\n".encode())
        self.logf.flush()
        cmd = ["ip", "netns", "exec", self.ns, self.bin, "run", "--data-dir", self.data] + self.extra
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.logf, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)
        self.up = True

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        self.up = False
        if self.alive():
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def stop(self, timeout=10):
        self.up = False
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        if self.logf:
            self.logf.close()
            self.logf = None

    def api(self, method, path, body=None, auth=False, timeout=5.0):
        """An API call from this node's namespace (blocking the caller)."""
        return self.ex.call(http_json, method, path, body, self.token if auth else None, timeout,
                            timeout=timeout + 5)


class Bench:
    def __init__(self, args):
        self.a = args
        self.rng = random.Random(args.seed)
        self.tmp = None
        self.nodes = []
        self.switch = None
        self.switch_log = None
        self.emulator = None
        self.delays = []
        self.execs = {}
        self.results = {}
        self.cleaned = False
        self.neigh_saved = None
        self.published = {}  # cid -> (name, node)
        self.run_tag = f"{os.getpid()}"

    # ---- setup -------------------------------------------------------------------------
    def sh_ns(self, ns, *cmd, check=True):
        return run(["ip", "netns", "exec", ns] + list(cmd), check=check)

    def raise_neigh_table(self, n):
        """The kernel's ARP table is one for every namespace, with its bounds (gc_thresh1-3,
        128/512/1024 by default) set in the root namespace only. Each node may hold an entry
        for every other and the switch one per node, so past about 30 nodes the table fills
        ("neighbor table overflow" in dmesg) and nodes cannot reach peers they have not met
        yet. Raised for the run, restored at the end."""
        base = "/proc/sys/net/ipv4/neigh/default/gc_thresh"
        need = 2 * (n + 1) * (n + 1)
        try:
            saved = [int(open(f"{base}{k}").read()) for k in (1, 2, 3)]
        except OSError as e:
            log(f"cannot read the ARP table bounds ({e}); leaving them")
            return
        if saved[2] >= need:
            return
        self.neigh_saved = saved
        for k, v in zip((1, 2, 3), (need // 4, need // 2, need)):
            with open(f"{base}{k}", "w") as f:
                f.write(str(max(v, saved[k - 1])))
        log(f"ARP table bounds (net.ipv4.neigh.default.gc_thresh1-3) raised from {saved} to "
            f"{[need // 4, need // 2, need]} for the run")

    def restore_neigh_table(self):
        if self.neigh_saved is None:
            return
        base = "/proc/sys/net/ipv4/neigh/default/gc_thresh"
        # Lowered from thresh1 up, so thresh1 <= thresh2 <= thresh3 holds at every step.
        for k in (1, 2, 3):
            try:
                with open(f"{base}{k}", "w") as f:
                    f.write(str(self.neigh_saved[k - 1]))
            except OSError as e:
                log(f"cannot restore gc_thresh{k} to {self.neigh_saved[k - 1]}: {e}")
        self.neigh_saved = None

    def setup_network(self):
        a = self.a
        n = a.nodes + 1
        self.raise_neigh_table(n)
        run(["ip", "netns", "add", SW_NS])
        self.sh_ns(SW_NS, "ip", "link", "set", "lo", "up")
        for i in range(n):
            ns = ns_name(i)
            run(["ip", "netns", "add", ns])
            run(["ip", "-n", SW_NS, "link", "add", port_if(i), "type", "veth", "peer", "name", NODE_IF, "netns", ns])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            run(["ip", "-n", ns, "addr", "add", f"{addr(i)}/24", "dev", NODE_IF])
            run(["ip", "-n", ns, "link", "set", NODE_IF, "up"])
            run(["ip", "-n", SW_NS, "link", "set", port_if(i), "up"])
            for path in ("/proc/sys/net/ipv6/conf/all/disable_ipv6", "/proc/sys/net/ipv6/conf/default/disable_ipv6"):
                self.sh_ns(ns, "sh", "-c", f"echo 1 > {path}", check=False)
            self.execs[ns] = NsExec(ns)
        # One-way delay of each node's link, jitter and loss.
        for i in range(n):
            d = a.delay_ms if a.delay_ms is not None else self.rng.uniform(a.delay_min, a.delay_max)
            self.delays.append((d, a.jitter_ms if a.jitter_ms is not None else d * a.jitter_pct / 100.0))
        want = a.emulator
        if want in ("auto", "netem"):
            d, j = self.delays[0]
            p = run(["ip", "netns", "exec", ns_name(0), "tc", "qdisc", "add", "dev", NODE_IF, "root", "netem",
                     "delay", f"{d:.1f}ms", f"{j:.1f}ms", "loss", f"{a.loss}%"], check=False)
            if p.returncode == 0:
                self.emulator = "netem"
            elif want == "netem":
                raise RuntimeError(f"tc netem is not available: {p.stderr.strip()}")
            else:
                self.emulator = "userspace"
                log(f"tc netem is not available ({p.stderr.strip()}); using the userspace switch")
        else:
            self.emulator = "userspace"
        if self.emulator == "netem":
            run(["ip", "-n", SW_NS, "link", "add", BRIDGE, "type", "bridge"])
            for i in range(n):
                run(["ip", "-n", SW_NS, "link", "set", port_if(i), "master", BRIDGE])
            run(["ip", "-n", SW_NS, "link", "set", BRIDGE, "up"])
            for i in range(1, n):
                d, j = self.delays[i]
                run(["ip", "netns", "exec", ns_name(i), "tc", "qdisc", "add", "dev", NODE_IF, "root", "netem",
                     "delay", f"{d:.1f}ms", f"{j:.1f}ms", "loss", f"{a.loss}%"])
        else:
            for i in range(n):
                self.execs[ns_name(i)].call(ethtool_off, NODE_IF)
            cfg = {"seed": a.seed, "ports": [{"ifname": port_if(i), "delay_ms": self.delays[i][0],
                                              "jitter_ms": self.delays[i][1], "loss": a.loss / 100.0}
                                             for i in range(n)]}
            cfg_path = os.path.join(self.tmp, "switch.json")
            with open(cfg_path, "w") as f:
                json.dump(cfg, f)
            self.switch_log = os.path.join(self.tmp, "switch.log")
            lf = open(self.switch_log, "wb")
            self.switch = subprocess.Popen(["ip", "netns", "exec", SW_NS, sys.executable, os.path.abspath(__file__),
                                            "--switch-daemon", cfg_path], stdout=lf, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True)
            self.switch_started = time.monotonic()
            deadline = time.monotonic() + 20
            while True:
                with open(self.switch_log) as f:
                    if "ready" in f.read():
                        break
                if self.switch.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the userspace switch did not start; see {self.switch_log}")
                time.sleep(0.1)
        self.read_port_macs()
        ds = [d for d, _ in self.delays]
        log(f"network: {n} namespaces on {SW_NS} via {'a bridge + tc netem' if self.emulator == 'netem' else 'the userspace switch'}; "
            f"one-way link delay min {min(ds):.0f} / median {pct(ds, 50):.0f} / max {max(ds):.0f} ms, "
            f"jitter {self.jitter_text()}, loss {a.loss:g}% on what each node sends")

    def delay_text(self):
        a = self.a
        if a.delay_ms is not None:
            return f"{a.delay_ms:g} ms on every link"
        return f"U({a.delay_min:g}, {a.delay_max:g}) ms per node"

    def jitter_text(self):
        a = self.a
        return f"±{a.jitter_ms:g} ms" if a.jitter_ms is not None else f"±{a.jitter_pct:g}%"

    def measure_rtt(self):
        a = self.a
        n = a.nodes + 1
        pairs = set()
        while len(pairs) < min(a.ping_pairs, n * (n - 1)):
            x, y = self.rng.sample(range(n), 2)
            pairs.add((x, y))
        futs = []
        for k, (x, y) in enumerate(sorted(pairs)):
            # One more echo than counted: the first one also waits for ARP.
            futs.append(((x, y), self.execs[ns_name(x)].submit(icmp_ping, addr(y), a.pings + 1, 0.2, 2.0,
                                                                (os.getpid() + k) & 0xFFFF)))
        rtts, lost, sent = [], 0, 0
        expected = []
        for (x, y), f in futs:
            r = f.result(timeout=a.pings * 3 + 30)[1:]
            sent += len(r)
            lost += sum(1 for v in r if v is None)
            rtts += [v for v in r if v is not None]
            expected.append(self.delays[x][0] + self.delays[y][0])
        res = {"pairs": len(pairs), "sent": sent, "lost": lost}
        if rtts:
            res.update(p50=pct(rtts, 50), p99=pct(rtts, 99), max=max(rtts), min=min(rtts),
                       expected_p50=pct(expected, 50))
            log(f"ping RTT over {len(pairs)} namespace pairs x {a.pings}: min {min(rtts):.1f} / p50 {res['p50']:.1f} / "
                f"p99 {res['p99']:.1f} / max {res['max']:.1f} ms, {lost}/{sent} lost "
                f"(configured: p50 of d_a+d_b = {res['expected_p50']:.1f} ms)")
        else:
            log(f"ping: no reply at all ({sent} sent)")
        return res

    def start_swarm(self):
        a = self.a
        env = {k: v for k, v in os.environ.items() if not k.startswith("DRUSE_")}
        env["DRUSE_MODEL_DOWNLOAD"] = "false"
        env.setdefault("RUST_LOG", "info")
        node_bin = os.path.join(a.bin_dir, "druse-node")
        mgmt_bin = os.path.join(a.bin_dir, "druse-mgmt")
        mdir = os.path.join(self.tmp, "mgmt")
        os.makedirs(mdir)
        run([mgmt_bin, "keygen", "--out", os.path.join(mdir, "node.key")])
        out = run([node_bin, "id", "--data-dir", mdir]).stdout
        ident = dict(line.split(None, 1) for line in out.splitlines() if line.strip())
        peer, pub = ident["peer_id"].strip(), ident["public_key"].strip()
        trust = os.path.join(self.tmp, "trust-list")
        with open(trust, "w") as f:
            f.write(f"# netem-bench\n{pub}  # mgmt\n")
        mcfg = os.path.join(self.tmp, "management.toml")
        with open(mcfg, "w") as f:
            # The detector would raise weather by itself when 30 peers join within a minute.
            f.write("[management.anomaly]\nenabled = false\n")
        bootstrap = f"/ip4/{addr(0)}/tcp/{P2P_PORT}/p2p/{peer}"
        for i in range(a.nodes + 1):
            data = mdir if i == 0 else os.path.join(self.tmp, node_name(i))
            os.makedirs(data, exist_ok=True)
            extra = ["--trust-list", trust,
                     "--listen", f"/ip4/{addr(i)}/tcp/{P2P_PORT},/ip4/{addr(i)}/udp/{P2P_PORT}/quic-v1",
                     "--api-listen", f"127.0.0.1:{API_PORT}", "--metrics-listen", f"127.0.0.1:{METRICS_PORT}",
                     "--mdns", "false", "--model-download", "false", "--log-format", "text"]
            extra += ["--config", mcfg] if i == 0 else ["--bootstrap", bootstrap]
            node = Node(i, data, mgmt_bin if i == 0 else node_bin, extra)
            node.ex = self.execs[node.ns]
            self.nodes.append(node)
        self.env = env
        t = time.monotonic()
        self.nodes[0].start(self.tmp, env)
        if not self.wait_ready([self.nodes[0]], a.start_timeout):
            raise RuntimeError(f"the management node did not start; see {self.tmp}/mgmt.log")
        # Start edges a few at a time: each start is CPU-heavy for a moment.
        edges = self.nodes[1:]
        for k in range(0, len(edges), a.start_batch):
            batch = edges[k:k + a.start_batch]
            for node in batch:
                node.start(self.tmp, env)
            bad = self.wait_ready(batch, a.start_timeout, fail=False)
            if bad:
                raise RuntimeError(f"{', '.join(n.name for n in bad)} did not answer /healthz within "
                                   f"{a.start_timeout}s (logs in {self.tmp})")
        log(f"{len(self.nodes)} processes answer /healthz after {time.monotonic() - t:.1f}s")
        for node in self.nodes:
            with open(os.path.join(node.data, "api.token")) as f:
                node.token = f.read().strip()
        # Wait for the gossip mesh: every node connected and meshed on the crystals topic.
        t = time.monotonic()
        pending = list(self.nodes)
        deadline = t + a.mesh_timeout
        last = {}
        while pending and time.monotonic() < deadline:
            still = []
            for n, body in self.statuses(pending).items():
                if body is None:
                    still.append(n)
                    continue
                peers, mesh = body.get("connected_peers", 0), body.get("mesh_peers", {}).get(CRYSTALS_TOPIC, 0)
                last[n.name] = (peers, mesh)
                if not (peers >= a.min_peers and mesh >= 1):
                    still.append(n)
            pending = still
            if pending:
                time.sleep(1)
        peers = [last.get(n.name, (0, 0))[0] or 0 for n in self.nodes]
        if pending:
            log(f"WARNING: {len(pending)} node(s) not meshed after {a.mesh_timeout}s: "
                + ", ".join(f"{n.name} {last.get(n.name)}" for n in pending))
        log(f"swarm meshed after {time.monotonic() - t:.1f}s; connected peers per node min {min(peers)} / "
            f"median {pct(peers, 50)} / max {max(peers)}")
        self.results["startup"] = {"mesh_s": time.monotonic() - t, "peers_min": min(peers),
                                   "peers_median": pct(peers, 50), "unmeshed": len(pending)}
        if a.settle > 0:
            # A swarm in use is older than one that has just meshed: its peer managers have
            # filled their slots. The trials then measure that swarm, not its first minute.
            log(f"letting the swarm settle for {a.settle:.0f}s")
            time.sleep(a.settle)
            settled = [(body or {}).get("connected_peers", 0) for body in self.statuses(self.nodes).values()]
            log(f"after settling: connected peers per node min {min(settled)} / median {pct(settled, 50)} / "
                f"max {max(settled)}")
            self.results["startup"].update({"settle_s": a.settle, "settled_peers_min": min(settled),
                                            "settled_peers_median": pct(settled, 50)})

    @staticmethod
    def statuses(nodes):
        """Each node's `GET /v1/status` body, asked of all at once; None where it did not answer
        200."""
        futs = {n: n.ex.submit(http_json, "GET", "/v1/status") for n in nodes}
        out = {}
        for n, f in futs.items():
            try:
                st, body = f.result(timeout=15)
                out[n] = body if st == 200 and isinstance(body, dict) else None
            except Exception:
                out[n] = None
        return out

    def wait_ready(self, nodes, timeout, fail=True):
        deadline = time.monotonic() + timeout

        def one(node):
            while time.monotonic() < deadline:
                if not node.alive():
                    return False
                try:
                    st, _ = http_json("GET", "/healthz", timeout=2)
                    if st == 200:
                        return True
                except OSError:
                    pass
                time.sleep(0.3)
            return False

        futs = [(n, n.ex.submit(one, n)) for n in nodes]
        bad = [n for n, f in futs if not f.result(timeout=timeout + 10)]
        return bad if not fail else not bad

    # ---- measuring helpers --------------------------------------------------------------
    def publish(self, node, name, timeout=10.0):
        """Publishes a listing on node; returns (content id or None, detail)."""
        body = {"name": name, "text": f"Netem bench skill {name}: retry a failed call with exponential backoff "
                                      f"and full jitter, then report the outcome.",
                "tags": ["netem-bench"]}
        try:
            st, resp = node.api("POST", "/v1/skills", body, auth=True, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - a node being killed, a timeout
            return None, f"{type(e).__name__}: {e}"
        if st == 201 and isinstance(resp, dict) and resp.get("content_id"):
            self.published[resp["content_id"]] = (name, node.name)
            return resp["content_id"], "ok"
        return None, f"HTTP {st}: {resp}"

    def wait_all(self, nodes, check, timeout, poll):
        """Polls check(node) (run in the node's namespace) on every node until true; returns
        {name: seconds since the call or None on timeout}."""
        start = time.monotonic()
        deadline = start + timeout

        def one(node):
            while time.monotonic() < deadline:
                try:
                    if check(node):
                        return time.monotonic() - start
                except Exception:
                    pass
                time.sleep(poll)
            return None

        futs = [(n, n.ex.submit(one, n)) for n in nodes]
        return {n.name: f.result(timeout=timeout + 30) for n, f in futs}

    @staticmethod
    def has_crystal(cid, received=None):
        """True once the node stores cid; records the node's `received_at` (Unix ms) in received."""
        def check(node):
            st, body = http_json("GET", f"/v1/crystals/{cid}", timeout=3)
            if st == 200 and received is not None and isinstance(body, dict):
                received[node.name] = body.get("received_at")
            return st == 200
        return check

    @staticmethod
    def halted_is(value, reason, received):
        """True once the node's halted state is `value`; when the last weather it applied is
        the one named `reason`, records when the node applied it (`received_at`, Unix ms) in
        received."""
        def check(node):
            st, body = http_json("GET", "/v1/weather", timeout=3)
            if st != 200 or body.get("halted") is not value:
                return False
            last = body.get("last") or {}
            if last.get("reason") == reason:
                received[node.name] = last.get("received_at")
            return True
        return check

    def slowest(self, received, t_wall, polled):
        """The slowest node's time (ms) from t_wall (Unix ms, just before the POST) by the
        nodes' own stamps in received; `polled` when a node gave none (an older node, or a
        stamp of 0)."""
        stamps = [v for v in received.values() if isinstance(v, (int, float)) and v > 0]
        return max(stamps) - t_wall if len(stamps) == len(self.nodes) else polled

    def holds_all(self, cids):
        """A check that is true once the node holds every content id in cids. It remembers what
        it confirmed per node (the store is durable, so a confirmed listing stays) and each
        listing's `received_at` on that node, in stamps[node][cid] (Unix ms)."""
        stamps = {}

        def check(node):
            seen = stamps.setdefault(node.name, {})
            st, body = http_json("GET", "/v1/status", timeout=5)
            if st != 200 or body.get("skills", 0) < len(cids):
                return False
            for cid in cids:
                if cid in seen:
                    continue
                st, body = http_json("GET", f"/v1/crystals/{cid}", timeout=3)
                if st != 200:
                    return False
                seen[cid] = body.get("received_at") if isinstance(body, dict) else None
            return True
        return check, stamps

    @staticmethod
    def converged_after(stamps, t_ref_wall):
        """From the nodes' own stamps: seconds from t_ref_wall (Unix ms) until each node had its
        last listing (0 when it had them all before); None when a stamp is missing."""
        out = {}
        for name, seen in stamps.items():
            vals = list(seen.values())
            if not vals or any(not isinstance(v, (int, float)) for v in vals):
                out[name] = None
            else:
                out[name] = max(0.0, (max(vals) - t_ref_wall) / 1000.0)
        return out

    def missing_report(self, cids, nodes):
        """For each node, the cids it does not hold (one pass, no waiting)."""
        out = {}
        for n in nodes:
            def one(_n=n):
                miss = []
                for cid in cids:
                    try:
                        st, _ = http_json("GET", f"/v1/crystals/{cid}", timeout=3)
                    except OSError:
                        st = 0
                    if st != 200:
                        miss.append(cid)
                return miss
            try:
                m = n.ex.call(one, timeout=120)
            except Exception as e:  # noqa: BLE001
                m = [f"(check failed: {e})"]
            if m:
                out[n.name] = m
        return out

    def summarise(self, samples, timeouts):
        if not samples:
            return {"n": 0, "timeouts": timeouts}
        return {"n": len(samples), "timeouts": timeouts, "p50": pct(samples, 50), "p99": pct(samples, 99),
                "max": max(samples)}

    # ---- phases -------------------------------------------------------------------------
    def phase_publish(self):
        a = self.a
        edges = self.nodes[1:]
        samples, polled_samples, timeouts = [], [], 0
        order = list(edges)
        self.rng.shuffle(order)
        for k in range(a.publishes):
            node = order[k % len(order)]
            t = time.monotonic()
            t_wall = time.time() * 1000
            cid, detail = self.publish(node, f"netem-pub-{k}")
            posted = time.monotonic() - t
            if not cid:
                log(f"publish {k} on {node.name} failed: {detail}")
                timeouts += 1
                continue
            received = {}
            res = self.wait_all(self.nodes, self.has_crystal(cid, received), a.sample_timeout, a.poll_ms / 1000)
            late = [name for name, v in res.items() if v is None]
            if late:
                timeouts += 1
                log(f"publish {k} on {node.name}: TIMED OUT after {a.sample_timeout}s; not on {', '.join(late)}")
            else:
                # The slowest node's time, from just before the POST: by the nodes' own
                # `received_at` stamps (one clock: every process runs on this machine), and
                # by polling (up to --poll-ms late).
                polled = (posted + max(res.values())) * 1000
                el = self.slowest(received, t_wall, polled)
                samples.append(el)
                polled_samples.append(polled)
                log(f"publish {k} on {node.name}: on every node after {el:.0f} ms (seen by polling: {polled:.0f} ms)")
            time.sleep(a.publish_gap)
        self.results["publish"] = self.summarise(samples, timeouts)
        self.results["publish_polled"] = self.summarise(polled_samples, timeouts)

    def broadcast_weather(self, level, duration, reason, halted, what):
        """Posts weather on the management node and times it until every node's halted state is
        `halted`: the milliseconds, or None when the POST failed or a node did not follow in time."""
        a = self.a
        t = time.monotonic()
        t_wall = time.time() * 1000
        st, resp = self.nodes[0].api("POST", "/v1/weather", {"level": level, "duration": duration, "reason": reason},
                                     auth=True)
        if st not in (200, 201, 202):
            log(f"{what}: POST answered {st}: {resp}")
            return None
        posted = time.monotonic() - t
        received = {}
        res = self.wait_all(self.nodes, self.halted_is(halted, reason, received), a.sample_timeout, a.poll_ms / 1000)
        late = [name for name, v in res.items() if v is None]
        if late:
            state = "not halted" if halted else "still halted"
            log(f"{what}: TIMED OUT after {a.sample_timeout}s; {state}: {', '.join(late)}")
            return None
        # As for listings: the slowest node's own stamp of when it applied this weather, from
        # just before the POST; by polling (up to --poll-ms late) when a node gave no stamp.
        polled = (posted + max(res.values())) * 1000
        ms = self.slowest(received, t_wall, polled)
        log(f"{what}: every node {'halted' if halted else 'free'} after {ms:.0f} ms (seen by polling: {polled:.0f} ms)")
        return ms

    def phase_weather(self):
        lock, lift, to_lock, to_lift = [], [], 0, 0
        for r in range(self.a.weathers):
            ms = self.broadcast_weather(0.9, "2m", f"netem bench {r}", True, f"weather {r}")
            if ms is None:
                to_lock += 1
            else:
                lock.append(ms)
            # Lifted whatever happened, so the next trial starts from a free swarm.
            ms = self.broadcast_weather(0.0, "1s", f"lift {r}", False, f"weather {r} lifted")
            if ms is None:
                to_lift += 1
            else:
                lift.append(ms)
            time.sleep(max(self.a.publish_gap, 1.0))
        self.results["weather"] = self.summarise(lock, to_lock)
        self.results["weather_lift"] = self.summarise(lift, to_lift)

    def set_partition(self, side_b, on):
        """Cuts (or heals) every path between the two sides with `ip neigh`: in each node's
        namespace, each address of the other side is pinned to the MAC of the node's own
        switch port, so what it sends there reaches the switch addressed to the switch itself
        and is dropped without a word (no error to the sender, as a real partition). Each side
        still talks within itself. Healing deletes the pinned entries (ARP resolves again)."""
        b = {n.i for n in side_b}
        for n in self.nodes:
            others = [m.i for m in self.nodes if (m.i in b) != (n.i in b)]
            if on:
                lines = [f"neigh replace {addr(j)} lladdr {self.port_macs[n.i]} dev {NODE_IF} nud permanent"
                         for j in others]
            else:
                lines = [f"neigh del {addr(j)} dev {NODE_IF}" for j in others]
            p = subprocess.run(["ip", "-n", n.ns, "-force", "-batch", "-"], input="\n".join(lines) + "\n",
                               text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
            if on and p.returncode != 0:
                raise RuntimeError(f"ip neigh in {n.ns}: {p.stderr.strip()}")

    def read_port_macs(self):
        self.port_macs = {}
        p = run(["ip", "-n", SW_NS, "-o", "link", "show"])
        for line in p.stdout.splitlines():
            parts = line.split()
            name = parts[1].rstrip(":").split("@")[0]
            if name.startswith("dn-p") and "link/ether" in parts:
                self.port_macs[int(name[4:])] = parts[parts.index("link/ether") + 1]

    def phase_partition(self):
        a = self.a
        edges = self.nodes[1:]
        k = max(1, len(edges) // 3)
        side_b = self.rng.sample(edges, k)
        side_a = [n for n in self.nodes if n not in side_b]
        log(f"partition: cutting {k} edge(s) ({', '.join(n.name for n in side_b)}) from the other "
            f"{len(side_a)} node(s) for {a.partition_secs}s")
        t_cut = time.monotonic()
        self.set_partition(side_b, True)
        # Check the cut with one ping across it.
        r = self.execs[side_b[0].ns].call(icmp_ping, addr(0), 2, 0.2, 1.0, 0x4242, timeout=30)
        if any(v is not None for v in r):
            log("WARNING: a ping crossed the partition")
        cids_a, cids_b = [], []
        per_side = a.partition_publishes
        slots = per_side * 2
        gap = a.partition_secs / (slots + 1)
        for s in range(slots):
            time.sleep(gap)
            side, lst = (side_a[1:], cids_a) if s % 2 == 0 else (side_b, cids_b)
            node = side[(s // 2) % len(side)]
            cid, detail = self.publish(node, f"netem-part-{s}")
            if cid:
                lst.append(cid)
            else:
                log(f"partition publish on {node.name} failed: {detail}")
        # Before healing: what each side holds of the other's listings (expected: nothing).
        rest = a.partition_secs - (time.monotonic() - t_cut)
        if rest > 0:
            time.sleep(rest)
        # Before healing, one pass: how many nodes of each side hold each side's listings.
        held = {}
        for label, lst in (("A", cids_a), ("B", cids_b)):
            for side_label, side in (("A", side_a), ("B", side_b)):
                miss = self.missing_report(lst, side)
                held[f"{label} on {side_label}"] = sum(len(lst) - len(miss.get(n.name, [])) for n in side)
        t_heal = time.monotonic()
        t_heal_wall = time.time() * 1000
        self.set_partition(side_b, False)
        log(f"partition healed after {t_heal - t_cut:.0f}s; {len(cids_a)} listing(s) published on side A "
            f"({len(side_a)} nodes), {len(cids_b)} on side B ({len(side_b)} nodes); node-listings held before "
            f"healing: {held}")
        cids = cids_a + cids_b
        check, stamps = self.holds_all(cids)
        res = self.wait_all(self.nodes, check, a.converge_timeout, a.converge_poll)
        late = [name for name, v in res.items() if v is None]
        out = {"cut": k, "side_a": len(cids_a), "side_b": len(cids_b), "hold_s": t_heal - t_cut, "held_before_heal": held}
        if late:
            out["timeout"] = a.converge_timeout
            out["missing"] = self.missing_report(cids, [n for n in self.nodes if n.name in late])
            log(f"partition: NOT converged {a.converge_timeout}s after healing; missing on {', '.join(late)}")
        else:
            by_stamp = self.converged_after(stamps, t_heal_wall)
            out["polled_s"] = max(res.values())
            if all(v is not None for v in by_stamp.values()):
                out["converged_s"] = max(by_stamp.values())
                out["median_node_s"] = pct(list(by_stamp.values()), 50)
            else:
                out["converged_s"] = out["polled_s"]
                out["median_node_s"] = pct(list(res.values()), 50)
            log(f"partition: every node holds all {len(cids)} listings {out['converged_s']:.2f}s after healing "
                f"(median node {out['median_node_s']:.2f}s; by the nodes' received_at stamps; confirmed by polling "
                f"{out['polled_s']:.1f}s after)")
        self.results["partition"] = out
        self.partition_cids = cids

    def phase_churn(self):
        a = self.a
        edges = self.nodes[1:]
        k = max(1, round(len(edges) * a.churn_fraction))
        acked, failed, killed_acks = [], [], []
        stop = threading.Event()
        lock = threading.Lock()
        interval = max(a.publish_interval, 60.0 / (8 * len(edges)))  # <= 8 a minute per node (limit: 10)
        log(f"churn: every {a.churn_period:g}s, {k} edge(s) SIGKILLed, down {a.churn_down:g}s, restarted; "
            f"for {a.churn_duration:g}s, publishing every {interval:g}s on a live edge")

        def publisher():
            j = 0
            rr = 0
            while not stop.is_set():
                with lock:
                    live = [n for n in edges if n.up]
                if live:
                    node = live[rr % len(live)]
                    rr += 1
                    cid, detail = self.publish(node, f"netem-churn-{j}")
                    if cid:
                        acked.append((cid, node.name))
                    else:
                        failed.append((node.name, detail))
                    j += 1
                stop.wait(interval)

        th = threading.Thread(target=publisher, daemon=True)
        t_start = time.monotonic()
        th.start()
        kills = 0
        restart_s = []
        try:
            while time.monotonic() - t_start < a.churn_duration:
                round_start = time.monotonic()
                victims = self.rng.sample(edges, k)
                with lock:
                    for v in victims:
                        v.up = False
                for v in victims:
                    if a.publish_before_kill:
                        # Acknowledged, then SIGKILLed at once: before gossip can have carried it far.
                        cid, detail = self.publish(v, f"netem-churn-lastword-{kills}")
                        if cid:
                            acked.append((cid, v.name))
                            killed_acks.append((cid, time.time() * 1000))
                        else:
                            failed.append((v.name, detail))
                    v.kill9()
                    kills += 1
                time.sleep(a.churn_down)
                for v in victims:
                    v.stop()  # close the old log handle
                    v.start(self.tmp, self.env)
                    v.up = False
                bad = self.wait_ready(victims, a.start_timeout, fail=False)
                ok = [v for v in victims if v not in bad]
                with lock:
                    for v in ok:
                        v.up = True
                restart_s.append(time.monotonic() - round_start - a.churn_down)
                if bad:
                    log(f"churn: {', '.join(v.name for v in bad)} did not come back within {a.start_timeout}s")
                log(f"churn round {len(restart_s)}: killed and restarted {', '.join(v.name for v in victims)} "
                    f"(ready {restart_s[-1]:.1f}s after restart); {len(acked)} acknowledged, {len(failed)} failed so far")
                rest = a.churn_period - (time.monotonic() - round_start)
                end_rest = a.churn_duration - (time.monotonic() - t_start)
                time.sleep(max(0.0, min(rest, end_rest)))
        finally:
            stop.set()
            th.join(timeout=30)
        t_stop = time.monotonic()
        t_stop_wall = time.time() * 1000
        down = [n for n in self.nodes if not n.alive()]
        if down:
            log(f"churn: {len(down)} node(s) not running at the end: {', '.join(n.name for n in down)}")
        cids = [c for c, _ in acked]
        log(f"churn stopped after {t_stop - t_start:.0f}s: {kills} kills, {len(acked)} publishes acknowledged, "
            f"{len(failed)} not; waiting for every node to hold every acknowledged listing")
        check, stamps = self.holds_all(cids)
        res = self.wait_all(self.nodes, check, a.converge_timeout, a.converge_poll)
        late = [name for name, v in res.items() if v is None]
        out = {"kills": kills, "acked_then_killed": len(killed_acks), "rounds": len(restart_s), "acked": len(acked), "failed": len(failed),
               "restart_ready_p50_s": pct(restart_s, 50) if restart_s else None,
               "failures": failed[:10]}
        if late:
            miss = self.missing_report(cids, [n for n in self.nodes if n.name in late])
            out["timeout"] = a.converge_timeout
            out["missing"] = {k2: len(v) for k2, v in miss.items()}
            lost = set()
            for v in miss.values():
                lost.update(v)
            out["lost"] = len(lost)
            log(f"churn: NOT converged {a.converge_timeout}s after the churn stopped; "
                + "; ".join(f"{k2} misses {len(v)}" for k2, v in miss.items()))
        else:
            by_stamp = self.converged_after(stamps, t_stop_wall)
            out["polled_s"] = max(res.values())
            if all(v is not None for v in by_stamp.values()):
                out["converged_s"] = max(by_stamp.values())
                out["median_node_s"] = pct(list(by_stamp.values()), 50)
            else:
                out["converged_s"] = out["polled_s"]
                out["median_node_s"] = pct(list(res.values()), 50)
            out["lost"] = 0
            spread = []
            for cid, t_ack in killed_acks:
                vals = [seen.get(cid) for seen in stamps.values()]
                if all(isinstance(v, (int, float)) for v in vals):
                    spread.append(max(0.0, (max(vals) - t_ack) / 1000.0))
            if spread:
                out["lastword_spread_p50_s"] = pct(spread, 50)
                out["lastword_spread_max_s"] = max(spread)
                log(f"churn: a listing acknowledged by a node SIGKILLed at once reached every node after p50 "
                    f"{pct(spread, 50):.2f}s, max {max(spread):.2f}s ({len(spread)} listings)")
            log(f"churn: every node holds all {len(cids)} acknowledged listings {out['converged_s']:.2f}s after the "
                f"churn stopped (median node {out['median_node_s']:.2f}s; by the nodes' received_at stamps; "
                f"confirmed by polling {out['polled_s']:.1f}s after); nothing lost")
        self.results["churn"] = out

    # ---- the report ---------------------------------------------------------------------
    def report(self):
        a = self.a
        r = self.results
        print()
        print(f"druse netem-bench: {a.nodes} druse-node + 1 druse-mgmt, each in its own namespace; emulator "
              f"{self.emulator}; one-way link delay {self.delay_text()}, jitter "
              f"{self.jitter_text()}, loss {a.loss:g}%; seed {a.seed}; {os.cpu_count()} CPUs, load "
              f"{open('/proc/loadavg').read().split()[0]}")
        rtt = r.get("rtt", {})
        if "p50" in rtt:
            print(f"links: ping RTT p50 {rtt['p50']:.1f} ms, p99 {rtt['p99']:.1f} ms, max {rtt['max']:.1f} ms "
                  f"({rtt['pairs']} pairs, {rtt['lost']}/{rtt['sent']} echoes lost)")
        print()
        if any(k in r for k in ("publish", "weather")):
            print("| measure                           | trials | timed out |    p50    |    p99    |    max    |")
            print("|-----------------------------------|--------|-----------|-----------|-----------|-----------|")
        for key, label in (("publish", "publish -> stored on every node"),
                           ("publish_polled", "  the same, seen by polling"),
                           ("weather", "weather -> every node halted"),
                           ("weather_lift", "weather lifted -> every node free")):
            s = r.get(key)
            if not s:
                continue
            if s["n"]:
                print(f"| {label:<33} | {s['n'] + s['timeouts']:>6} | {s['timeouts']:>9} | {s['p50']:>6.0f} ms | "
                      f"{s['p99']:>6.0f} ms | {s['max']:>6.0f} ms |")
            else:
                print(f"| {label:<33} | {s['timeouts']:>6} | {s['timeouts']:>9} |         - |         - |         - |")
        p = r.get("partition")
        if p:
            print()
            if "converged_s" in p:
                print(f"partition: {p['cut']} edges cut for {p['hold_s']:.0f}s, {p['side_a']} + {p['side_b']} listings "
                      f"published on the two sides; healed -> converged on every node: {p['converged_s']:.2f} s "
                      f"(median node {p['median_node_s']:.2f} s; confirmed by polling {p['polled_s']:.1f} s after)")
            else:
                print(f"partition: {p['cut']} edges cut for {p['hold_s']:.0f}s; NOT converged within {p['timeout']}s "
                      f"of healing: {json.dumps(p.get('missing'))}")
        c = r.get("churn")
        if c:
            print(f"churn: {c['rounds']} rounds, {c['kills']} SIGKILLs; {c['acked']} publishes acknowledged "
                  f"({c['acked_then_killed']} of them on a node SIGKILLed right after the answer), "
                  f"{c['failed']} refused or failed; restarted node ready p50 {c['restart_ready_p50_s'] or 0:.1f} s")
            if "lastword_spread_p50_s" in c:
                print(f"churn: a listing acknowledged by a node SIGKILLed at once was on every node after p50 "
                      f"{c['lastword_spread_p50_s']:.2f} s, max {c['lastword_spread_max_s']:.2f} s")
            if "converged_s" in c:
                print(f"churn: every acknowledged listing on every node {c['converged_s']:.2f} s after the churn "
                      f"stopped (median node {c['median_node_s']:.2f} s; confirmed by polling {c['polled_s']:.1f} s "
                      f"after); lost: 0")
            else:
                print(f"churn: NOT converged within {c['timeout']}s: {c['lost']} acknowledged listing(s) missing "
                      f"somewhere: {json.dumps(c.get('missing'))}")
        if self.switch_stats:
            print(self.switch_stats)
        if self.switch_cpu:
            cpu, wall = self.switch_cpu
            rx = None
            if self.switch_stats and "{" in self.switch_stats:
                try:
                    rx = json.loads(self.switch_stats[self.switch_stats.index("{"):]).get("rx")
                except ValueError:
                    pass
            mean = f"; {rx / wall:.0f} frames/s received on average" if rx else ""
            print(f"switch: {cpu:.0f} s of CPU in {wall:.0f} s ({100 * cpu / wall:.0f}% of one core){mean}")
        print()

    # ---- teardown -----------------------------------------------------------------------
    def teardown(self):
        if self.cleaned:
            return
        self.cleaned = True
        for node in self.nodes:
            if node.alive():
                try:
                    node.proc.terminate()
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 15
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    try:
                        node.proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        pass
            if node.logf:
                node.logf.close()
        if self.switch is not None and self.switch.poll() is None:
            self.switch.terminate()
            try:
                self.switch.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.switch.kill()
        for ex in self.execs.values():
            ex.close()
        cleanup_leftovers(verbose=True)
        self.restore_neigh_table()
        if self.tmp and os.path.isdir(self.tmp):
            if self.a.keep:
                print(f"data dirs and logs kept in {self.tmp}", flush=True)
            else:
                shutil.rmtree(self.tmp, ignore_errors=True)

    def teardown_switch(self):
        if self.switch is not None and self.switch.poll() is None:
            try:
                with open(f"/proc/{self.switch.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
                self.switch_cpu = (cpu, time.monotonic() - self.switch_started)
            except (OSError, ValueError, IndexError):
                pass
            self.switch.terminate()
            try:
                self.switch.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.switch.kill()

    def read_switch_stats(self):
        self.switch_stats = None
        if self.switch_log and os.path.exists(self.switch_log):
            lines = [line for line in open(self.switch_log) if line.startswith("switch")]
            if lines:
                self.switch_stats = lines[-1].strip()

    def main(self):
        a = self.a
        self.switch_stats = None
        self.switch_cpu = None
        self.tmp = tempfile.mkdtemp(prefix="dn-netem-bench.")
        log(f"temp dir {self.tmp}; binaries from {a.bin_dir}")
        self.setup_network()
        self.results["rtt"] = self.measure_rtt()
        if a.net_only:
            self.teardown_switch()
            self.read_switch_stats()
            self.report()
            return
        self.start_swarm()
        phases = set(a.phases.split(","))
        for name, fn in (("publish", self.phase_publish), ("weather", self.phase_weather),
                         ("partition", self.phase_partition), ("churn", self.phase_churn)):
            if name in phases:
                fn()
        # Stop the switch before the report so its final counters are in.
        for node in self.nodes:
            if node.alive():
                node.proc.terminate()
        for node in self.nodes:
            try:
                node.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                node.proc.kill()
        self.teardown_switch()
        self.read_switch_stats()
        self.report()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(self.results, f, indent=2, default=str)


def parse_args(argv):
    p = argparse.ArgumentParser(description="A druse swarm on a network with real latency and loss (run as root).")
    p.add_argument("--nodes", type=int, default=30, help="druse-node (edge) processes; one druse-mgmt is added (default 30)")
    p.add_argument("--bin-dir", default="/tmp/netem-bin", help="where druse-node and druse-mgmt are (default /tmp/netem-bin)")
    p.add_argument("--emulator", choices=["auto", "netem", "userspace"], default="auto",
                   help="tc netem on each veth, or the userspace switch (auto: netem when the kernel has it)")
    p.add_argument("--delay-min", type=float, default=20.0, help="ms (default 20)")
    p.add_argument("--delay-max", type=float, default=150.0, help="ms (default 150)")
    p.add_argument("--jitter-pct", type=float, default=10.0, help="jitter, %% of each link's delay (default 10)")
    p.add_argument("--delay-ms", type=float, help="one fixed one-way delay for every link, ms (instead of "
                                                  "--delay-min/--delay-max)")
    p.add_argument("--jitter-ms", type=float, help="jitter of every frame, ± ms (instead of --jitter-pct)")
    p.add_argument("--loss", type=float, default=1.0, help="%% of what each node sends that is lost (default 1)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ping-pairs", type=int, default=12, help="namespace pairs pinged (default 12)")
    p.add_argument("--pings", type=int, default=10, help="echoes per pair (default 10)")
    p.add_argument("--publishes", type=int, default=20, help="timed publishes (default 20)")
    p.add_argument("--weathers", type=int, default=5, help="timed weather broadcasts (default 5)")
    p.add_argument("--publish-gap", type=float, default=0.5, help="s between timed trials (default 0.5)")
    p.add_argument("--sample-timeout", type=float, default=60.0, help="s a publish or weather trial may take (default 60)")
    p.add_argument("--poll-ms", type=float, default=200.0,
                   help="how often each node is polled in a trial (default 200; the times come from the nodes' stamps)")
    p.add_argument("--partition-secs", type=float, default=60.0, help="how long the partition holds (default 60)")
    p.add_argument("--partition-publishes", type=int, default=3, help="publishes on each side (default 3)")
    p.add_argument("--churn-duration", type=float, default=600.0, help="s of churn (default 600)")
    p.add_argument("--churn-period", type=float, default=60.0, help="s between kill rounds (default 60)")
    p.add_argument("--churn-fraction", type=float, default=0.1, help="share of edges killed each round (default 0.1)")
    p.add_argument("--churn-down", type=float, default=5.0, help="s a killed node stays down (default 5)")
    p.add_argument("--no-publish-before-kill", dest="publish_before_kill", action="store_false",
                   help="do not publish one listing on each victim just before its SIGKILL")
    p.add_argument("--publish-interval", type=float, default=2.0, help="s between publishes during churn (default 2)")
    p.add_argument("--converge-timeout", type=float, default=600.0, help="s to wait for convergence (default 600)")
    p.add_argument("--converge-poll", type=float, default=0.25, help="s between convergence polls (default 0.25)")
    p.add_argument("--start-timeout", type=float, default=120.0, help="s for a node to answer /healthz (default 120)")
    p.add_argument("--start-batch", type=int, default=5, help="edges started at once (default 5)")
    p.add_argument("--mesh-timeout", type=float, default=180.0, help="s for every node to join the mesh (default 180)")
    p.add_argument("--settle", type=float, default=0.0,
                   help="s to wait after the swarm meshed, before the trials (default 0)")
    p.add_argument("--min-peers", type=int, default=1, help="connected peers a node needs before the trials (default 1)")
    p.add_argument("--phases", default="publish,weather,partition,churn", help="comma-separated (default: all four)")
    p.add_argument("--net-only", action="store_true", help="build the network, measure its RTTs, tear it down (no nodes)")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (data dirs, logs)")
    p.add_argument("--cleanup", action="store_true", help="remove what an interrupted run left (dn-* namespaces, "
                                                          "their processes and links) and exit")
    p.add_argument("--switch-daemon", metavar="CONFIG", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    return a


def main(argv):
    a = parse_args(argv)
    if a.switch_daemon:
        switch_daemon(a.switch_daemon)
        return 0
    if os.geteuid() != 0:
        print("netem-bench: must run as root (it makes network namespaces, veths and routes)", file=sys.stderr)
        return 2
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            print(f"netem-bench: `{tool}` (iproute2) is needed", file=sys.stderr)
            return 2
    if a.cleanup:
        cleanup_leftovers()
        return 0
    if not 1 <= a.nodes < MAX_NODES:
        print(f"netem-bench: --nodes must be 1..{MAX_NODES - 1}", file=sys.stderr)
        return 2
    for b in () if a.net_only else ("druse-node", "druse-mgmt"):
        if not os.access(os.path.join(a.bin_dir, b), os.X_OK):
            print(f"netem-bench: no executable {b} in {a.bin_dir} (--bin-dir)", file=sys.stderr)
            return 2
    left = list_our_netns()
    if left:
        print(f"netem-bench: dn-* namespaces exist ({', '.join(left[:5])}...): another run is going, or one was "
              f"killed; run `{sys.argv[0]} --cleanup` first", file=sys.stderr)
        return 2
    bench = Bench(a)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    # Installed explicitly: a shell starts background commands with SIGINT ignored, and Python
    # then would not turn it into KeyboardInterrupt.
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    atexit.register(bench.teardown)
    try:
        bench.main()
        return 0
    except KeyboardInterrupt as e:
        print(f"\nnetem-bench: interrupted ({e or 'SIGINT'}); cleaning up", file=sys.stderr, flush=True)
        return 130
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        print(f"netem-bench: failed: {e}", file=sys.stderr, flush=True)
        bench.a.keep = True if bench.tmp else bench.a.keep
        return 1
    finally:
        # Ignore further signals while cleaning up, so a second Ctrl-C cannot leave namespaces.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        bench.teardown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
