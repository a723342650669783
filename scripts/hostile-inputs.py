#!/usr/bin/env python3
"""Replays the hostile inputs of the hardening issue (18) against three brokers of a build on
loopback (ports 29000-29040 and 29990, folder /tmp/hostile), with a cluster secret: a forged
Raft vote and LeaderAndIsr, unsigned and signed by a broker; big client reads; 300 idle
connections to a broker with RLIMIT_NOFILE 256; a deleted metadata/ folder; garbage and
/dev/zero for `harness check`; a FIFO and a 10 MB file for `harness serve`. Prints each
answer, then checks every acknowledged record is still there.

    python3 scripts/hostile-inputs.py target/release/broker target/release/harness
"""
import hashlib, hmac, json, os, resource, shutil, signal, socket, struct, subprocess, sys, time
import urllib.request, urllib.error

if len(sys.argv) != 3:
    sys.exit("usage: hostile-inputs.py BROKER HARNESS")
BROKER = sys.argv[1]
HARNESS = sys.argv[2]
ROOT = "/tmp/hostile"
SECRET = os.urandom(32).hex()
shutil.rmtree(ROOT, ignore_errors=True)
os.makedirs(ROOT)

def ports(i):
    b = 29000 + 10 * i
    return b + 2, b + 3, b + 4

def config(i):
    c, r, m = ports(i)
    peers = "".join(f"[[brokers]]\nid = {j}\nreplication = \"127.0.0.1:{ports(j)[1]}\"\nmetadata = \"127.0.0.1:{ports(j)[2]}\"\n\n" for j in (1, 2, 3))
    return (f"broker_id = {i}\ndata_dir = \"{ROOT}/b{i}/data\"\nenable_failpoints = true\nmin_insync_replicas = 2\n"
            f"cluster_secret = \"{SECRET}\"\n\n[listeners]\nclient = \"127.0.0.1:{c}\"\nreplication = \"127.0.0.1:{r}\"\n"
            f"metadata = \"127.0.0.1:{m}\"\n\n{peers}")

procs = {}
def start(i, nofile=None):
    os.makedirs(f"{ROOT}/b{i}", exist_ok=True)
    with open(f"{ROOT}/b{i}/node.toml", "w") as f:
        f.write(config(i))
    def limit():
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    log = open(f"{ROOT}/b{i}/broker.log", "a")
    p = subprocess.Popen([BROKER, "--config", f"{ROOT}/b{i}/node.toml"], stdout=log, stderr=log, preexec_fn=limit)
    procs[i] = p
    return p

def sign(sender, method, path, body):
    m = hmac.new(bytes.fromhex(SECRET), b"peer-auth v1\n", hashlib.sha256)
    for part in (sender.encode(), method.encode(), path.encode(), body):
        m.update(struct.pack(">Q", len(part)))
        m.update(part)
    return {"x-cluster-sender": sender, "x-cluster-mac": m.hexdigest()}

def http(method, port, path, body=None, sender=None, timeout=30, raw=False):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    headers = {"content-type": "application/json"}
    if sender:
        headers.update(sign(sender, method, path, data or b""))
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read()
            return r.status, (text if raw else json.loads(text or b"null"))
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except Exception:
            return e.code, text.decode(errors="replace").strip()

def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024

def say(*a):
    print(*a, flush=True)

for i in (1, 2, 3):
    start(i, nofile=256 if i == 1 else None)
time.sleep(2)
for _ in range(100):
    s, a = http("POST", ports(1)[0], "/v1/topics", {"topic": "f", "partitions": 3, "replication_factor": 3})
    if s != 503:
        break
    time.sleep(0.2)
say("create topic f:", s, a)
acked = {0: {}, 1: {}, 2: {}}
def produce(p, value, port=None):
    for i in (1, 2, 3):
        s, a = http("POST", port or ports(i)[0], f"/v1/topics/f/partitions/{p}/records", {"value": value, "acks": "all"})
        if s == 200:
            acked[p][a["offset"]] = value
            return True
        if port:
            return False
    return False
for n in range(20):
    for p in (0, 1, 2):
        for _ in range(50):
            if produce(p, f"small-{p}-{n}"):
                break
            time.sleep(0.1)
big = "x" * 900_000
for n in range(60):
    produce(1, big + str(n))
say("acknowledged:", {p: len(v) for p, v in acked.items()})

# 1. The forged Raft vote.
vote = {"vote": {"leader_id": {"term": 18446744073709551615, "node_id": 99}, "committed": False},
        "last_log_id": {"leader_id": {"term": 18446744073709551615, "node_id": 99}, "index": 18446744073709551615}}
say("1. vote, unsigned:", *http("POST", ports(1)[2], "/raft/vote", vote))
say("1. vote, signed by broker-2 in its own name, term 2^64-1:", *http("POST", ports(1)[2], "/raft/vote",
    {"vote": {"leader_id": {"term": 18446744073709551615, "node_id": 2}, "committed": False},
     "last_log_id": {"leader_id": {"term": 18446744073709551615, "node_id": 2}, "index": 18446744073709551615}}, sender="broker-2"))
say("1. vote, signed by broker-2 as node 99:", *http("POST", ports(1)[2], "/raft/vote", vote, sender="broker-2"))
vote_file = open(f"{ROOT}/b1/data/metadata/vote", "rb").read() if os.path.exists(f"{ROOT}/b1/data/metadata/vote") else b""
say("   metadata/vote of broker 1 afterwards names node 99:", b"99" in vote_file, "; broker 1 metadata answers:", http("GET", ports(1)[0], "/v1/metadata")[0])

# 2. The forged LeaderAndIsr.
lai = {"topic": "ghost", "partition": 0, "controller_epoch": 4294967295, "leader": 1, "leader_epoch": 1, "isr": [1], "version": 0, "replicas": [1]}
say("2. LeaderAndIsr, unsigned:", *http("POST", ports(1)[1], "/v1/replication/leader-and-isr", lai))
say("2. LeaderAndIsr, signed by broker-2 (not the controller's word):", *http("POST", ports(1)[1], "/v1/replication/leader-and-isr", lai, sender="broker-2"))
lai2 = dict(lai, controller_epoch=1)
say("2. LeaderAndIsr, plausible epoch, unsigned:", *http("POST", ports(1)[1], "/v1/replication/leader-and-isr", lai2))
say("   ghost-0 on disk:", os.path.exists(f"{ROOT}/b1/data/ghost-0"))
s, a = http("POST", ports(2)[0], "/v1/topics", {"topic": "t2", "partitions": 1, "replication_factor": 3})
say("   a new topic afterwards:", s, a)

# 3. Big client reads.
leader = None
for i in (1, 2, 3):
    s, a = http("GET", ports(i)[0], "/v1/topics/f/partitions/1/records?offset=0", raw=True)
    if s == 200:
        leader = i
        say(f"3. default read of the big partition from broker {i}: {len(a)} bytes,",
            {k: v for k, v in json.loads(a).items() if k != "records"}, "records:", len(json.loads(a)["records"]))
        break
s, a = http("GET", ports(leader)[0], "/v1/topics/f/partitions/1/records?offset=0&max_bytes=100000000000")
say("3. max_bytes=1e11:", s, a if s != 200 else "200")
before = rss_mb(procs[leader].pid)
import threading
sizes = []
def reader():
    s, a = http("GET", ports(leader)[0], "/v1/topics/f/partitions/1/records?offset=0&max=1000&max_bytes=67108864", raw=True)
    sizes.append((s, len(a)))
t0 = time.time()
ts = [threading.Thread(target=reader) for _ in range(4)]
for t in ts: t.start()
s, a = http("POST", ports(leader)[0], "/v1/topics/f/partitions/1/records", {"value": "during", "acks": "all"})
during = time.time() - t0
peak = 0
while any(t.is_alive() for t in ts):
    peak = max(peak, rss_mb(procs[leader].pid)); time.sleep(0.02)
for t in ts: t.join()
say(f"3. four 64 MiB reads at once: {sizes}; RSS before {before} MB, peak while they ran {peak} MB; a produce to the same partition meanwhile: {s} {a} in {during:.2f} s")
if s == 200:
    acked[1][a["offset"]] = "during"

# 4. Idle connections against broker 1 (RLIMIT_NOFILE 256).
conns = []
for _ in range(300):
    try:
        c = socket.create_connection(("127.0.0.1", ports(1)[1]), timeout=2)
        conns.append(c)
    except OSError as e:
        say("   connect:", e); break
time.sleep(1)
closed = 0
for c in conns:
    c.setblocking(False)
    try:
        if c.recv(1) == b"":
            closed += 1
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
ok = sum(produce(p, f"under-siege-{p}") for p in (0, 1, 2))
say(f"4. 300 idle connections to broker 1's replication listener: {closed} closed at once by the cap; produces meanwhile ok: {ok}/3")
for c in conns: c.close()
time.sleep(1)
s, a = http("GET", ports(1)[0], "/v1/debug/replicas")
offline = [r for r in a["replicas"] if r.get("role") == "offline"] if s == 200 else "?"
say("   broker 1's replicas after release:", s, "offline:", offline, "; checkpoint errors in its log:",
    open(f"{ROOT}/b1/broker.log").read().count("Too many open files"))

# 5. metadata/ deleted.
procs[3].send_signal(signal.SIGTERM); procs[3].wait(timeout=20)
shutil.move(f"{ROOT}/b3/data/metadata", f"{ROOT}/b3-metadata")
r = subprocess.run([BROKER, "--config", f"{ROOT}/b3/node.toml"], capture_output=True, text=True, timeout=30)
say("5. restart without metadata/: exit", r.returncode, "|", (r.stderr.strip().splitlines() or [""])[0][:400])
shutil.move(f"{ROOT}/b3-metadata", f"{ROOT}/b3/data/metadata")
start(3)

# 6. harness check on garbage.
with open(f"{ROOT}/g.jsonl", "w") as f:
    f.write("this is total garbage, not json")
r = subprocess.run([HARNESS, "check", f"{ROOT}/g.jsonl", "--model", "log"], capture_output=True, text=True)
say("6. harness check garbage: exit", r.returncode, "|", (r.stdout + r.stderr).strip().splitlines()[-1][:200])
r = subprocess.run(f"{HARNESS} check /dev/zero --model log", shell=True, capture_output=True, text=True, timeout=120)
say("6. harness check /dev/zero: exit", r.returncode, "|", (r.stdout + r.stderr).strip().splitlines()[-1][:200])

# 7. harness serve: a FIFO and a big file in the store.
store = f"{ROOT}/store"
os.makedirs(f"{store}/log/x", exist_ok=True)
os.mkfifo(f"{store}/log/x/fifo.jsonl")
with open(f"{store}/log/x/big.jsonl", "wb") as f:
    f.write(b"{}\n" * 3_500_000)
sp = subprocess.Popen([HARNESS, "serve", "--store", store, "--port", "29990"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(1.5)
s, a = http("GET", 29990, "/log/x/fifo.jsonl", raw=True, timeout=10)
say("7. serve a FIFO:", s, a[:100] if isinstance(a, (bytes, str)) else a)
got = []
def fetch():
    s, a = http("GET", 29990, "/log/x/big.jsonl", raw=True, timeout=60)
    got.append((s, len(a)))
ts = [threading.Thread(target=fetch) for _ in range(50)]
for t in ts: t.start()
peak = 0
while any(t.is_alive() for t in ts):
    peak = max(peak, rss_mb(sp.pid) or 0); time.sleep(0.05)
say(f"7. 50 clients fetching a {os.path.getsize(store + '/log/x/big.jsonl')//1_000_000} MB file: statuses {sorted(set(g[0] for g in got))}, sizes {sorted(set(g[1] for g in got))}, serve's peak RSS {peak} MB")
sp.terminate(); sp.wait()

# Every acknowledged record still readable.
time.sleep(3)
missing = 0
for p, values in acked.items():
    found = {}
    for i in (1, 2, 3):
        off = 0
        while True:
            s, a = http("GET", ports(i)[0], f"/v1/topics/f/partitions/{p}/records?offset={off}&max_bytes=67108864")
            if s != 200:
                break
            for rec in a["records"]:
                found[rec["offset"]] = rec["value"]
            if not a["records"] or a["records"][-1]["offset"] + 1 >= a["high_watermark"]:
                break
            off = a["records"][-1]["offset"] + 1
        if found:
            break
    lost = [o for o, v in values.items() if found.get(o) != v]
    missing += len(lost)
    say(f"partition {p}: {len(values)} acknowledged, {len(values) - len(lost)} read back")
say("acknowledged records missing or changed:", missing)
for p in procs.values():
    p.send_signal(signal.SIGTERM)
for p in procs.values():
    p.wait(timeout=20)
say("exit codes:", {i: p.returncode for i, p in procs.items()})
shutil.rmtree(ROOT, ignore_errors=True)
