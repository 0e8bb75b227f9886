#!/usr/bin/env python3
"""An input without newlines (a binary file, a huge minified document passed as prompts): the
line reader must not buffer all of it.

`pllm generate -` reads 320 MiB without a newline from a pipe, after one good record. A line
longer than PLLM_READER_MAX_LINE (256 MiB, datasets/io.h) is an error naming the line: pllm
must stop with that message (an error exit, not a signal), and its peak RSS must stay below
what buffering the whole input would cost (checked against 320 MiB x 2 plus the model), so the
reader really stopped at the cap. The same bytes in a .zst file, a JSON list whose element never
ends (the array reader's cap), and a 10 MB line with its newline (accepted) are checked too.
"""
import os
import subprocess
import threading

from rel_common import PLLM, SANITIZE, check, describe_exit, finish, log, need_model, tmpdir

need_model()
TMP = tmpdir("rel_longline_")
MIB = 1 << 20
TOTAL = 320 * MIB


def feed(pipe, first, total):
    try:
        pipe.write(first)
        chunk = b"x" * MIB
        for _ in range(total // MIB):
            pipe.write(chunk)
    except BrokenPipeError:
        pass  # pllm stopped reading: what the test wants
    finally:
        try:
            pipe.close()
        except BrokenPipeError:
            pass


good = b'{"id": "ok", "prompt": "Hello", "max_tokens": 1}\n'
p = subprocess.Popen([PLLM, "generate", "-", "--quiet"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE)
th = threading.Thread(target=feed, args=(p.stdin, good + b'{"id": "big", "prompt": "', TOTAL), daemon=True)
th.start()
errbuf = []
te = threading.Thread(target=lambda: errbuf.append(p.stderr.read()), daemon=True)
te.start()
out = p.stdout.read()
_, status, ru = os.wait4(p.pid, 0)
rc = os.waitstatus_to_exitcode(status)
p.returncode = rc
te.join()
th.join()
err = errbuf[0].decode("utf-8", "replace") if errbuf else ""
peak = ru.ru_maxrss / 1024
log(f"320 MiB without a newline on stdin: {describe_exit(rc)}, peak RSS {peak:.0f} MB; stderr: {err.strip()[-300:]}")
check(rc > 0, f"expected an error exit, got {describe_exit(rc)}")
check("line 2 is longer than 256 MiB" in err, f"the message must name the line and the limit: {err[-300:]}")
# buffering all 320 MiB would take over 640 MB (the buffer doubles, and the line is copied out);
# stopping at the cap keeps it to the 512 MiB buffer. ASan adds its redzones and shadow, so no
# bound is checked there.
if not SANITIZE:
    check(peak < 1000, f"peak RSS {peak:.0f} MB: the reader buffered past its cap")

# the same from a .zst file: the limit applies to the decompressed line
zpath = os.path.join(TMP, "long.jsonl.zst")
z = subprocess.Popen(["zstd", "-q", "-1", "-o", zpath], stdin=subprocess.PIPE)
feed(z.stdin, b'{"id": "big", "prompt": "', 300 * MIB)
z.wait()
r = subprocess.run([PLLM, "generate", zpath, "--quiet"], capture_output=True)
err = r.stderr.decode("utf-8", "replace")
log(f".zst with a 300 MiB line: {describe_exit(r.returncode)}; stderr: {err.strip()[-300:]}")
check(r.returncode > 0 and "line 1 is longer than 256 MiB" in err and "long.jsonl.zst" in err,
      f".zst: expected an error naming the file and line 1: {describe_exit(r.returncode)}: {err[-300:]}")

# a JSON list (ShareGPT style) whose element never ends: the array reader has the same cap
p = subprocess.Popen([PLLM, "generate", "-", "--quiet"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                     stderr=subprocess.PIPE)
th = threading.Thread(target=feed, args=(p.stdin, b'[{"id": "a", "prompt": "Hi"},\n {"id": "big", "prompt": "', TOTAL),
                      daemon=True)
th.start()
err = p.stderr.read().decode("utf-8", "replace")
p.wait()
th.join()
log(f"JSON list, element 2 without end: {describe_exit(p.returncode)}; stderr: {err.strip()[-300:]}")
check(p.returncode > 0 and "array element 2 is longer than 256 MiB" in err,
      f"JSON list: expected an error naming element 2: {describe_exit(p.returncode)}: {err[-300:]}")

# a long line under the limit is a record like any other (rejected by the engine for its length,
# one error record, the run goes on)
path = os.path.join(TMP, "under.jsonl")
with open(path, "w") as f:
    f.write('{"id": "long", "prompt": "' + "word " * (2 * MIB) + '", "max_tokens": 1}\n')
    f.write('{"id": "short", "prompt": "Hello", "max_tokens": 1}\n')
r = subprocess.run([PLLM, "generate", path, "--quiet"], capture_output=True)
ids = [ln.split(b'"id":', 1)[1][:10] for ln in r.stdout.splitlines() if b'"id":' in ln]
log(f"a 10 MB line: {describe_exit(r.returncode)}, {len(ids)} output lines")
check(r.returncode in (0, 1) and len(ids) == 2, f"a 10 MB line is a record: {describe_exit(r.returncode)}: "
                                                 f"{r.stderr.decode()[-300:]}")

finish("rel_long_line")
