#!/usr/bin/env python3
"""cli_slurm: the Slurm recipe (examples/slurm/pllm-array.sbatch) on a real single-node Slurm.

The test starts its own cluster on localhost, in a temporary directory, and tears it down
whatever happens: munged (its own key and socket), slurmctld and slurmd in the foreground, on
free ports, with a minimal slurm.conf (no accounting, proctrack/linuxproc, task/none). It
submits a 4-task job array of the recipe over a prompt file (4 documents x 8 questions: the
questions of one document share a ~60-token prefix), requeues one task while it runs
(scontrol requeue JOB_TASK: Slurm's SIGTERM, the task comes back and resumes), waits for the
array, merges the shards with pllm merge --order input --input, and compares with a single run
of the same prompts:
  - the same greedy text for every id, every id exactly once, in input order;
  - counters that add up: completed requests, prompt, output and cached tokens equal the single
    run's (prefix groups are not split, so cached tokens are too), and the merged engine
    counters are the sums over the shards' attempts;
  - the requeued task's sidecar has two attempts, the first stopped (exit 130) with part of its
    shard written, the second skipped what the first finished (--resume) and completed it.

Needs root (the daemons) and Debian's slurmd, slurmctld, slurm-client and munge
(scripts/setup.sh installs them); without them it is skipped (exit 77) saying why.
Takes ~20 s on 2 cores.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from cli_util import MODEL, PLLM, Test, read_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = os.path.join(ROOT, "examples", "slurm", "pllm-array.sbatch")
DEADLINE = 150  # seconds for the whole array (it takes ~10)


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


need = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo"]
missing = [b for b in need if not shutil.which(b, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")]
if os.geteuid() != 0:
    skip("not root: the test starts slurmctld, slurmd and munged (CI runs as root)")
if missing:
    skip(f"{', '.join(missing)} not installed (scripts/setup.sh installs slurmd slurmctld slurm-client munge)")

t = Test("cli_slurm")
t.need_model()
PATH = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
# munge's socket path must fit a sockaddr_un: a short directory of its own under /tmp
base = tempfile.mkdtemp(prefix="pllm-slurm-", dir="/tmp")
procs = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def bin_(name):
    return shutil.which(name, path=PATH)


conf = os.path.join(base, "slurm.conf")
env = dict(os.environ, SLURM_CONF=conf, PATH=PATH)
for v in list(env):
    if v.startswith("SLURM_") and v != "SLURM_CONF":
        del env[v]  # a test run inside a Slurm job must not leak that job's settings


def sh(args, timeout=30, check=False):
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def teardown():
    if os.path.exists(conf):
        try:
            sh(["scancel", "--quiet", "--user", "root"], timeout=10)
        except Exception:
            pass
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    # munged forks into the background: its pid file
    pidf = os.path.join(base, "munged.pid")
    if os.path.exists(pidf):
        try:
            pid = int(open(pidf).read().strip())
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):  # it writes its seed file on the way out: wait, then remove
                os.kill(pid, 0)
                time.sleep(0.05)
        except (ValueError, ProcessLookupError):
            pass


def dump_logs():
    for name in ("slurmctld.log", "slurmd.log", "munged.log"):
        p = os.path.join(base, name)
        if os.path.exists(p):
            print(f"---- {name} (last 30 lines)")
            print("".join(open(p, errors="replace").readlines()[-30:]))
    for f in sorted(os.listdir(base)):
        if f.startswith("task-"):
            print(f"---- {f}")
            print(open(os.path.join(base, f), errors="replace").read()[-2000:])


def start_cluster():
    key = os.path.join(base, "munge.key")
    with open(key, "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(key, 0o600)
    os.chmod(base, 0o700)
    sock = os.path.join(base, "munge.sock")
    r = sh([bin_("munged"), "--force", f"--key-file={key}", f"--socket={sock}",
            f"--pid-file={base}/munged.pid", f"--log-file={base}/munged.log",
            f"--seed-file={base}/munged.seed"])
    if r.returncode != 0:
        raise RuntimeError(f"munged: {r.stderr.strip()}")
    for d in ("state", "spool"):
        os.makedirs(os.path.join(base, d))
    cpus = os.cpu_count() or 2
    with open(conf, "w") as f:
        f.write(f"""ClusterName=pllmtest
SlurmctldHost=localhost
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock},cred_expire=5
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool
SlurmctldPidFile={base}/slurmctld.pid
SlurmdPidFile={base}/slurmd.pid
SlurmctldLogFile={base}/slurmctld.log
SlurmdLogFile={base}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
PlugStackConfig={base}/plugstack.conf
InactiveLimit=0
MinJobAge=600
KillWait=5
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=localhost CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
""")
    open(os.path.join(base, "plugstack.conf"), "w").close()
    for cmd in ([bin_("slurmctld"), "-D", "-i", "-f", conf], [bin_("slurmd"), "-D", "-N", "localhost", "-f", conf]):
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(base, os.path.basename(cmd[0]) + ".err"), "w")))
    t0 = time.time()
    while time.time() - t0 < 30:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[0]} exited with {p.returncode}")
        r = sh(["sinfo", "-h", "-N", "-o", "%T"])
        if r.returncode == 0 and r.stdout.strip() in ("idle", "mixed", "allocated"):
            return time.time() - t0
        time.sleep(0.2)
    raise RuntimeError(f"the node did not come up in 30 s (sinfo: {r.stdout.strip()} {r.stderr.strip()})")


DOCS = ["The river Lune rises in the Howgill Fells and flows through Kirkby Lonsdale and Lancaster before reaching Morecambe Bay. Its valley holds old bridges, a castle and a railway viaduct.",
        "A compiler turns source code into machine code in stages: lexing splits text into tokens, parsing builds a syntax tree, and code generation emits instructions for the processor.",
        "Bees live in colonies with one queen, thousands of workers and a few hundred drones. Workers gather nectar and pollen, build wax comb, feed larvae and guard the entrance.",
        "The piano has eighty-eight keys. Pressing a key lifts a damper and throws a felt hammer against steel strings; the soundboard amplifies their vibration."]
QS = ["Summarise this in one sentence.", "What is the main topic?", "Give one fact from the text.",
      "Ask a question about it.", "Name a noun in the text.", "Is this text about nature?",
      "Which word is the longest?", "Say it to a child."]
N = 4
COMMON = ["--model", MODEL, "--quiet", "--max-seqs", "2", "--num-blocks", "512"]


def main():
    prompts = t.write("prompts.jsonl", [{"id": f"d{d}q{q}", "prompt": f"{doc}\n\nQuestion: {qq}\nAnswer:", "max_tokens": 24}
                                        for d, doc in enumerate(DOCS) for q, qq in enumerate(QS)])
    ids = [f"d{d}q{q}" for d in range(len(DOCS)) for q in range(len(QS))]
    # the single run to compare with
    single = t.path("single.jsonl")
    rc, _, err = t.run(["generate", prompts, "-o", single, "--stats-json", single + ".stats.json", "-t", "2", *COMMON, "--window", "1"])
    t.check(rc == 0, f"single run: exit {rc}: {err[-500:]}")
    one = {r["id"]: r for r in read_records(single)}
    one_stats = json.load(open(single + ".stats.json"))

    up = start_cluster()
    print(f"slurm up in {up:.1f} s ({base})", flush=True)
    out = os.path.join(base, "out")
    jenv = dict(env, INPUT=prompts, OUTDIR=out, PLLM=os.path.abspath(PLLM))
    t0 = time.time()
    r = subprocess.run(["sbatch", "--parsable", f"--array=0-{N - 1}", "--requeue", "-D", base,
                        "-o", f"{base}/task-%A_%a.log", RECIPE, *COMMON, "--window", "1"],
                       env=jenv, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"sbatch: {r.stderr.strip()}")
    job = r.stdout.strip().split(";")[0]
    print(f"submitted array job {job}", flush=True)

    # requeue the first task seen running with part of its shard written
    victim = None
    while victim is None and time.time() - t0 < DEADLINE:
        for k in range(N):
            o = os.path.join(out, f"shard-{k}-of-{N}.jsonl")
            try:
                lines = open(o).read().count("\n")
                sc = json.load(open(o + ".shard.json"))
            except (OSError, ValueError):
                continue
            if lines >= 1 and not sc.get("complete") and sc["attempts"][-1]["finished_at"] is None:
                rq = sh(["scontrol", "requeue", f"{job}_{k}"])
                t.check(rq.returncode == 0, f"scontrol requeue {job}_{k}: {rq.stderr.strip()}")
                victim = k
                print(f"requeued task {k} with {lines} lines of its shard written", flush=True)
                break
        time.sleep(0.02)
    t.check(victim is not None, "no task was seen running to requeue")

    # wait for the array: every task gone from the queue
    while time.time() - t0 < DEADLINE:
        q = sh(["squeue", "-h", "-r", "-j", job, "-o", "%i %T %r"])
        if q.returncode == 0 and not q.stdout.strip():
            break
        time.sleep(0.5)
    else:
        t.check(False, f"the array did not finish in {DEADLINE} s: {q.stdout.strip()}")
    print(f"array done in {time.time() - t0:.1f} s", flush=True)
    for k in range(N):
        s = sh(["scontrol", "-o", "show", "job", f"{job}_{k}"])
        state = [w for w in s.stdout.split() if w.startswith("JobState=")]
        t.check(state == ["JobState=COMPLETED"], f"task {k}: {state or s.stderr.strip()}")

    # the requeued task: stopped, then resumed
    if victim is not None:
        sc = json.load(open(os.path.join(out, f"shard-{victim}-of-{N}.jsonl.shard.json")))
        att = sc["attempts"]
        t.check(len(att) == 2, f"task {victim}: {len(att)} attempts, expected 2 (stopped + resumed)")
        if len(att) == 2:
            t.check(att[0]["exit"] == 130, f"task {victim}: first attempt exit {att[0]['exit']}, expected 130 (SIGTERM)")
            t.check(0 < att[0]["lines_written"] < sc["records_in_shard"],
                    f"task {victim}: first attempt wrote {att[0]['lines_written']} of {sc['records_in_shard']}")
            t.check(att[1]["skipped_by_resume"] == att[0]["lines_written"] and att[1]["exit"] == 0,
                    f"task {victim}: the resumed attempt skipped {att[1]['skipped_by_resume']} (first wrote {att[0]['lines_written']}), exit {att[1]['exit']}")
        t.check(sc["complete"] is True, f"task {victim}: sidecar not complete")

    # merge and compare
    merged = os.path.join(base, "merged.jsonl")
    shards = [os.path.join(out, f"shard-{k}-of-{N}.jsonl") for k in range(N)]
    rc, _, err = t.run(["merge", *shards, "-o", merged, "--order", "input", "--input", prompts,
                        "--stats-json", merged + ".stats.json"])
    print(err.strip())
    t.check(rc == 0, f"merge: exit {rc}")
    recs = read_records(merged)
    got = [r["id"] for r in recs]
    t.check(got == ids, f"merged ids (in input order, each once): {got}")
    t.check(all("input_index" not in r for r in recs), "merge left input_index in the records")
    diff = [r["id"] for r in recs if one.get(r["id"], {}).get("text") != r["text"]]
    t.check(not diff, f"greedy text differs from the single run for {diff}")
    ms = json.load(open(merged + ".stats.json"))
    for k in ("completed", "failed", "total_input_tokens", "total_output_tokens"):
        t.check(ms[k] == one_stats[k], f"merged {k} {ms[k]} != single run's {one_stats[k]}")
    # cached tokens: per id as in the single run (a prefix group is never split), except in the
    # requeued shard, whose resumed attempt starts with a cold cache and computes its group's
    # prefix once more
    vids = {r["id"] for r in read_records(os.path.join(out, f"shard-{victim}-of-{N}.jsonl"))} if victim is not None else set()
    cdiff = [r["id"] for r in recs if r["id"] not in vids and r["cached_tokens"] != one[r["id"]]["cached_tokens"]]
    t.check(not cdiff, f"cached tokens differ from the single run for {cdiff}")
    t.check(ms["total_cached_tokens"] <= one_stats["total_cached_tokens"], "more cached tokens than the single run")
    t.check(ms["total_cached_tokens"] == sum(r["cached_tokens"] for r in recs), "merged cached tokens are not the records' sum")
    # engine counters: the sums over every attempt of every shard
    scs = [json.load(open(s + ".shard.json")) for s in shards]
    steps = sum(a["counters"]["steps"] for s in scs for a in s["attempts"])
    t.check(ms["counters"]["steps"] == steps, f"merged steps {ms['counters']['steps']} != sum over attempts {steps}")
    t.check(sum(s["records_in_shard"] for s in scs) == len(ids), "records_in_shard do not add up to the input")
    t.check(ms["merge"]["duplicates_removed"] == 0 and ms["merge"]["missing_records"] == 0, f"merge: {ms['merge']}")
    # a shard given twice: duplicates removed, same output
    rc, _, _ = t.run(["merge", *shards, shards[victim or 0], "-o", merged + "2", "--order", "input", "-q"])
    t.check(rc == 0 and open(merged + "2").read() == open(merged).read(), "merging a shard twice changed the output")
    # a missing shard is named (exit 1)
    rc, _, err = t.run(["merge", *shards[:-1], "-o", merged + "3", "--input", prompts])
    t.check(rc == 1 and f"missing shard {N - 1}/{N}" in err, f"a missing shard: exit {rc}: {err[-300:]}")


ok = False
try:
    main()
    ok = not t.failures
except Exception as e:  # noqa: BLE001 - report and tear down
    t.check(False, f"{type(e).__name__}: {e}")
finally:
    teardown()
    if not ok:
        dump_logs()
    shutil.rmtree(base, ignore_errors=True)
t.finish()
