#!/usr/bin/env python3
"""GGUF reader and model loader against valid and malformed files.

Files are written by a small serializer here (independent of pllm's parser and of the gguf
package), so every byte can be controlled: valid v2/v3 files with every metadata value type,
then one defect at a time. Each defect must give an error that names the file, the field or
tensor, and the byte offset where it applies; truncation at every prefix length of the header
must be a clean error, never a crash. The gguf package's own writer is also checked to
produce files pllm loads.

usage: gguf_malformed.py PATH/TO/gguf_check
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

CHECK = sys.argv[1]
TMP = tempfile.mkdtemp(prefix="gguf_", dir=os.environ.get("PLLM_TEST_TMP"))
failures = []

# value type ids
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
              BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}


def enc_str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def enc_value(t, v):
    if t == STR:
        return enc_str(v)
    if t == ARR:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        for it in items:
            out += enc_value(et, it)
        return out
    return struct.pack(SCALAR_FMT[t], v)


class Model:
    """A tiny llama: every hyperparameter and tensor, F32 weights."""

    def __init__(self, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96, n_vocab=48, seed=0):
        rng = np.random.default_rng(seed)
        self.version = 3
        self.alignment = None
        hd = n_embd // n_head
        self.kv = [
            ("general.architecture", STR, "llama"),
            ("general.name", STR, "tiny test model"),
            ("llama.block_count", U32, n_layer),
            ("llama.context_length", U32, 256),
            ("llama.embedding_length", U32, n_embd),
            ("llama.feed_forward_length", U32, n_ff),
            ("llama.attention.head_count", U32, n_head),
            ("llama.attention.head_count_kv", U32, n_head_kv),
            ("llama.rope.freq_base", F32, 10000.0),
            ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
            ("tokenizer.ggml.tokens", ARR, (STR, [f"t{i}" for i in range(n_vocab)])),
        ]
        # tensors: (name, ne list, ggml type, bytes)
        self.tensors = []

        def add(name, *ne):
            a = rng.standard_normal(int(np.prod(ne))).astype(np.float32) * 0.1
            self.tensors.append([name, list(ne), 0, a.tobytes()])

        add("token_embd.weight", n_embd, n_vocab)
        add("output_norm.weight", n_embd)
        for i in range(n_layer):
            add(f"blk.{i}.attn_norm.weight", n_embd)
            add(f"blk.{i}.attn_q.weight", n_embd, n_head * hd)
            add(f"blk.{i}.attn_k.weight", n_embd, n_head_kv * hd)
            add(f"blk.{i}.attn_v.weight", n_embd, n_head_kv * hd)
            add(f"blk.{i}.attn_output.weight", n_head * hd, n_embd)
            add(f"blk.{i}.ffn_norm.weight", n_embd)
            add(f"blk.{i}.ffn_gate.weight", n_embd, n_ff)
            add(f"blk.{i}.ffn_up.weight", n_embd, n_ff)
            add(f"blk.{i}.ffn_down.weight", n_ff, n_embd)
        self.offset_override = {}

    def set_kv(self, key, t, v):
        for i, (k, _, _) in enumerate(self.kv):
            if k == key:
                self.kv[i] = (key, t, v)
                return
        self.kv.append((key, t, v))

    def drop_kv(self, key):
        self.kv = [e for e in self.kv if e[0] != key]

    def tensor(self, name):
        return next(t for t in self.tensors if t[0] == name)

    def serialize(self):
        align = self.alignment or 32
        kv = list(self.kv)
        if self.alignment:
            kv.append(("general.alignment", U32, self.alignment))
        head = b"GGUF" + struct.pack("<IQQ", self.version, len(self.tensors), len(kv))
        for k, t, v in kv:
            head += enc_str(k) + struct.pack("<I", t) + enc_value(t, v)
        offsets, off = [], 0
        for name, ne, gt, data in self.tensors:
            offsets.append(self.offset_override.get(name, off))
            off += (len(data) + align - 1) // align * align
        for (name, ne, gt, data), o in zip(self.tensors, offsets):
            head += enc_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
            head += struct.pack("<IQ", gt, o)
        head += b"\0" * ((-len(head)) % align)
        body = b""
        for name, ne, gt, data in self.tensors:
            body += data + b"\0" * ((-len(data)) % align)
        return head + body

    def write(self, name):
        path = os.path.join(TMP, name + ".gguf")
        with open(path, "wb") as f:
            f.write(self.serialize())
        return path


def run(path, *extra):
    r = subprocess.run([CHECK, *extra, path], capture_output=True, timeout=60)
    r.stdout = r.stdout.decode("utf-8", "replace"); r.stderr = r.stderr.decode("utf-8", "replace")
    if r.returncode not in (0, 1):
        return None, f"crashed or aborted (exit {r.returncode}): {r.stderr.strip()[:300]}"
    return r.returncode == 0, r.stdout.strip()


def expect_ok(label, path, *extra):
    ok, out = run(path, *extra)
    if not ok:
        failures.append(f"{label}: expected success, got: {out}")
    return out


def expect_error(label, path, *needles):
    ok, out = run(path)
    if ok is None or ok:
        failures.append(f"{label}: expected an error, got: {out}")
        return
    missing = [n for n in (path,) + needles if n not in out]
    if missing:
        failures.append(f"{label}: message lacks {missing}: {out}")
    else:
        print(f"ok   {label}: {out[len('ERROR '):][:150]}")


# --- valid files ------------------------------------------------------------------------
m = Model()
out = expect_ok("valid v3", m.write("valid_v3"))
if "layers=2 heads=4 kv_heads=2 head_dim=16 ff=96" not in out or "tied=1" not in out:
    failures.append(f"valid v3: wrong config: {out}")
m = Model(); m.version = 2
expect_ok("valid v2", m.write("valid_v2"))
m = Model(); m.alignment = 64
expect_ok("alignment 64", m.write("align64"))
m = Model(); m.tensors.append(["output.weight", [64, 48], 0, np.zeros(64 * 48, np.float32).tobytes()])
if "tied=0" not in expect_ok("untied output", m.write("untied")):
    failures.append("untied output not detected")

# every metadata value type round-trips through the parser
m = Model()
values = [("t.u8", U8, 200), ("t.i8", I8, -100), ("t.u16", U16, 60000), ("t.i16", I16, -30000),
          ("t.u32", U32, 4000000000), ("t.i32", I32, -2000000000), ("t.f32", F32, 1.5),
          ("t.bool", BOOL, True), ("t.str", STR, "héllo \"q\"\n"), ("t.u64", U64, 2**63 + 5),
          ("t.i64", I64, -2**62), ("t.f64", F64, 2.718281828459045),
          ("t.arr_i32", ARR, (I32, [1, -2, 3])), ("t.arr_str", ARR, (STR, ["a", "", "ccc"])),
          ("t.arr_f32", ARR, (F32, [0.5, -0.25])), ("t.arr_nested", ARR, (ARR, [(U8, [1, 2]), (U8, [])])),
          ("t.arr_empty", ARR, (U32, []))]
for k, t, v in values:
    m.set_kv(k, t, v)
path = m.write("all_types")
ok, out = run(path, "--dump")
got = {}
if ok:
    for line in out.splitlines():
        d = json.loads(line)
        if "key" in d:
            got[d["key"]] = d["value"]
want = {"t.u8": 200, "t.i8": -100, "t.u16": 60000, "t.i16": -30000, "t.u32": 4000000000, "t.i32": -2000000000,
        "t.f32": 1.5, "t.bool": True, "t.str": "héllo \"q\"\n", "t.u64": 2**63 + 5, "t.i64": -2**62,
        "t.f64": 2.718281828459045, "t.arr_i32": [1, -2, 3], "t.arr_str": ["a", "", "ccc"],
        "t.arr_f32": [0.5, -0.25], "t.arr_nested": [None, None], "t.arr_empty": []}
for k, v in want.items():
    if got.get(k) != v:
        failures.append(f"metadata type round trip: {k}: want {v!r}, got {got.get(k)!r}")
print(f"metadata value types: {sum(got.get(k) == v for k, v in want.items())}/{len(want)} round-trip")
expect_ok("all metadata types", path)

# the gguf package's writer (an independent producer)
try:
    import gguf
    w = gguf.GGUFWriter(os.path.join(TMP, "pkg_writer.gguf"), "llama")
    w.add_block_count(1); w.add_context_length(128); w.add_embedding_length(32)
    w.add_feed_forward_length(64); w.add_head_count(2); w.add_head_count_kv(1)
    w.add_rope_freq_base(10000.0); w.add_layer_norm_rms_eps(1e-5); w.add_vocab_size(16)
    rng = np.random.default_rng(1)
    def t(name, *shape):
        w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    t("token_embd.weight", 16, 32); t("output_norm.weight", 32)
    t("blk.0.attn_norm.weight", 32); t("blk.0.attn_q.weight", 32, 32); t("blk.0.attn_k.weight", 16, 32)
    t("blk.0.attn_v.weight", 16, 32); t("blk.0.attn_output.weight", 32, 32); t("blk.0.ffn_norm.weight", 32)
    t("blk.0.ffn_gate.weight", 64, 32); t("blk.0.ffn_up.weight", 64, 32); t("blk.0.ffn_down.weight", 32, 64)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    expect_ok("gguf package writer", os.path.join(TMP, "pkg_writer.gguf"))
except ImportError:
    failures.append("the gguf package is missing: run scripts/setup.sh")

# --- malformed files --------------------------------------------------------------------
good = Model().serialize()


def write_bytes(name, b):
    path = os.path.join(TMP, name + ".gguf")
    with open(path, "wb") as f:
        f.write(b)
    return path


expect_error("bad magic", write_bytes("bad_magic", b"GGUX" + good[4:]), "bad magic", "byte offset 0")
expect_error("version 1", write_bytes("v1", good[:4] + struct.pack("<I", 1) + good[8:]), "version 1", "byte offset 4")
expect_error("version 9", write_bytes("v9", good[:4] + struct.pack("<I", 9) + good[8:]), "version 9")
expect_error("empty file", write_bytes("empty", b""), "truncated")
expect_error("huge tensor count", write_bytes("huge_tc", good[:8] + struct.pack("<Q", 2**60) + good[16:]),
             "tensor count", "byte offset 8")
expect_error("huge metadata count", write_bytes("huge_kc", good[:16] + struct.pack("<Q", 2**62) + good[24:]),
             "metadata count", "byte offset 16")

m = Model(); m.tensor("blk.1.attn_v.weight")[2] = 99
expect_error("unknown tensor type", m.write("unknown_type"), "blk.1.attn_v.weight", "unknown tensor type 99", "byte offset")
m = Model(); t = m.tensor("blk.0.ffn_up.weight"); t[2] = 10; t[3] = t[3][: 96 * 64 // 256 * 84]
expect_error("unsupported tensor type", m.write("q2k"), "blk.0.ffn_up.weight", "Q2_K", "not supported", "byte offset")
m = Model(); m.offset_override["blk.1.ffn_down.weight"] = 1 << 40
expect_error("tensor data out of bounds", m.write("oob"), "blk.1.ffn_down.weight", "out of bounds", "byte offset")
m = Model(); m.offset_override["blk.0.attn_k.weight"] = 8
expect_error("misaligned tensor", m.write("misaligned"), "blk.0.attn_k.weight", "alignment")
m = Model(); t = m.tensor("blk.0.attn_q.weight"); t[1] = [64, 32]; t[3] = t[3][: 64 * 32 * 4]
expect_error("shape vs hyperparameters", m.write("bad_shape"), "blk.0.attn_q.weight", "shape", "[64, 32]", "[64, 64]")
m = Model(); t = m.tensor("output_norm.weight"); t[1] = [63]; t[3] = t[3][: 63 * 4]
expect_error("vector shape", m.write("bad_vec"), "output_norm.weight", "shape")
m = Model(); m.tensors = [t for t in m.tensors if t[0] != "blk.1.ffn_up.weight"]
expect_error("missing tensor", m.write("missing_tensor"), "missing tensor 'blk.1.ffn_up.weight'")
m = Model(); m.set_kv("general.architecture", STR, "mamba")
expect_error("unsupported architecture", m.write("arch"), "unsupported architecture 'mamba'", "supported: llama", "byte offset")
m = Model(); m.drop_kv("llama.block_count")
expect_error("missing hyperparameter", m.write("no_blocks"), "missing metadata key 'llama.block_count'")
m = Model(); m.set_kv("llama.embedding_length", STR, "64")
expect_error("hyperparameter of wrong type", m.write("hp_type"), "llama.embedding_length", "type string", "byte offset")
m = Model(); m.set_kv("llama.attention.head_count_kv", U32, 3)
expect_error("head_count_kv not dividing head_count", m.write("gqa"), "llama.attention.head_count_kv", "3")
m = Model(); m.set_kv("llama.attention.head_count", U32, 0)
expect_error("zero heads", m.write("zero_heads"), "llama.attention.head_count")
m = Model(); m.set_kv("t.badbool", BOOL, True)
b = m.serialize(); i = b.index(b"t.badbool") + len("t.badbool") + 4
expect_error("bool not 0/1", write_bytes("badbool", b[:i] + b"\x07" + b[i + 1:]), "t.badbool", "byte offset")
m = Model(); m.set_kv("t.badtype", U32, 1)
b = m.serialize(); i = b.index(b"t.badtype") + len("t.badtype")
expect_error("unknown value type", write_bytes("badvtype", b[:i] + struct.pack("<I", 77) + b[i + 4:]),
             "t.badtype", "unknown value type 77", "byte offset")
m = Model(); m.set_kv("t.longstr", STR, "abc")
b = m.serialize(); i = b.index(b"t.longstr") + len("t.longstr") + 4
expect_error("string past end", write_bytes("longstr", b[:i] + struct.pack("<Q", 2**50) + b[i + 8:]),
             "t.longstr", "past the end", "byte offset")
m = Model(); m.kv.append(("llama.block_count", U32, 2))
expect_error("duplicate key", m.write("dupkey"), "duplicate metadata key 'llama.block_count'")
m = Model(); m.tensors.append(list(m.tensor("output_norm.weight")))
expect_error("duplicate tensor", m.write("duptensor"), "duplicate tensor 'output_norm.weight'")
m = Model(); m.alignment = 48
expect_error("bad alignment", m.write("align48"), "general.alignment")

# truncation at every prefix of the header and at points inside the data
data_start = len(good) - sum((len(t[3]) + 31) // 32 * 32 for t in Model().tensors)
cuts = list(range(0, data_start + 1, 1 if data_start < 4000 else 3)) + [data_start + 100, len(good) - 1]
crashes = 0
for n in cuts:
    path = write_bytes("trunc", good[:n])
    ok, out = run(path)
    if ok is None:
        crashes += 1
        failures.append(f"truncated at {n}: {out}")
    elif ok:
        failures.append(f"truncated at {n} bytes: loaded without error")
    elif path not in out or not ("truncated" in out or "out of bounds" in out or "past the end" in out or
                                 "larger than the file" in out):
        failures.append(f"truncated at {n}: unclear message: {out}")
print(f"truncation: {len(cuts)} prefix lengths, {crashes} crashes")

# random byte flips in the header: must never crash
rng = np.random.default_rng(7)
for k in range(300):
    b = bytearray(good)
    for _ in range(rng.integers(1, 4)):
        b[rng.integers(0, data_start)] = rng.integers(0, 256)
    path = write_bytes("flip", bytes(b))
    ok, out = run(path)
    if ok is None:
        failures.append(f"byte flip case {k}: {out}")
print("byte flips: 300 cases run")

if failures:
    print(f"{len(failures)} FAILURES:")
    for f in failures:
        print("  " + f)
    sys.exit(1)
shutil.rmtree(TMP, ignore_errors=True)
print("gguf_malformed: all checks passed")
